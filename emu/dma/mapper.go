package dma

import (
	"fmt"
	"math"
	"sync"

	"golang.org/x/sys/unix"
)

// Direction is enum dma_data_direction: which way data moves between the
// CPU and the device through a mapping.
type Direction int

// The kernel's DMA directions, with its values.
const (
	Bidirectional Direction = 0 // DMA_BIDIRECTIONAL
	ToDevice      Direction = 1 // DMA_TO_DEVICE: the device reads
	FromDevice    Direction = 2 // DMA_FROM_DEVICE: the device writes
	None          Direction = 3 // DMA_NONE: invalid for a mapping
)

// String returns the kernel name of d.
func (d Direction) String() string {
	switch d {
	case Bidirectional:
		return "DMA_BIDIRECTIONAL"
	case ToDevice:
		return "DMA_TO_DEVICE"
	case FromDevice:
		return "DMA_FROM_DEVICE"
	case None:
		return "DMA_NONE"
	}
	return fmt.Sprintf("dma_data_direction(%d)", int(d))
}

// IsValid reports whether d may be used for a mapping (not DMA_NONE).
func (d Direction) IsValid() bool { return d >= Bidirectional && d <= FromDevice }

func (d Direction) deviceReads() bool  { return d == Bidirectional || d == ToDevice }
func (d Direction) deviceWrites() bool { return d == Bidirectional || d == FromDevice }

// Attrs is the DMA_ATTR_* bit set passed to the *_attrs mapping calls.
type Attrs uint64

// DMA attributes with their kernel values (include/linux/dma-mapping.h).
const (
	AttrWeakOrdering Attrs = 1 << 1 // DMA_ATTR_WEAK_ORDERING
	AttrSkipCPUSync  Attrs = 1 << 5 // DMA_ATTR_SKIP_CPU_SYNC: map/unmap imply no sync
	AttrNoWarn       Attrs = 1 << 8 // DMA_ATTR_NO_WARN
)

// MappingErrorAddr is the DMA address a failed mapping returns
// (DMA_MAPPING_ERROR). Only strict mode fails mappings.
const MappingErrorAddr = ^uint64(0)

// Config configures a Mapper. The zero value is the kernel's virtual-DMA
// behaviour: no tracking, no checks.
type Config struct {
	// Strict enables tracking of mappings and ownership; device and CPU
	// accesses that a non-coherent device would get wrong are reported.
	Strict bool
	// OnViolation, if non-nil, is called (outside the Mapper's lock) for
	// each violation found in strict mode, in addition to recording it.
	OnViolation func(Violation)
}

// Violation is one misuse found in strict mode.
type Violation struct {
	// Op is the access or call that found it ("device read", "device
	// write", "cpu read", "cpu write", "unmap", "sync_for_cpu",
	// "sync_for_device").
	Op string
	// Addr and Len are the range involved.
	Addr uint64
	Len  int // length of the range in bytes
	// Reason says what was wrong, in kernel terms.
	Reason string
}

// Error formats v; Unwrap returns EFAULT.
func (v Violation) Error() string {
	return fmt.Sprintf("dma strict: %s %#x+%d: %s", v.Op, v.Addr, v.Len, v.Reason)
}

// Unwrap returns unix.EFAULT: an access the device could not make safely.
func (v Violation) Unwrap() error { return unix.EFAULT }

// owner says which side may touch a mapped buffer.
type owner uint8

const (
	ownerDevice owner = iota
	ownerCPU
)

type mapping struct {
	addr  uint64
	size  int
	dir   Direction
	owner owner
}

func (m *mapping) covers(addr uint64, n int) bool {
	return addr >= m.addr && addr-m.addr <= uint64(m.size) && uint64(n) <= uint64(m.size)-(addr-m.addr)
}

func (m *mapping) overlaps(addr uint64, n int) bool {
	if n == 0 {
		n = 1
	}
	return addr < m.addr+uint64(m.size) && m.addr < addr+uint64(n)
}

// recentUnmaps is how many unmapped ranges strict mode remembers to name a
// use-after-unmap as such.
const recentUnmaps = 64

// Mapper is one device's DMA view of a Memory (the ib_device's dma_device
// being NULL: virtual DMA). It is safe for concurrent use.
type Mapper struct {
	mem *Memory
	cfg Config

	mu         sync.Mutex
	maps       []*mapping
	unmapped   []mapping // ring of recently unmapped ranges
	violations []Violation
}

// NewMapper returns a Mapper over mem; cfg nil means the zero Config.
func NewMapper(mem *Memory, cfg *Config) *Mapper {
	d := &Mapper{mem: mem}
	if cfg != nil {
		d.cfg = *cfg
	}
	return d
}

