package uverbsd

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu/dma"
)

// TestCheckRangeFollowsTheClientsMappings maps pages in the test process
// with each protection and checks the answers of both client memories
// against the test's own /proc/PID/maps: get_user_pages pins a range only
// where every page is mapped, with write access when the MR may be
// written.
func TestCheckRangeFollowsTheClientsMappings(t *testing.T) {
	const pg = 4096
	// One reservation of 6 pages, re-protected page by page so that the
	// layout is fixed: rw | rw (private, separate mapping) | r | none |
	// hole | rw.
	b, err := unix.Mmap(-1, 0, 6*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&b[0])))
	// unix.Munmap takes whole mappings it made only: unmap by address.
	defer munmap(base, 6*pg)
	// Page 1 gets its own mapping (a fixed remap of the same protection
	// stays separate only if its flags differ: use MAP_SHARED).
	if _, err := mmapFixed(base+pg, pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(b[2*pg:3*pg], unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(b[3*pg:4*pg], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := munmap(base+4*pg, pg); err != nil {
		t.Fatal(err)
	}
	page := func(i uint64) uint64 { return base + i*pg }
	for _, c := range []struct {
		name        string
		addr, n     uint64
		read, write bool // whether a read pin and a write pin succeed
	}{
		{"private-rw", page(0), pg, true, true},
		{"private-rw-byte", page(0) + 100, 1, true, true},
		{"shared-rw", page(1), pg, true, true},
		{"two-adjacent-mappings", page(0), 2 * pg, true, true},
		{"read-only", page(2), pg, true, false},
		{"rw-into-read-only", page(1), 2 * pg, true, false},
		{"prot-none", page(3), pg, false, false},
		{"read-only-into-prot-none", page(2), 2 * pg, false, false},
		{"hole", page(4), pg, false, false},
		{"across-hole", page(3) + pg/2, 2 * pg, false, false},
		{"after-hole", page(5), pg, true, true},
		{"zero-page", 0, pg, false, false},
		{"kernel-half", 1 << 63, pg, false, false},
		{"wraps", ^uint64(0) - pg + 1, 2 * pg, false, false},
	} {
		for _, write := range []bool{false, true} {
			want := c.read
			if write {
				want = c.write
			}
			pidfd := openPidFD(os.Getpid())
			mems := []struct {
				name string
				m    dma.RangeChecker
			}{
				{"process_vm", procMemory{pid: os.Getpid(), pidfd: pidfd}},
				{"memfile", &memFile{pid: os.Getpid()}},
			}
			for _, m := range mems {
				err := m.m.CheckRange(c.addr, c.n, write)
				if want && err != nil {
					t.Errorf("%s %s write=%v: CheckRange(%#x, %#x) = %v, want nil", m.name, c.name, write, c.addr, c.n, err)
				}
				if !want && !errors.Is(err, unix.EFAULT) {
					t.Errorf("%s %s write=%v: CheckRange(%#x, %#x) = %v, want EFAULT", m.name, c.name, write, c.addr, c.n, err)
				}
			}
			pidfd.close()
		}
	}
}

// mmapFixed maps length bytes at addr, replacing what is there.
func mmapFixed(addr, length uint64, prot, flags int) (uintptr, error) {
	r, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(addr), uintptr(length), uintptr(prot), uintptr(flags|unix.MAP_FIXED), ^uintptr(0), 0)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// munmap unmaps length bytes at addr.
func munmap(addr, length uint64) error {
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(addr), uintptr(length), 0); errno != 0 {
		return errno
	}
	return nil
}

// TestParseMapsStopsAtABadLine: a line that does not parse, or goes
// backwards, ends the list, so that the range past it counts as unmapped
// (refused, never admitted); no input panics.
func TestParseMapsStopsAtABadLine(t *testing.T) {
	good := "00400000-00401000 r-xp 00000000 08:01 12 /bin/x\n00401000-00403000 rw-p 00000000 00:00 0 \n"
	if ms := parseMaps([]byte(good)); len(ms) != 2 || ms[0] != (mapping{start: 0x400000, end: 0x401000, read: true, dev: unix.Mkdev(8, 1), inode: 12}) || ms[1] != (mapping{start: 0x401000, end: 0x403000, read: true, write: true}) {
		t.Fatalf("parseMaps(good) = %+v", ms)
	}
	if err := checkMapped(parseMaps([]byte(good)), 0x400800, 0x2000, false); err != nil {
		t.Errorf("read across two mappings: %v", err)
	}
	if err := checkMapped(parseMaps([]byte(good)), 0x400800, 0x1000, true); !errors.Is(err, unix.EFAULT) {
		t.Errorf("write into r-xp: %v, want EFAULT", err)
	}
	for _, bad := range []string{
		"", "\n\n", "-", "x-y rw-p", "00401000-00400000 rw-p", "00400000-00401000", "00400000-00401000 r",
		"00400000 rw-p", "ffffffffffffffffff-0 rw-p", "00400000-00401000 rw-p\n00300000-00500000 rw-p",
		"00400000-00401000 rw-p\x00\xff", "\xff\xfe-\x00 \x00\x00",
	} {
		ms := parseMaps([]byte(bad))
		for i, m := range ms {
			if m.end <= m.start || (i > 0 && m.start < ms[i-1].end) {
				t.Errorf("parseMaps(%q) = %+v", bad, ms)
			}
		}
	}
	// A bad line in the middle hides what follows it.
	ms := parseMaps([]byte("00400000-00401000 rw-p\nbad line\n00402000-00403000 rw-p\n"))
	if len(ms) != 1 {
		t.Fatalf("parseMaps with a bad middle line = %+v", ms)
	}
	if err := checkMapped(ms, 0x402000, 0x1000, false); !errors.Is(err, unix.EFAULT) {
		t.Errorf("range past a bad line: %v, want EFAULT", err)
	}
}

// TestMapsFileFollowsTheFileAndItsOffset: a range counts as a file's
// mapping only where every byte lies in a mapping of that device and inode
// at the offset its distance from the base names: a hole, another file, a
// shifted offset or a range before the base does not.
func TestMapsFileFollowsTheFileAndItsOffset(t *testing.T) {
	ms := parseMaps([]byte("7f0000000000-7f0000002000 rw-s 00000000 00:01 77 /memfd:softroce-mr (deleted)\n" +
		"7f0000002000-7f0000003000 r--s 00002000 00:01 77 /memfd:softroce-mr (deleted)\n" +
		"7f0000004000-7f0000005000 rw-s 00004000 00:01 77 /memfd:softroce-mr (deleted)\n" +
		"7f0000005000-7f0000006000 rw-s 00000000 00:01 78 /memfd:softroce-mr (deleted)\n"))
	dev := unix.Mkdev(0, 1)
	base := uint64(0x7f0000000000)
	for _, c := range []struct {
		addr, length, base, inode uint64
		want                      bool
	}{
		{base, 0x3000, base, 77, true},
		{base + 0x1000, 0x1800, base, 77, true},
		{base, 0x5000, base, 77, false},          // the hole at +0x3000
		{base + 0x4000, 0x1000, base, 77, true},  // offset 0x4000 at +0x4000
		{base + 0x4000, 0x2000, base, 77, false}, // then inode 78
		{base + 0x5000, 0x1000, base + 0x5000, 78, true},
		{base + 0x5000, 0x1000, base, 78, false}, // offset 0, not 0x5000
		{base, 0x1000, base, 78, false},
		{base, 0x1000, base + 0x1000, 77, false}, // before the base
		{base, 0, base, 77, false},
	} {
		if got := mapsFile(ms, c.addr, c.length, c.base, dev, c.inode); got != c.want {
			t.Errorf("mapsFile(%#x+%#x, base %#x, inode %d) = %v, want %v", c.addr, c.length, c.base, c.inode, got, c.want)
		}
	}
	if mapsFile(ms, base, 0x1000, base, unix.Mkdev(0, 2), 77) {
		t.Error("mapsFile matched another device's inode")
	}
}
