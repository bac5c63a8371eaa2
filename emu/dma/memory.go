// Package dma is the DMA mapping layer of a software RDMA device over
// emulated memory: the Go counterpart of ib_dma_map_single and friends
// (include/rdma/ib_verbs.h) for a device without a DMA device, which the
// kernel calls a "virtual DMA" device (ib_uses_virt_dma: rxe, siw).
//
// Memory is an emulated address space: byte slices placed at page-aligned
// addresses. For a virtual-DMA device the DMA address of a buffer is its address
// in that space (ib_uses_virt_dma, ib_dma_map_single), so a Mapper in its
// default mode does what the kernel does: map returns the address, unmap and the
// syncs do nothing, mapping errors never happen, the maximum segment is
// UINT_MAX.
//
// Strict mode (Config.Strict) turns the Mapper into a bug finder that no
// software RDMA device offers: it tracks every mapping, its direction and
// which side owns it, and reports a Violation when the device touches a
// buffer it has not been given (unmapped, never mapped, wrong direction, or
// still owned by the CPU after ib_dma_sync_single_for_cpu without the
// ib_dma_sync_single_for_device a non-coherent device would need), or when
// the CPU touches a buffer the device owns. The emulated device reaches
// memory only through DeviceRead and DeviceWrite, so every access is
// checked.
package dma

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// PageSize is the page size of emulated memory (PAGE_SIZE on x86-64).
const PageSize = 4096

// PageShift is log2(PageSize).
const PageShift = 12

// Page names one page of emulated memory by its page frame number: the
// counterpart of struct page, which the kernel's page-based mapping calls
// (ib_dma_map_page, bio_vec, scatterlist) take.
type Page struct {
	// PFN is the page frame number: the page's address >> PageShift.
	PFN uint64
}

// Addr returns the address of the first byte of p (page_address).
func (p Page) Addr() uint64 { return p.PFN << PageShift }

// PageOf returns the page holding addr (virt_to_page).
func PageOf(addr uint64) Page { return Page{PFN: addr >> PageShift} }

// Memory is an emulated address space shared by the CPU side (the verbs
// consumer) and the emulated device. Buffers live at page-aligned
// addresses; address 0 is never used, so 0 stays an invalid pointer.
// Memory is safe for concurrent use.
type Memory struct {
	mu      sync.RWMutex
	regions []region // sorted by addr, non-overlapping
	next    uint64   // next free address (page aligned)
	frees   atomic.Uint64
}

type region struct {
	addr uint64
	buf  []byte
}

// NewMemory returns an empty address space whose first buffer is placed at
// base rounded up to a page (base 0 means 0x10000).
func NewMemory(base uint64) *Memory {
	if base == 0 {
		base = 0x10000
	}
	return &Memory{next: alignUp(base)}
}

func alignUp(a uint64) uint64 { return (a + PageSize - 1) &^ (PageSize - 1) }

// Alloc places a new zeroed buffer of n bytes in the address space and
// returns its address and the buffer itself (the CPU's view of it).
func (m *Memory) Alloc(n int) (uint64, []byte) {
	buf := make([]byte, n)
	return m.Add(buf), buf
}

// Add places buf in the address space at a fresh page-aligned address and
// returns that address. The memory is buf itself: writes through either view
// are seen by the other.
func (m *Memory) Add(buf []byte) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	addr := m.next
	size := uint64(len(buf))
	if size == 0 {
		size = 1
	}
	// Leave a guard page between buffers so an overrun faults.
	m.next = alignUp(addr+size) + PageSize
	m.regions = append(m.regions, region{addr: addr, buf: buf})
	return addr
}

// Free removes the buffer placed at addr. Freeing an address that does not
// start a buffer fails with EINVAL.
func (m *Memory) Free(addr uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(addr)
	if i < 0 || m.regions[i].addr != addr {
		return fmt.Errorf("dma: free %#x: not the start of a buffer: %w", addr, unix.EINVAL)
	}
	m.regions = append(m.regions[:i], m.regions[i+1:]...)
	m.frees.Add(1)
	return nil
}

// Frees returns how many buffers Free has removed so far. A caller that
// keeps a slice from Slice to skip later look-ups may use it as long as
// Frees is unchanged: Add never moves or removes a buffer, so only a Free
// makes an address that Slice resolved fault.
func (m *Memory) Frees() uint64 { return m.frees.Load() }

// find returns the index of the region containing addr, or -1.
func (m *Memory) find(addr uint64) int {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].addr > addr }) - 1
	if i < 0 {
		return -1
	}
	r := m.regions[i]
	if addr-r.addr >= uint64(len(r.buf)) && !(len(r.buf) == 0 && addr == r.addr) {
		return -1
	}
	return i
}