// Memory returns the address space the Mapper maps.
func (d *Mapper) Memory() *Memory { return d.mem }

// Strict reports whether strict mode is on.
func (d *Mapper) Strict() bool { return d.cfg.Strict }

// Violations returns a copy of the violations recorded so far.
func (d *Mapper) Violations() []Violation {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Violation(nil), d.violations...)
}

// report records v; the caller holds d.mu and calls notify after
// unlocking.
func (d *Mapper) report(v Violation) Violation {
	d.violations = append(d.violations, v)
	return v
}

func (d *Mapper) notify(vs ...Violation) {
	if d.cfg.OnViolation == nil {
		return
	}
	for _, v := range vs {
		d.cfg.OnViolation(v)
	}
}

// mapRange is the common body of every map call.
func (d *Mapper) mapRange(addr uint64, size int, dir Direction, attrs Attrs) uint64 {
	if !d.cfg.Strict {
		return addr // ib_dma_map_single on a virt-DMA device: the address itself
	}
	if !dir.IsValid() || size < 0 || !d.mem.Contains(addr, size) {
		return MappingErrorAddr
	}
	own := ownerDevice // mapping implies sync_for_device ...
	if attrs&AttrSkipCPUSync != 0 {
		own = ownerCPU // ... unless the caller skipped it
	}
	d.mu.Lock()
	d.maps = append(d.maps, &mapping{addr: addr, size: size, dir: dir, owner: own})
	d.mu.Unlock()
	return addr
}

// unmapRange is the common body of every unmap call.
func (d *Mapper) unmapRange(addr uint64, size int, dir Direction) {
	if !d.cfg.Strict {
		return
	}
	d.mu.Lock()
	for i, m := range d.maps {
		if m.addr == addr && m.size == size {
			var vs []Violation
			if m.dir != dir {
				vs = append(vs, d.report(Violation{Op: "unmap", Addr: addr, Len: size,
					Reason: fmt.Sprintf("unmapped as %v but mapped as %v", dir, m.dir)}))
			}
			d.maps = append(d.maps[:i], d.maps[i+1:]...)
			if len(d.unmapped) == recentUnmaps {
				d.unmapped = d.unmapped[1:]
			}
			d.unmapped = append(d.unmapped, *m)
			d.mu.Unlock()
			d.notify(vs...)
			return
		}
	}
	v := d.report(Violation{Op: "unmap", Addr: addr, Len: size, Reason: d.whyNotMapped(addr, size)})
	d.mu.Unlock()
	d.notify(v)
}

// whyNotMapped explains a range no live mapping covers; d.mu held.
func (d *Mapper) whyNotMapped(addr uint64, n int) string {
	for i := len(d.unmapped) - 1; i >= 0; i-- {
		if d.unmapped[i].overlaps(addr, n) {
			return "use after unmap"
		}
	}
	for _, m := range d.maps {
		if m.overlaps(addr, n) {
			return fmt.Sprintf("range runs outside the mapping %#x+%d", m.addr, m.size)
		}
	}
	return "address was never mapped"
}

// live finds the live mapping covering [addr, addr+n); d.mu held.
func (d *Mapper) live(addr uint64, n int) *mapping {
	for _, m := range d.maps {
		if m.covers(addr, n) {
			return m
		}
	}
	return nil
}

// MapSingle maps size bytes at the CPU address cpuAddr for DMA in direction
// dir and returns the DMA address (ib_dma_map_single). On a virtual-DMA
// device the DMA address is cpuAddr. In strict mode a range outside memory
// or DMA_NONE returns MappingErrorAddr.
func (d *Mapper) MapSingle(cpuAddr uint64, size int, dir Direction) uint64 {
	return d.mapRange(cpuAddr, size, dir, 0)
}

// UnmapSingle ends a MapSingle mapping (ib_dma_unmap_single). A no-op on a
// virtual-DMA device; strict mode reports unmapping what is not mapped.
func (d *Mapper) UnmapSingle(addr uint64, size int, dir Direction) {
	d.unmapRange(addr, size, dir)
}

// MapPage maps size bytes at offset in page p (ib_dma_map_page).
func (d *Mapper) MapPage(p Page, offset, size int, dir Direction) uint64 {
	return d.mapRange(p.Addr()+uint64(offset), size, dir, 0)
}

// UnmapPage ends a MapPage mapping (ib_dma_unmap_page).
func (d *Mapper) UnmapPage(addr uint64, size int, dir Direction) {
	d.unmapRange(addr, size, dir)
}

// BioVec is struct bio_vec: a page, an offset in it and a length.
type BioVec struct {
	Page   Page // the page (bv_page)
	Offset int  // byte offset of the data in Page (bv_offset)
	Len    int  // length in bytes (bv_len)
}

