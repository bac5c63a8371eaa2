package peer

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// readModule returns a kernel module file's ELF image: the file itself,
// or for a compressed module (.ko.xz, as Debian 13's kernel ships them)
// its content decompressed with the host's xz, so that busybox insmod
// loads it whatever the kernel's own decompression support. The
// decompressed module is kept next to the compressed one (PATH without
// .xz, in the image cache's unpacked kernel tree) for the next build.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		plain := strings.TrimSuffix(path, ".xz")
		if b, err := os.ReadFile(plain); err == nil {
			return b, nil
		}
		var stderr bytes.Buffer
		cmd := exec.Command("xz", "-dc", path)
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("module %s: xz -dc (apt-get install xz-utils): %w: %s", path, err, strings.TrimSpace(stderr.String()))
		}
		if err := writeFileAtomic(plain, b); err != nil {
			return nil, fmt.Errorf("module %s: %w", path, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("module %s: compression not supported (want .ko or .ko.xz): %w", path, errors.ErrUnsupported)
}

// moduleInfo reads the "key=value" strings of a kernel module's .modinfo
// section (what modinfo(8) prints).
func moduleInfo(path string) (map[string]string, error) {
	b, err := readModule(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, err)
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("module %s: no .modinfo section", path)
	}
	b, err = s.Data()
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
