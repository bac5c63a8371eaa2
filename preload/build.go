// Package preload holds the C preload library (LD_PRELOAD) that presents
// softroce's emulated device to unmodified libibverbs programs, builds it
// with the system C compiler, and defines the RPC between it and the daemon
// (proto.go).
//
// The library is built from the source in this package on first use, into
// the user's cache directory ($XDG_CACHE_HOME/softroce, else
// ~/.cache/softroce), under a name that carries a hash of the source and
// the compiler command: a changed source builds anew, and concurrent first
// uses each build to a temporary file and rename it into place atomically.
package preload

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// files holds the library's C sources: softroce_preload.c, the files that
// each present one more kernel interface, and their shared header.
//
//go:embed c/*.c c/*.h
var files embed.FS

// sourceNames lists the library's files in a fixed order (sorted by name).
func sourceNames() []string {
	ents, err := files.ReadDir("c")
	if err != nil {
		panic(err) // embedded at build time
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// readSource returns the embedded file c/name.
func readSource(name string) []byte {
	b, err := files.ReadFile("c/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return b
}

// source is every file of the library, concatenated in sourceNames' order.
var source = func() []byte {
	var all []byte
	for _, n := range sourceNames() {
		all = append(all, readSource(n)...)
	}
	return all
}()

// Source returns the C source of the library: its files concatenated.
func Source() []byte { return bytes.Clone(source) }

// cflags are the compiler flags; part of the cache key.
var cflags = []string{"-shared", "-fPIC", "-O2", "-Wall", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0"}

// libs are linked after the source.
var libs = []string{"-ldl"}

// Config says where and how to build. The zero value uses the cache
// directory of the user and the C compiler named by $CC, else "cc".
type Config struct {
	// CacheDir is the directory the library is kept in; "" means
	// os.UserCacheDir()/softroce.
	CacheDir string
	// CC is the C compiler; "" means $CC, else "cc".
	CC string
}

// Path returns the path of the built library, building it first if the
// cache does not hold this source's build. The file is readable by every
// user (a program run as another user must load it).
func Path(cfg Config) (string, error) {
	dir := cfg.CacheDir
	if dir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("preload: no cache directory (set XDG_CACHE_HOME): %w", err)
		}
		dir = filepath.Join(d, "softroce")
	}
	cc := cfg.CC
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		cc = "cc"
	}
	h := sha256.New()
	for _, n := range sourceNames() {
		fmt.Fprintf(h, "%s\x00", n)
		h.Write(readSource(n))
	}
	fmt.Fprintf(h, "\x00%s\x00%s\x00%s", cc, strings.Join(cflags, " "), strings.Join(libs, " "))
	name := "libsoftroce-preload-" + hex.EncodeToString(h.Sum(nil))[:16] + ".so"
	out := filepath.Join(dir, name)
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("preload: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("preload: %w", err)
	}
	defer os.RemoveAll(tmp)
	var srcs []string
	for _, n := range sourceNames() {
		f := filepath.Join(tmp, n)
		if err := os.WriteFile(f, readSource(n), 0o644); err != nil {
			return "", fmt.Errorf("preload: %w", err)
		}
		if strings.HasSuffix(n, ".c") {
			srcs = append(srcs, f)
		}
	}
	so := filepath.Join(tmp, name)
	args := append(append(append(append([]string{}, cflags...), "-o", so), srcs...), libs...)
	cmd := exec.Command(cc, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("preload: building the preload library needs a C compiler (install gcc, or set CC): %w", err)
		}
		return "", fmt.Errorf("preload: %s %s: %w\n%s", cc, strings.Join(args, " "), err, stderr.String())
	}
	if err := os.Chmod(so, 0o755); err != nil {
		return "", fmt.Errorf("preload: %w", err)
	}
	if err := os.Rename(so, out); err != nil {
		return "", fmt.Errorf("preload: %w", err)
	}
	return out, nil
}