// MapBvec maps a bio_vec (ib_dma_map_bvec).
func (d *Mapper) MapBvec(bv BioVec, dir Direction) uint64 {
	return d.mapRange(bv.Page.Addr()+uint64(bv.Offset), bv.Len, dir, 0)
}

// UnmapBvec ends a MapBvec mapping (ib_dma_unmap_bvec).
func (d *Mapper) UnmapBvec(addr uint64, size int, dir Direction) {
	d.unmapRange(addr, size, dir)
}

// Scatterlist is one struct scatterlist entry: the CPU side (page, offset,
// length) and, once mapped, the DMA side (address and length).
type Scatterlist struct {
	Page       Page   // the page (sg_page)
	Offset     int    // byte offset of the data in Page (offset)
	Length     int    // CPU-side length in bytes (length)
	DMAAddress uint64 // bus address once mapped (dma_address, sg_dma_address)
	DMALength  int    // mapped length in bytes (dma_length, sg_dma_len)
}

// MapSG maps every entry of sg, filling DMAAddress and DMALength, and
// returns the number of DMA segments (ib_dma_map_sg; a virtual-DMA device
// copies each entry's address, so the count is len(sg)). In strict mode an
// entry that cannot be mapped undoes the earlier ones and returns 0, the
// kernel's failure value.
func (d *Mapper) MapSG(sg []Scatterlist, dir Direction) int {
	n, _ := d.mapSG(sg, dir, 0)
	return n
}

func (d *Mapper) mapSG(sg []Scatterlist, dir Direction, attrs Attrs) (int, error) {
	for i := range sg {
		e := &sg[i]
		a := d.mapRange(e.Page.Addr()+uint64(e.Offset), e.Length, dir, attrs)
		if a == MappingErrorAddr {
			for j := range i {
				d.unmapRange(sg[j].DMAAddress, sg[j].DMALength, dir)
			}
			return 0, fmt.Errorf("dma: map sg entry %d (%#x+%d, %v): %w",
				i, e.Page.Addr()+uint64(e.Offset), e.Length, dir, unix.EIO)
		}
		e.DMAAddress, e.DMALength = a, e.Length
	}
	return len(sg), nil
}

// UnmapSG ends a MapSG mapping of the same list (ib_dma_unmap_sg).
func (d *Mapper) UnmapSG(sg []Scatterlist, dir Direction) {
	for _, e := range sg {
		d.unmapRange(e.DMAAddress, e.DMALength, dir)
	}
}

// SGTable is struct sg_table: a scatterlist with its CPU entry count
// (OrigNents) and mapped DMA entry count (Nents).
type SGTable struct {
	SGL       []Scatterlist // the entries (sgl)
	OrigNents int           // CPU entries; 0 means len(SGL) (orig_nents)
	Nents     int           // DMA segments after mapping (nents)
}

// MapSGTableAttrs maps every entry of t with attrs and sets t.Nents
// (ib_dma_map_sgtable_attrs). With AttrSkipCPUSync the buffers stay owned by
// the CPU until SyncSingleForDevice, which strict mode enforces. Failure
// returns an error wrapping EIO and leaves nothing mapped.
func (d *Mapper) MapSGTableAttrs(t *SGTable, dir Direction, attrs Attrs) error {
	if t.OrigNents == 0 {
		t.OrigNents = len(t.SGL)
	}
	n, err := d.mapSG(t.SGL[:t.OrigNents], dir, attrs)
	if err != nil {
		return err
	}
	t.Nents = n
	return nil
}

// UnmapSGTableAttrs ends a MapSGTableAttrs mapping
// (ib_dma_unmap_sgtable_attrs).
func (d *Mapper) UnmapSGTableAttrs(t *SGTable, dir Direction, _ Attrs) {
	d.UnmapSG(t.SGL[:t.Nents], dir)
	t.Nents = 0
}

// MappingError reports whether addr is the failed-mapping value
// (ib_dma_mapping_error). A virtual-DMA device never fails, so outside
// strict mode it is always false.
func (d *Mapper) MappingError(addr uint64) bool {
	return d.cfg.Strict && addr == MappingErrorAddr
}

// MaxSegSize returns the largest DMA segment (ib_dma_max_seg_size):
// UINT_MAX for a virtual-DMA device.
func (d *Mapper) MaxSegSize() uint32 { return math.MaxUint32 }

// SyncSingleForCPU hands [addr, addr+size) back to the CPU
// (ib_dma_sync_single_for_cpu): after it the CPU may read what the device
// wrote. A no-op on a virtual-DMA device; strict mode records the owner.
func (d *Mapper) SyncSingleForCPU(addr uint64, size int, dir Direction) {
	d.sync(addr, size, dir, ownerCPU, "sync_for_cpu")
}

