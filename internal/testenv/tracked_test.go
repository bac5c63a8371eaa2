package testenv

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedSize is the largest file the repository may track: the
// biggest real capture in testdata is under 0.5 MB, a Go binary is ~8 MB.
const maxTrackedSize = 4 << 20

// trackedBuildOutputs lists the files git tracks under root (the index,
// so a file staged but not yet committed counts) that are build outputs:
// ELF executables or objects, or anything over maxTrackedSize. It returns
// errNoGit when root is not in a git checkout or git is missing.
func trackedBuildOutputs(root string) ([]string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errNoGit
	}
	top, err := exec.Command("git", "-C", root, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return nil, errNoGit
	}
	dir := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z", "--cached").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var bad []string
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			continue // deleted in the work tree
		}
		st, err := f.Stat()
		var magic [4]byte
		n, _ := io.ReadFull(f, magic[:])
		f.Close()
		switch {
		case err != nil || st.IsDir():
		case st.Size() > maxTrackedSize:
			bad = append(bad, fmt.Sprintf("%s (%d bytes)", name, st.Size()))
		case n == 4 && bytes.Equal(magic[:], []byte("\x7fELF")):
			bad = append(bad, name+" (ELF)")
		}
	}
	return bad, nil
}

var errNoGit = fmt.Errorf("not in a git checkout")

// TestNoBuildOutputsTracked fails when the repository tracks a build
// output (a binary from go build, or any file over 4 MB); it skips outside
// a git checkout (a module download has no .git).
func TestNoBuildOutputsTracked(t *testing.T) {
	bad, err := trackedBuildOutputs(".")
	if err == errNoGit {
		t.Skip("skipping: not in a git checkout")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("git tracks build outputs (git rm --cached them and extend .gitignore): %s", strings.Join(bad, ", "))
	}
}

// TestTrackedBuildOutputsFound: in a scratch repository, a staged ELF file
// and a staged 5 MB file are reported, a small text file is not.
func TestTrackedBuildOutputsFound(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("skipping: no git")
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"prog":      append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...),
		"big.pcap":  make([]byte, 5<<20),
		"README.md": []byte("text\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	bad, err := trackedBuildOutputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bad, ", "); got != "big.pcap (5242880 bytes), prog (ELF)" {
		t.Fatalf("reported %q", got)
	}
}
