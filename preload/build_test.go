package preload_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/softroce/softroce/preload"
)

func needCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil && os.Getenv("CI") == "" {
		t.Skip("no C compiler:", err)
	}
}

func TestPathBuildsOnceAndConcurrently(t *testing.T) {
	needCC(t)
	dir := t.TempDir()
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = preload.Path(preload.Config{CacheDir: dir})
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if paths[i] != paths[0] {
			t.Fatalf("concurrent builds gave %q and %q", paths[0], paths[i])
		}
	}
	st, err := os.Stat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o005 != 0o005 {
		t.Errorf("library mode %v: other users cannot load it", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("cache holds %d entries, want the library only", len(ents))
	}
	// A second call finds the build: same path, same file.
	again, err := preload.Path(preload.Config{CacheDir: dir})
	if err != nil || again != paths[0] {
		t.Fatalf("second Path = %q, %v", again, err)
	}
	st2, _ := os.Stat(again)
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the library was rebuilt")
	}
	// The build is keyed by the compiler too.
	other, err := preload.Path(preload.Config{CacheDir: dir, CC: "gcc"})
	if err != nil {
		t.Fatal(err)
	}
	if other == paths[0] {
		t.Error("another compiler reused the build")
	}
}

func TestLibraryWrapsTheDeviceCalls(t *testing.T) {
	needCC(t)
	so, err := preload.Path(preload.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nm", "-D", "--defined-only", so).Output()
	if err != nil {
		t.Skip("nm:", err)
	}
	defined := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && (f[1] == "T" || f[1] == "W") {
			defined[f[2]] = true
		}
	}
	for _, name := range []string{"open", "open64", "openat", "openat64", "__open_2", "__open64_2",
		"stat", "stat64", "lstat", "fstat", "fstat64", "fstatat", "fstatat64", "statx",
		"__xstat", "__fxstat", "__lxstat", "__fxstatat", "ioctl", "write", "read", "mmap", "mmap64",
		"close", "socket", "dup2", "dup3"} {
		if !defined[name] {
			t.Errorf("%s is not exported by %s", name, filepath.Base(so))
		}
	}
}

func TestBadCompilerIsAClearError(t *testing.T) {
	_, err := preload.Path(preload.Config{CacheDir: t.TempDir(), CC: "/nonexistent/cc"})
	if err == nil || !strings.Contains(err.Error(), "C compiler") {
		t.Fatalf("err = %v, want one that names the C compiler", err)
	}
}