// SyncSingleForDevice hands [addr, addr+size) to the device
// (ib_dma_sync_single_for_device): after it the device sees what the CPU
// wrote.
func (d *Mapper) SyncSingleForDevice(addr uint64, size int, dir Direction) {
	d.sync(addr, size, dir, ownerDevice, "sync_for_device")
}

func (d *Mapper) sync(addr uint64, size int, dir Direction, to owner, op string) {
	if !d.cfg.Strict {
		return
	}
	d.mu.Lock()
	m := d.live(addr, size)
	if m == nil {
		v := d.report(Violation{Op: op, Addr: addr, Len: size, Reason: d.whyNotMapped(addr, size)})
		d.mu.Unlock()
		d.notify(v)
		return
	}
	m.owner = to
	d.mu.Unlock()
}

// VirtDMAToPtr returns the n bytes at the DMA address addr of a
// virtual-DMA device as a slice aliasing the memory (ib_virt_dma_to_ptr):
// what rxe uses to reach DMA MRs and fast-reg pages. It fails with EFAULT
// where there is no memory.
func (d *Mapper) VirtDMAToPtr(addr uint64, n int) ([]byte, error) {
	return d.mem.Slice(addr, n)
}

// VirtDMAToPage returns the page holding the DMA address addr
// (ib_virt_dma_to_page).
func (d *Mapper) VirtDMAToPage(addr uint64) Page { return PageOf(addr) }

// checkDevice validates a device access in strict mode.
func (d *Mapper) checkDevice(addr uint64, n int, write bool) error {
	if !d.cfg.Strict {
		return nil
	}
	op := "device read"
	if write {
		op = "device write"
	}
	d.mu.Lock()
	var reason string
	switch m := d.live(addr, n); {
	case m == nil:
		reason = d.whyNotMapped(addr, n)
	case write && !m.dir.deviceWrites():
		reason = fmt.Sprintf("device writes a %v mapping", m.dir)
	case !write && !m.dir.deviceReads():
		reason = fmt.Sprintf("device reads a %v mapping", m.dir)
	case m.owner == ownerCPU:
		reason = "buffer owned by the CPU: missing ib_dma_sync_single_for_device"
	default:
		d.mu.Unlock()
		return nil
	}
	v := d.report(Violation{Op: op, Addr: addr, Len: n, Reason: reason})
	d.mu.Unlock()
	d.notify(v)
	return v
}

// checkCPU validates a CPU access in strict mode: a live mapping the
// device may write must be synced for the CPU first.
func (d *Mapper) checkCPU(addr uint64, n int, write bool) error {
	if !d.cfg.Strict {
		return nil
	}
	d.mu.Lock()
	var vs []Violation
	for _, m := range d.maps {
		if !m.overlaps(addr, n) || m.owner == ownerCPU {
			continue
		}
		if write || m.dir.deviceWrites() {
			op, why := "cpu read", "device owns the buffer: missing ib_dma_sync_single_for_cpu"
			if write {
				op = "cpu write"
			}
			vs = append(vs, d.report(Violation{Op: op, Addr: addr, Len: n, Reason: why}))
		}
	}
	d.mu.Unlock()
	d.notify(vs...)
	if len(vs) > 0 {
		return vs[0]
	}
	return nil
}

// DeviceRead copies len(p) bytes at the DMA address addr into p: the
// emulated device reading memory. Strict mode refuses (EFAULT, recorded
// Violation) an access that is not inside a live mapping readable by the
// device and owned by it.
func (d *Mapper) DeviceRead(addr uint64, p []byte) error {
	if err := d.checkDevice(addr, len(p), false); err != nil {
		return err
	}
	b, err := d.mem.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// DeviceWrite copies p to the DMA address addr: the emulated device
// writing memory, checked as DeviceRead.
func (d *Mapper) DeviceWrite(addr uint64, p []byte) error {
	if err := d.checkDevice(addr, len(p), true); err != nil {
		return err
	}
	b, err := d.mem.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(b, p)
	return nil
}

// CPURead copies len(p) bytes at addr into p: the consumer reading a
// buffer. Strict mode reports reading a buffer the device may still be
// writing (no sync_for_cpu yet) but still performs the read, as a real CPU
// would.
func (d *Mapper) CPURead(addr uint64, p []byte) error {
	verr := d.checkCPU(addr, len(p), false)
	b, err := d.mem.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(p, b)
	return verr
}

// CPUWrite copies p to addr: the consumer writing a buffer. Strict mode
// reports writing a buffer the device owns (the device may not see it);
// the write still happens.
func (d *Mapper) CPUWrite(addr uint64, p []byte) error {
	verr := d.checkCPU(addr, len(p), true)
	b, err := d.mem.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(b, p)
	return verr
}
