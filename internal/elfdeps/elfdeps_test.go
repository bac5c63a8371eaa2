package elfdeps

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

func TestSharedLibsOfHostBinaries(t *testing.T) {
	for _, c := range []struct {
		name string
		bin  string
		want []string // basenames that must be among the libraries
	}{
		{"dynamic", "/usr/bin/ip", []string{"ld-linux-x86-64.so.2", "libc.so.6"}},
		{"provider deps", "/usr/lib/x86_64-linux-gnu/libibverbs.so.1", []string{"libc.so.6", "libnl-3.so.200"}},
		// busctl finds libsystemd-shared-N.so through its DT_RUNPATH
		// (/usr/lib/x86_64-linux-gnu/systemd), in no directory of LibDirs.
		{"runpath", "/usr/bin/busctl", []string{"libsystemd-shared-"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := os.Stat(c.bin)
			testenv.Require(t, err == nil, c.bin+" is not installed (apt-get install iproute2 ibverbs-providers systemd)")
			libs, err := SharedLibs("", []string{c.bin})
			if err != nil {
				t.Fatal(err)
			}
			var base []string
			for _, l := range libs {
				base = append(base, filepath.Base(l))
			}
			for _, w := range c.want {
				if !slices.ContainsFunc(base, func(b string) bool { return b == w || strings.HasSuffix(w, "-") && strings.HasPrefix(b, w) }) {
					t.Errorf("libraries %v lack %s", base, w)
				}
			}
		})
	}
	if _, err := SharedLibs("", []string{"/nonexistent"}); err == nil {
		t.Error("no error for a missing binary")
	}
}

// TestSharedLibsStayInsideRoot checks that a tree is searched, not the
// host: a host binary copied into an empty tree needs libraries the tree
// lacks, and the error says which one and wraps fs.ErrNotExist; once the
// libraries are copied in, the paths come back relative to the tree.
func TestSharedLibsStayInsideRoot(t *testing.T) {
	const bin = "/usr/bin/ip"
	host, err := SharedLibs("", []string{bin})
	testenv.Require(t, err == nil, bin+" and its libraries are not installed (apt-get install iproute2)")
	root := t.TempDir()
	copyIn(t, root, bin)
	if _, err := SharedLibs(root, []string{bin}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SharedLibs on a tree without libraries: %v, want fs.ErrNotExist", err)
	}
	for _, l := range host {
		copyIn(t, root, l)
	}
	got, err := SharedLibs(root, []string{bin})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, host) {
		t.Errorf("libraries in the tree %v, want the host's %v", got, host)
	}
}

func copyIn(t *testing.T, root, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