// Slice returns the n bytes at addr as a slice aliasing the memory. The
// range must lie inside one buffer, else it fails with EFAULT: the
// emulator's page fault.
func (m *Memory) Slice(addr uint64, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("dma: access %#x: negative length %d: %w", addr, n, unix.EINVAL)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	i := m.find(addr)
	if i < 0 {
		return nil, fmt.Errorf("dma: access %#x+%d: no memory there: %w", addr, n, unix.EFAULT)
	}
	r := m.regions[i]
	off := addr - r.addr
	if uint64(n) > uint64(len(r.buf))-off {
		return nil, fmt.Errorf("dma: access %#x+%d: runs past the end of the buffer at %#x (%d bytes): %w",
			addr, n, r.addr, len(r.buf), unix.EFAULT)
	}
	return r.buf[off : off+uint64(n) : off+uint64(n)], nil
}

// Space is an address space a device reaches user memory regions in: the
// pages of the process that registered them (the kernel's ib_umem pins
// them in the owner's mm). *Memory is one; a daemon serving another process
// supplies that process's memory. ReadAt and WriteAt fail with an error
// wrapping unix.EFAULT where the range is not mapped.
type Space interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
}

var _ Space = (*Memory)(nil)

// RangeChecker is implemented by a Space that can say, as pinning the
// pages of a user MR does (ib_umem_get), whether a range is there to pin.
// CheckRange fails with an error wrapping unix.EFAULT where some byte of
// [addr, addr+length) is not mapped, or, when write is set, lies in a
// mapping the owner may not write (get_user_pages with FOLL_WRITE and
// without FOLL_FORCE); a private read-write mapping is writable. A Space
// without it is pinned by reading each page.
type RangeChecker interface {
	CheckRange(addr, length uint64, write bool) error
}

// Pinner is implemented by a Space whose pages the device can map into
// its own address space, as ib_umem_get pins the pages of a user MR: Pin
// returns the memory of [addr, addr+length) as a slice the device reads and
// writes directly until it calls release (ib_umem_release, at the MR's
// deregistration), or ok false where the range is not in such memory: the
// device then reaches the MR through ReadAt and WriteAt. The slice stays
// the pages the MR was registered on whatever the owner maps there later,
// as pinned pages do.
type Pinner interface {
	Pin(addr, length uint64) (mem []byte, release func(), ok bool)
}

// OnDemander is implemented by a Space whose device accesses bypass the
// owner's page protections (as pinned pages do): OnDemand returns the same
// address space reached as the owner's own accesses reach it, the way an
// on-demand paging MR resolves its pages when the device touches them
// (hmm_range_fault): a page the owner does not map, or may not read (or
// write, for a write) now, fails with an error wrapping unix.EFAULT. A
// Space without it is reached as it is.
type OnDemander interface {
	OnDemand() Space
}

// Charger is implemented by a Space whose owner is charged for the pages
// its user MRs pin, as ib_umem_get adds them to the owner's pinned_vm:
// ChargePinned charges npages and returns the function that takes them
// back (ib_umem_release), or fails with an error wrapping unix.ENOMEM
// where the pages would pass the owner's RLIMIT_MEMLOCK and it lacks
// CAP_IPC_LOCK, or unix.EPERM where it may lock no memory at all
// (can_do_mlock).
type Charger interface {
	ChargePinned(npages uint64) (uncharge func(), err error)
}

// Map places buf at addr, a page-aligned address where no buffer lies
// (mmap with MAP_FIXED_NOREPLACE): EINVAL for an address not page aligned
// or 0, EEXIST where the range meets a buffer. A buffer freed there before
// is replaced: what an on-demand paging MR on the range reaches next.
func (m *Memory) Map(addr uint64, buf []byte) error {
	size := max(uint64(len(buf)), 1)
	if addr == 0 || addr%PageSize != 0 || addr+size < addr {
		return fmt.Errorf("dma: map at %#x: %w", addr, unix.EINVAL)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].addr >= addr })
	if i > 0 {
		r := m.regions[i-1]
		if r.addr+max(uint64(len(r.buf)), 1) > addr {
			return fmt.Errorf("dma: map at %#x: meets the buffer at %#x: %w", addr, r.addr, unix.EEXIST)
		}
	}
	if i < len(m.regions) && m.regions[i].addr < addr+size {
		return fmt.Errorf("dma: map at %#x+%d: meets the buffer at %#x: %w", addr, size, m.regions[i].addr, unix.EEXIST)
	}
	m.regions = append(m.regions, region{})
	copy(m.regions[i+1:], m.regions[i:])
	m.regions[i] = region{addr: addr, buf: buf}
	if end := alignUp(addr+size) + PageSize; end > m.next {
		m.next = end
	}
	return nil
}

// ReadAt copies the len(p) bytes at addr into p; the range must lie
// inside one buffer (EFAULT otherwise).
func (m *Memory) ReadAt(p []byte, addr uint64) (int, error) {
	b, err := m.Slice(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}

// WriteAt copies p to addr; the range must lie inside one buffer (EFAULT
// otherwise).
func (m *Memory) WriteAt(p []byte, addr uint64) (int, error) {
	b, err := m.Slice(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(b, p), nil
}

// Contains reports whether [addr, addr+n) lies inside one buffer.
func (m *Memory) Contains(addr uint64, n int) bool {
	_, err := m.Slice(addr, n)
	return err == nil
}
