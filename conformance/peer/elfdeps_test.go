package peer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModuleName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko", "rdma_rxe"},
		{"crc32-pclmul.ko", "crc32_pclmul"},
		{"virtio_net.ko.xz", "virtio_net"},
		{"ib_core", "ib_core"},
		{"ip6-udp-tunnel", "ip6_udp_tunnel"},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := moduleName(c.in); got != c.want {
				t.Errorf("moduleName(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestWriteRunInitrd checks the per-run initramfs: the base, zero padding
// to a 4-byte boundary, then an archive holding /cmd.sh.
func TestWriteRunInitrd(t *testing.T) {
	dir := t.TempDir()
	var base bytes.Buffer
	tr := newCPIOTree()
	tr.file("init", 0o755, []byte("#!/bin/sh\n"))
	if err := tr.writeTo(&base); err != nil {
		t.Fatal(err)
	}
	base.WriteString("xx") // a base whose length is not a multiple of 4
	basePath := filepath.Join(dir, "base")
	os.WriteFile(basePath, base.Bytes(), 0o644)

	for _, c := range []struct {
		name, cmd string
		wantLen   int
	}{
		{"agent", "", base.Len()},
		{"command", "exit 3\n", -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, c.name)
			if err := writeRunInitrd(out, basePath, c.cmd); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(out)
			if !bytes.HasPrefix(b, base.Bytes()) {
				t.Fatal("the base is not a prefix")
			}
			if c.wantLen >= 0 {
				if len(b) != c.wantLen {
					t.Errorf("length %d, want the base's %d", len(b), c.wantLen)
				}
				return
			}
			rest := b[base.Len():]
			i := bytes.Index(rest, []byte(cpioMagic))
			if i < 0 || (base.Len()+i)%4 != 0 || !bytes.Equal(rest[:i], make([]byte, i)) {
				t.Fatalf("run archive at %d: not a zero-padded 4-byte aligned archive", base.Len()+i)
			}
			entries, err := readCPIO(bytes.NewReader(rest[i:]))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name != "cmd.sh" || string(entries[0].Data) != c.cmd {
				t.Errorf("run archive %+v, want cmd.sh %q", entries, c.cmd)
			}
		})
	}
}

// TestWriteRunArchivePrograms: programs go into the run archive as
// /bin/NAME, executable, after /cmd.sh; a name with a slash is refused.
func TestWriteRunArchivePrograms(t *testing.T) {
	dir := t.TempDir()
	var base bytes.Buffer
	tr := newCPIOTree()
	tr.file("init", 0o755, []byte("#!/bin/sh\n"))
	if err := tr.writeTo(&base); err != nil {
		t.Fatal(err)
	}
	basePath := filepath.Join(dir, "base")
	os.WriteFile(basePath, base.Bytes(), 0o644)
	out := filepath.Join(dir, "run")
	if err := writeRunArchive(out, basePath, "", map[string][]byte{"b": []byte("B"), "a": []byte("A")}, ""); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	rest := b[base.Len():]
	i := bytes.Index(rest, []byte(cpioMagic))
	entries, err := readCPIO(bytes.NewReader(rest[i:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Name != "bin/a" || string(entries[1].Data) != "B" || entries[0].Mode != modeFile|0o755 {
		t.Errorf("run archive %+v, want bin/a and bin/b, mode 0755", entries)
	}
	if err := writeRunArchive(out, basePath, "", map[string][]byte{"x/y": nil}, ""); err == nil {
		t.Error("a program name with a slash was accepted")
	}
}

// TestWriteRunArchiveChroot: a tree goes into the run archive under
// /chroot, parents before children, with its modes and symbolic links.
func TestWriteRunArchiveChroot(t *testing.T) {
	dir := t.TempDir()
	var base bytes.Buffer
	tr := newCPIOTree()
	tr.file("init", 0o755, []byte("#!/bin/sh\n"))
	if err := tr.writeTo(&base); err != nil {
		t.Fatal(err)
	}
	basePath := filepath.Join(dir, "base")
	os.WriteFile(basePath, base.Bytes(), 0o644)
	root := filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/bin/python3"), []byte("PY"), 0o755)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	out := filepath.Join(dir, "run")
	if err := writeRunArchive(out, basePath, "", nil, root); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	rest := b[base.Len():]
	entries, err := readCPIO(bytes.NewReader(rest[bytes.Index(rest, []byte(cpioMagic)):]))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%s %o %s", e.Name, e.Mode, e.Data))
	}
	want := []string{"chroot 40755 ", "chroot/bin 120777 usr/bin", "chroot/usr 40755 ", "chroot/usr/bin 40755 ", "chroot/usr/bin/python3 100755 PY"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("run archive:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
