package uverbsd

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu/dma"
)

// The pages of a client's MRs, mapped into the daemon.
//
// The kernel's device reaches an MR through the pages ib_umem_get pinned;
// the daemon reaches them through /proc/PID/mem, a system call per transfer,
// unless the client shares them: before a REG_MR the preload library moves
// the registering buffer's private anonymous pages into a memfd, maps that
// over the buffer (the program sees the same bytes at the same addresses)
// and passes the memfd (OpShare). The daemon maps it too; the REG_MR that
// follows pins its range from that mapping (dma.Pinner), and the device
// copies to and from it directly, as rxe copies to and from pinned pages.
//
// What the daemon checks, since a client may lie: the memfd is sealed
// against shrinking (a truncated mapping would kill the daemon with
// SIGBUS) and holds the range, and at the REG_MR the client's
// /proc/PID/maps (read once, for the range check and the pin) shows that
// memfd at the MR's addresses, at the offsets the share named. A
// client whose maps say otherwise gets the /proc/PID/mem path; a client
// that maps something else there later changes only what its own MR holds,
// as a program that remaps a registered buffer does on the kernel.

// sharedRegion is one memfd a client shared: its offset 0 is mapped at
// addr in the client, its first length bytes at mem in the daemon.
type sharedRegion struct {
	addr, length uint64
	mem          []byte
	dev, inode   uint64
	pins         int // MRs registered on it
}

// maxShared bounds the regions a client holds mapped in the daemon at
// once (each is a mapping of the daemon's, which vm.max_map_count bounds
// for all clients together).
const maxShared = 1024

// maxSharedLen bounds one region (the user half of the address space).
const maxSharedLen = 1 << 47

// share maps fd, a memfd the client mapped with its offset 0 at addr, for
// the MRs the client registers next on [addr, addr+length). The region is
// dropped again after the next command unless an MR pinned it
// (settleShares).
func (m *memFile) share(fd int, addr, length uint64) error {
	switch {
	case addr%dma.PageSize != 0 || length%dma.PageSize != 0 || length == 0:
		return fmt.Errorf("share %#x+%#x: not whole pages: %w", addr, length, unix.EINVAL)
	case length > maxSharedLen || addr > maxSharedLen-length:
		return fmt.Errorf("share %#x+%#x: past the user address space: %w", addr, length, unix.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("share: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("share: not a memfd (mode %#o): %w", st.Mode, unix.EINVAL)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("share: not a memfd (F_GET_SEALS: %v): %w", err, unix.EINVAL)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("share: memfd not sealed against shrinking: %w", unix.EINVAL)
	}
	if st.Size < 0 || uint64(st.Size) < length {
		return fmt.Errorf("share: memfd of %d bytes for %d: %w", st.Size, length, unix.EINVAL)
	}
	m.smu.Lock()
	defer m.smu.Unlock()
	if m.unshared {
		return fmt.Errorf("share: connection closed: %w", unix.EBADF)
	}
	m.dropFresh()
	if len(m.regions) >= maxShared {
		return fmt.Errorf("share: %d regions mapped: %w", len(m.regions), unix.ENOSPC)
	}
	if m.charge != nil {
		if err := m.charge(length); err != nil {
			return err
		}
	}
	mem, err := unix.Mmap(fd, 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.release(length)
		return fmt.Errorf("share: mmap %d bytes: %w", length, err)
	}
	r := &sharedRegion{addr: addr, length: length, mem: mem, dev: st.Dev, inode: st.Ino}
	m.regions = append(m.regions, r)
	m.fresh = r
	return nil
}

// Pin implements dma.Pinner: [addr, addr+length) from the newest region
// that holds it and that the client maps there now: in the mappings the
// REG_MR's CheckRange read, else in the client's /proc/PID/maps read
// anew.
func (m *memFile) Pin(addr, length uint64) ([]byte, func(), bool) {
	m.smu.Lock()
	defer m.smu.Unlock()
	ms := m.maps
	m.maps = nil
	if len(m.regions) == 0 || m.unshared || length == 0 {
		return nil, nil, false
	}
	if ms == nil {
		var err error
		if ms, err = readPidMaps(m.pid); err != nil {
			return nil, nil, false
		}
	}
	for i := len(m.regions) - 1; i >= 0; i-- {
		r := m.regions[i]
		if addr < r.addr || addr-r.addr > r.length || length > r.length-(addr-r.addr) {
			continue
		}
		if !mapsFile(ms, addr, length, r.addr, r.dev, r.inode) {
			continue
		}
		r.pins++
		off := addr - r.addr
		var once sync.Once
		return r.mem[off : off+length : off+length], func() { once.Do(func() { m.unpin(r) }) }, true
	}
	return nil, nil, false
}

// unpin drops one MR's pin of r (ib_umem_release).
func (m *memFile) unpin(r *sharedRegion) {
	m.smu.Lock()
	defer m.smu.Unlock()
	r.pins--
	if r.pins == 0 && r != m.fresh {
		m.unmap(r)
	}
}

// settleShares ends the wait of the region shared last for its REG_MR:
// unpinned, it is unmapped. The mappings a check read for a Pin that did
// not come go too: the next command reads its own.
func (m *memFile) settleShares() {
	if m == nil {
		return
	}
	m.smu.Lock()
	defer m.smu.Unlock()
	m.maps = nil
	m.dropFresh()
}

// dropFresh unmaps the region shared last if no MR pinned it. m.smu held.
func (m *memFile) dropFresh() {
	if r := m.fresh; r != nil {
		m.fresh = nil
		if r.pins == 0 {
			m.unmap(r)
		}
	}
}

// unmap removes r. m.smu held.
func (m *memFile) unmap(r *sharedRegion) {
	for i, x := range m.regions {
		if x == r {
			m.regions = append(m.regions[:i], m.regions[i+1:]...)
			break
		}
	}
	unix.Munmap(r.mem)
	r.mem = nil
	m.release(r.length)
}

// release returns length bytes charge counted.
func (m *memFile) release(length uint64) {
	if m.uncharge != nil {
		m.uncharge(length)
	}
}

// unshare unmaps every region, once the client's File is closed (its MRs
// deregistered). A region an MR still pins (a deregistration that failed)
// becomes private zero pages instead, so that the device can never fault
// on it; its address range stays the daemon's.
func (m *memFile) unshare() {
	m.smu.Lock()
	defer m.smu.Unlock()
	m.unshared = true
	m.fresh, m.maps = nil, nil
	for _, r := range m.regions {
		if r.pins == 0 {
			unix.Munmap(r.mem)
			m.release(r.length)
			continue
		}
		unix.MmapPtr(-1, 0, unsafe.Pointer(&r.mem[0]), uintptr(len(r.mem)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	}
	m.regions = nil
}
