// Package elfdeps finds the shared libraries an ELF program needs, the way
// Debian's dynamic loader would, without running it: the PT_INTERP
// interpreter and the DT_NEEDED libraries, transitively, searched in the
// amd64 multiarch library directories. It reads the host's file system or
// a root file system tree (a chroot or a VM image being assembled).
package elfdeps

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LibDirs are where Debian's dynamic loader finds shared libraries on
// amd64 (the multiarch directories of /etc/ld.so.conf.d/x86_64-linux-gnu.conf
// and the legacy ones), in search order.
var LibDirs = []string{
	"/lib/x86_64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu",
	"/lib64",
	"/usr/lib64",
	"/lib",
	"/usr/lib",
}

// SharedLibs returns the absolute paths of the ELF interpreter and every
// shared library the ELF files in bins need, transitively (DT_NEEDED),
// resolved the way ld.so resolves them: in the object's own DT_RUNPATH
// (or DT_RPATH) directories first ($ORIGIN expanded), then LibDirs. The
// result is what `ldd` prints, without running anything, in first-seen
// order.
//
// root is the file system the binaries live in: "" or "/" for the host,
// else the directory of a root tree. bins and the returned paths are
// absolute paths inside root (as a process chrooted into root sees them).
// Symbolic links in the tree are followed by the host, so a tree's links
// must be relative (as Debian packages ship them) to stay inside it.
func SharedLibs(root string, bins []string) ([]string, error) {
	seen := make(map[string]bool)
	var out []string
	var visit func(path string) error
	visit = func(path string) error {
		f, err := elf.Open(filepath.Join(root, path))
		if err != nil {
			return fmt.Errorf("shared libraries of %s: %w", path, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("interpreter of %s: %w", path, err)
			}
			interp := strings.TrimRight(string(b), "\x00")
			if !seen[interp] {
				seen[interp] = true
				out = append(out, interp)
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("shared libraries of %s: %w", path, err)
		}
		var own []string // DT_RUNPATH, else DT_RPATH
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			if v, err := f.DynString(tag); err == nil && len(v) > 0 {
				for _, e := range v {
					for _, d := range strings.Split(e, ":") {
						d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", filepath.Dir(path))
						if d != "" {
							own = append(own, d)
						}
					}
				}
				break
			}
		}
		for _, lib := range needed {
			full, err := findLibIn(root, lib, own)
			if err != nil {
				return fmt.Errorf("%s needs %s: %w", path, lib, err)
			}
			if seen[full] {
				continue
			}
			seen[full] = true
			out = append(out, full)
			if err := visit(full); err != nil {
				return err
			}
		}
		return nil
	}
	for _, b := range bins {
		if err := visit(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FindLib returns the path (inside root, as for SharedLibs) of the shared
// library the loader would pick for a DT_NEEDED name: the first of LibDirs
// that holds it. A name with a slash is a path and is returned as is. The
// error wraps fs.ErrNotExist when no directory has it.
func FindLib(root, name string) (string, error) { return findLibIn(root, name, nil) }

// findLibIn is FindLib searching dirs before LibDirs.
func findLibIn(root, name string, dirs []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range append(dirs, LibDirs...) {
		p := filepath.Join(d, name)
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			return p, nil
		}
	}
	where := strings.Join(LibDirs, ":")
	if root != "" && root != "/" {
		where += " under " + root
	}
	return "", fmt.Errorf("not found in %s: %w", where, fs.ErrNotExist)
}
