package uverbsd

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clientMemfd plays a client that moved n bytes of pages into a memfd:
// the memfd (sealed against shrinking when seal is set), this process's
// shared mapping of it and its address.
func clientMemfd(t *testing.T, n int, seal bool) (int, []byte, uint64) {
	t.Helper()
	fd, err := unix.MemfdCreate("softroce-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return fd, mem, uint64(uintptr(unsafe.Pointer(&mem[0])))
}

// selfMemFile is this process's memory as a client's MRs are reached.
func selfMemFile(t *testing.T) *memFile {
	t.Helper()
	pidfd := openPidFD(os.Getpid())
	m := openMemFile(os.Getpid(), pidfd)
	if m == nil {
		t.Skip("no /proc/self/mem or pidfd here")
	}
	t.Cleanup(func() { m.close(); pidfd.close() })
	return m
}

// TestSharedPagesAreTheClientsPages: once shared, an MR's pinned range is
// the client's pages themselves, both ways; its last release unmaps the
// daemon's mapping, and a region no MR pinned goes after the command.
func TestSharedPagesAreTheClientsPages(t *testing.T) {
	m := selfMemFile(t)
	fd, client, addr := clientMemfd(t, 4*4096, true)
	if err := m.share(fd, addr, 4*4096); err != nil {
		t.Fatal(err)
	}
	b, release, ok := m.Pin(addr+4096+10, 100)
	if !ok || len(b) != 100 {
		t.Fatalf("Pin = %d bytes, %v", len(b), ok)
	}
	b2, release2, ok := m.Pin(addr, 4096)
	if !ok {
		t.Fatal("a second MR on the region does not pin")
	}
	copy(b, "from the device")
	if got := string(client[4096+10 : 4096+25]); got != "from the device" {
		t.Errorf("the client reads %q", got)
	}
	copy(client[4096+10:], "FROM THE CLIENT")
	if got := string(b[:15]); got != "FROM THE CLIENT" {
		t.Errorf("the device reads %q", got)
	}
	m.settleShares()
	release()
	release() // a second call changes nothing
	if len(m.regions) != 1 {
		t.Fatalf("%d regions with one MR left, want 1", len(m.regions))
	}
	_ = b2
	release2()
	if len(m.regions) != 0 {
		t.Fatalf("%d regions after the last release", len(m.regions))
	}
	if err := m.share(fd, addr, 4*4096); err != nil {
		t.Fatal(err)
	}
	m.settleShares()
	if _, _, ok := m.Pin(addr, 4096); ok || len(m.regions) != 0 {
		t.Fatalf("a share no MR pinned outlives its command: Pin %v, %d regions", ok, len(m.regions))
	}
}

// TestShareRefusesWhatCouldHurtTheDaemon: a descriptor that is not a
// memfd, one that could shrink under the daemon's mapping (SIGBUS), one
// shorter than the range, and ranges that are not whole pages or leave
// the user address space: EINVAL, with nothing mapped.
func TestShareRefusesWhatCouldHurtTheDaemon(t *testing.T) {
	m := selfMemFile(t)
	sealed, _, addr := clientMemfd(t, 4096, true)
	unsealed, _, _ := clientMemfd(t, 4096, false)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(1 << 20)
	for _, c := range []struct {
		name         string
		fd           int
		addr, length uint64
	}{
		{"a pipe", int(r.Fd()), addr, 4096},
		{"a file", int(f.Fd()), addr, 4096},
		{"a memfd that may shrink", unsealed, addr, 4096},
		{"a memfd shorter than the range", sealed, addr, 2 * 4096},
		{"not page aligned", sealed, addr + 1, 4096},
		{"not whole pages", sealed, addr, 100},
		{"no pages", sealed, addr, 0},
		{"past the user address space", sealed, 1<<47 - 4096, 2 * 4096},
	} {
		if err := m.share(c.fd, c.addr, c.length); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
	if len(m.regions) != 0 {
		t.Fatalf("%d regions mapped after refusals", len(m.regions))
	}
}

// TestPinNeedsTheClientsMapping: a region pins only where the client's
// maps show the memfd at the offsets it named, so a client that shared one
// memfd and mapped something else there (or lied) gets the /proc/PID/mem
// path, and a range beyond the region does not pin.
func TestPinNeedsTheClientsMapping(t *testing.T) {
	m := selfMemFile(t)
	fd, _, addr := clientMemfd(t, 2*4096, true)
	if err := m.share(fd, addr+4096, 4096); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.Pin(addr+4096, 4096); ok {
		t.Error("a region claimed one page off its mapping pins")
	}
	if err := m.share(fd, addr, 2*4096); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.Pin(addr, 3*4096); ok {
		t.Error("a range past the region pins")
	}
	if _, err := mmapFixed(addr, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.Pin(addr, 4096); ok {
		t.Error("a page the client mapped anew pins the old region")
	}
	if _, rel, ok := m.Pin(addr+4096, 4096); !ok {
		t.Error("the page still mapped does not pin")
	} else {
		rel()
	}
}

// TestRegMRReadsTheClientsMapsOnce: the Pin of a REG_MR answers from the
// mappings its CheckRange read, not from a second read of /proc/PID/maps
// (here the client remaps a page between the two, and the pin still
// follows the check); a Pin without a check, and one after the command
// ended (settleShares), reads the maps anew.
func TestRegMRReadsTheClientsMapsOnce(t *testing.T) {
	m := selfMemFile(t)
	fd, _, addr := clientMemfd(t, 2*4096, true)
	if err := m.share(fd, addr, 2*4096); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckRange(addr, 2*4096, true); err != nil {
		t.Fatal(err)
	}
	if _, err := mmapFixed(addr, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	b, rel, ok := m.Pin(addr, 4096)
	if !ok {
		t.Fatal("the pin read the maps again: the page remapped after the check does not pin")
	}
	defer rel()
	b[0] = 'x'
	got := make([]byte, 1)
	if _, err := unix.Pread(fd, got, 0); err != nil || got[0] != 'x' {
		t.Errorf("the memfd reads %q, %v after the device wrote its pinned page", got, err)
	}
	if _, _, ok := m.Pin(addr, 4096); ok {
		t.Error("a second pin reused the check's maps: the remapped page pins")
	}
	if err := m.CheckRange(addr+4096, 4096, true); err != nil {
		t.Fatal(err)
	}
	m.settleShares()
	if _, err := mmapFixed(addr+4096, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.Pin(addr+4096, 4096); ok {
		t.Error("a pin after the command's end used the maps its check read")
	}
}

// TestSharesAreBounded: a client holds at most maxShared regions; beyond,
// ENOSPC (its MRs then use /proc/PID/mem).
func TestSharesAreBounded(t *testing.T) {
	m := selfMemFile(t)
	fd, _, addr := clientMemfd(t, 4096, true)
	for i := 0; i < maxShared; i++ {
		if err := m.share(fd, addr, 4096); err != nil {
			t.Fatalf("share %d: %v", i, err)
		}
		if _, _, ok := m.Pin(addr, 4096); !ok {
			t.Fatalf("pin %d", i)
		}
	}
	if err := m.share(fd, addr, 4096); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("share %d: %v, want ENOSPC", maxShared, err)
	}
}

// TestClosedConnectionLeavesPinnedPagesReadable: at the connection's end
// every region goes; one an MR still pins (a deregistration that failed)
// becomes zero pages, so a late access by the device reads zeros instead
// of faulting the daemon, and no share is taken any more.
func TestClosedConnectionLeavesPinnedPagesReadable(t *testing.T) {
	m := selfMemFile(t)
	fd, client, addr := clientMemfd(t, 4096, true)
	client[0] = 'x'
	if err := m.share(fd, addr, 4096); err != nil {
		t.Fatal(err)
	}
	b, _, ok := m.Pin(addr, 4096)
	if !ok || b[0] != 'x' {
		t.Fatalf("Pin %v", ok)
	}
	m.close()
	if b[0] != 0 {
		t.Errorf("the pinned page reads %q after the close, want 0", b[0])
	}
	if err := m.share(fd, addr, 4096); !errors.Is(err, unix.EBADF) {
		t.Errorf("share after the close: %v, want EBADF", err)
	}
}
