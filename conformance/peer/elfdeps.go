package peer

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where Debian's dynamic loader finds shared libraries on
// amd64 (the multiarch directories of /etc/ld.so.conf.d/x86_64-linux-gnu.conf
// and the legacy ones).
var libDirs = []string{
	"/lib/x86_64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu",
	"/lib64",
	"/usr/lib64",
	"/lib",
	"/usr/lib",
}

// sharedLibs returns the absolute paths of the ELF interpreter and every
// shared library the ELF files in bins need, transitively (DT_NEEDED),
// resolved the way ld.so resolves them on this host for binaries without
// RPATH. The result is what `ldd` prints, without running anything.
func sharedLibs(bins []string) ([]string, error) {
	seen := make(map[string]bool)
	var out []string
	var visit func(path string) error
	visit = func(path string) error {
		f, err := elf.Open(path)
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
		for _, lib := range needed {
			full, err := findLib(lib)
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

func findLib(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s: %w", strings.Join(libDirs, ":"), fs.ErrNotExist)
}

// moduleInfo reads the "key=value" strings of a kernel module's .modinfo
// section (what modinfo(8) prints).
func moduleInfo(path string) (map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("module %s: no .modinfo section", path)
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, err)
	}
	info := make(map[string]string)
	for _, kv := range strings.Split(string(b), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if old, dup := info[k]; dup {
			v = old + "\n" + v
		}
		info[k] = v
	}
	return info, nil
}

// moduleName normalizes a module file or module name the way the kernel
// does: no directory, no .ko suffix, '-' as '_'.
func moduleName(s string) string {
	s = filepath.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// resolveModules returns the module files (under modDir, the
// lib/modules/RELEASE directory of a kernel tree) that loading roots needs,
// dependencies first: the order `modprobe --show-depends` prints and
// insmod must follow. It reads each module's "depends=" from .modinfo, so
// it needs no modules.dep (depmod) and no kmod on the host. Modules built
// into the kernel (modules.builtin) are left out.
func resolveModules(modDir string, roots []string) ([]string, error) {
	index := make(map[string]string)
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			index[moduleName(d.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules of %s: %w", modDir, err)
	}
	builtin := make(map[string]bool)
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[moduleName(l)] = true
		}
	}
	state := make(map[string]int) // 1 visiting, 2 done
	var order []string
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		if builtin[name] {
			state[name] = 2
			return nil
		}
		path, ok := index[name]
		if !ok {
			return fmt.Errorf("module %s: not in %s: %w", name, modDir, fs.ErrNotExist)
		}
		if !strings.HasSuffix(path, ".ko") {
			return fmt.Errorf("module %s: compressed module %s is not supported: %w", name, path, errors.ErrUnsupported)
		}
		state[name] = 1
		info, err := moduleInfo(path)
		if err != nil {
			return err
		}
		for _, dep := range strings.Split(info["depends"], ",") {
			if dep = strings.TrimSpace(dep); dep != "" {
				if err := visit(moduleName(dep)); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
		}
		state[name] = 2
		order = append(order, path)
		return nil
	}
	for _, r := range roots {
		if err := visit(moduleName(r)); err != nil {
			return nil, err
		}
	}
	return order, nil
}
