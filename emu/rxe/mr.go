package rxe

import (
	"errors"
	"math"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// memState is enum rxe_mr_state / rxe_mw_state.
type memState uint8

const (
	memInvalid memState = iota // RXE_MR_STATE_INVALID
	memFree                    // RXE_MR_STATE_FREE: allocated, not usable until registered
	memValid                   // RXE_MR_STATE_VALID
)

// Access sets.
const (
	accessMR = ib.AccessRemote | ib.AccessLocalWrite | ib.AccessMWBind |
		ib.AccessOnDemand | ib.AccessFlushGlobal | ib.AccessFlushPersistent | ib.AccessOptional
	accessMW = accessMR | ib.AccessZeroBased
)

// mr is rxe's memory region.
type mr struct {
	core     *emu.MR
	idx      uint32
	typ      emu.MRType
	state    memState
	pd       *emu.PD
	lkey     uint32
	rkey     uint32
	access   ib.AccessFlags
	iova     uint64
	length   uint64
	start    uint64 // memory address backing iova (user MRs)
	writable bool   // a user MR's pages were pinned for writing (ib_umem's writable)
	// odp: an on-demand paging MR (IB_ACCESS_ON_DEMAND, rxe_odp.c): its
	// pages are neither checked nor pinned at registration but resolved
	// each time the device touches them, in space's OnDemand view
	// (dma.OnDemander) or the device's Memory, so a page the owner
	// unmapped fails that access and one it mapped anew is the one reached.
	odp   bool
	space dma.Space // the address space of a user MR whose PD has one, else nil (the device's Memory)
	// pinned is the memory [start, start+length) of a user MR in space
	// that the space maps for the device (dma.Pinner), released by unpin
	// at deregistration; nil otherwise.
	pinned []byte
	unpin  func()
	// uncharge takes back the pages a user MR charged its space's owner
	// (dma.Charger) at deregistration; nil: none charged.
	uncharge func()
	// mem is the memory of a user MR in the device's Memory,
	// [start, start+length), while the Memory's Frees is memFrees
	// (memSlice); nil until first used.
	mem      []byte
	memFrees uint64
	maxPages int
	pages    []uint64 // fast-reg page addresses
	pageSize int
	numMW    int
}

func mrOf(m *emu.MR) *mr { return driver.Priv(m).(*mr) }

// newMR allocates an index and a key; r.mu held.
func (r *device) newMR(m *emu.MR, typ emu.MRType) (*mr, error) {
	x := &mr{core: m, typ: typ, pd: m.PD}
	if err := poolLimit("reg MR", "max_mr", len(r.mrPool.used), r.attr.MaxMR); err != nil {
		return nil, err
	}
	idx, ok := r.mrPool.alloc(x)
	if !ok {
		return nil, errorf(unix.ENOMEM, "MR pool exhausted")
	}
	x.idx = idx
	key := idx<<8 | uint32(r.keyByte(0))
	x.lkey, x.rkey = key, key
	driver.SetKeys(m, key, key)
	driver.SetPriv(m, x)
	r.mrs[idx] = x
	return x, nil
}

// GetDMAMR registers an MR covering all memory (rxe_get_dma_mr).
func (r *device) GetDMAMR(m *emu.MR, access ib.AccessFlags) error {
	r.lock()
	defer r.unlock()
	x, err := r.newMR(m, emu.MRTypeDMA)
	if err != nil {
		return err
	}
	x.access, x.state = access, memValid
	return nil
}

// RegUserMR registers user memory (rxe_reg_user_mr): access outside
// rxe's MR set is EOPNOTSUPP; then ib_umem_get pins the pages the range
// touches: a range that wraps (or whose end rounds up past the top) or
// touches no page (length 0 at a page boundary) or more than 2^32-1
// (npages > UINT_MAX) is EINVAL; a space whose owner is charged for its
// pinned pages (dma.Charger) then charges them (ENOMEM past its
// RLIMIT_MEMLOCK); memory that is not there is EFAULT, and so is memory the client may not write when the
// access lets the MR be written (ib_access_writable); last a
// persistent-flush MR on pages that are not persistent memory is EINVAL.
func (r *device) RegUserMR(m *emu.MR, start, length, iova uint64, access ib.AccessFlags) error {
	if bad := access &^ accessMR; bad != 0 {
		return errorf(unix.EOPNOTSUPP, "reg MR: access %v not supported", bad)
	}
	if access&ib.AccessOnDemand != 0 {
		return r.regODPMR(m, start, length, iova, access)
	}
	end := start + length
	if end < start || alignPage(end) < end {
		return errorf(unix.EINVAL, "reg MR: %#x+%#x wraps", start, length)
	}
	first, last := start&^(dma.PageSize-1), alignPage(end)
	if first == last {
		return errorf(unix.EINVAL, "reg MR: %#x+0 holds no page", start)
	}
	if npages := (last - first) / dma.PageSize; npages > math.MaxUint32 {
		return errorf(unix.EINVAL, "reg MR: %#x+%#x spans %d pages, more than ib_umem_get pins", start, length, npages)
	}
	space := m.PD.Space
	var uncharge func()
	if c, ok := space.(dma.Charger); ok {
		u, err := c.ChargePinned((last - first) / dma.PageSize)
		if err != nil {
			var en unix.Errno
			if !errors.As(err, &en) {
				en = unix.ENOMEM
			}
			return errorf(en, "reg MR: charge %#x+%#x: %v", start, length, err)
		}
		uncharge = u
	}
	fail := func(err error) error {
		if uncharge != nil {
			uncharge()
		}
		return err
	}
	if err := pin(r.dev.Memory(), space, start, length, first, last, access.Writable()); err != nil {
		return fail(errorf(unix.EFAULT, "reg MR: pin %#x+%d: %v", start, length, err))
	}
	if access&ib.AccessFlushPersistent != 0 {
		// rxe_mr_fill_pages_from_sgt: a persistent-flush MR must be
		// persistent memory (is_pmem_page); the emulator's never is.
		return fail(errorf(unix.EINVAL, "reg MR: IB_ACCESS_FLUSH_PERSISTENT on memory that is not persistent memory"))
	}
	var pinned []byte
	var unpin func()
	if p, ok := space.(dma.Pinner); ok {
		if b, rel, ok := p.Pin(start, length); ok && uint64(len(b)) == length {
			pinned, unpin = b, rel
		} else if ok {
			rel()
		}
	}
	r.lock()
	defer r.unlock()
	x, err := r.newMR(m, emu.MRTypeUser)
	if err != nil {
		if unpin != nil {
			unpin()
		}
		return fail(err)
	}
	x.access, x.state, x.iova, x.length, x.start, x.space = access, memValid, iova, length, start, space
	x.mem, x.pinned, x.unpin, x.uncharge = nil, pinned, unpin, uncharge
	x.writable = access.Writable()
	return nil
}

// regODPMR registers an on-demand paging MR (rxe_odp_mr_init_user): an
// implicit one (start 0, length 2^64-1) is EINVAL, rxe having no
// IB_ODP_SUPPORT_IMPLICIT; a range whose end wraps, or rounds up past the
// top, is EOVERFLOW and one that touches no page EINVAL (ib_init_umem_odp).
// Nothing is pinned, charged against RLIMIT_MEMLOCK or checked: the
// snapshot rxe_odp_init_pages takes faults nothing in, so memory the owner
// has not mapped (yet) registers. A persistent-flush MR is not refused
// here: rxe checks for persistent memory only when it pins.
func (r *device) regODPMR(m *emu.MR, start, length, iova uint64, access ib.AccessFlags) error {
	if start == 0 && length == math.MaxUint64 {
		if iova != 0 {
			return errorf(unix.EINVAL, "reg MR: implicit ODP with iova %#x", iova)
		}
		if r.attr.ODPCaps.General&emu.ODPSupportImplicit == 0 {
			return errorf(unix.EINVAL, "reg MR: implicit ODP not supported")
		}
	}
	end := start + length
	if end < start || alignPage(end) < dma.PageSize {
		return errorf(unix.EOVERFLOW, "reg MR: ODP %#x+%#x wraps", start, length)
	}
	if start&^(dma.PageSize-1) == alignPage(end) {
		return errorf(unix.EINVAL, "reg MR: ODP %#x+0 holds no page", start)
	}
	space := m.PD.Space
	if o, ok := space.(dma.OnDemander); ok {
		space = o.OnDemand()
	}
	r.lock()
	defer r.unlock()
	x, err := r.newMR(m, emu.MRTypeUser)
	if err != nil {
		return err
	}
	x.access, x.state, x.iova, x.length, x.start, x.space = access, memValid, iova, length, start, space
	x.writable, x.odp = access.Writable(), true
	return nil
}

// alignPage rounds a up to a page boundary (0 when that passes the top).
func alignPage(a uint64) uint64 { return (a + dma.PageSize - 1) &^ (dma.PageSize - 1) }

// pin finds whether the pages [first, last) around [start, start+length)
// can be pinned for an MR, writable or not: a space that can tell
// (dma.RangeChecker, a client process's memory) checks the whole pages as
// get_user_pages does; the device's own memory and other spaces are read
// over the range itself (their buffers need not fill their pages).
func pin(mem *dma.Memory, space dma.Space, start, length, first, last uint64, write bool) error {
	if space == nil {
		_, err := mem.Slice(start, int(length))
		return err
	}
	if c, ok := space.(dma.RangeChecker); ok {
		return c.CheckRange(first, last-first, write)
	}
	return probe(space, start, length)
}

// probe reads every page of [start, start+length) in space: what pinning
// the pages (ib_umem_get) finds unmapped fails with EFAULT.
func probe(space dma.Space, start, length uint64) error {
	var buf [dma.PageSize]byte
	for a, end := start, start+length; a < end; {
		n := min(uint64(len(buf))-(a%dma.PageSize), end-a)
		if _, err := space.ReadAt(buf[:n], a); err != nil {
			return err
		}
		a += n
	}
	return nil
}

// AllocMR allocates a fast-registration MR (rxe_alloc_mr): only MEM_REG
// (EINVAL otherwise); it starts FREE with the remote access set until a
// REG_MR sets its access.
func (r *device) AllocMR(m *emu.MR, t emu.MRType, maxNumSG int) error {
	if t != emu.MRTypeMemReg {
		return errorf(unix.EINVAL, "alloc MR: type %v, rxe allocates MEM_REG only", t)
	}
	if maxNumSG <= 0 || maxNumSG > r.attr.MaxFastRegPageListLen {
		return errorf(unix.EINVAL, "alloc MR: max_num_sg %d not in 1..%d", maxNumSG, r.attr.MaxFastRegPageListLen)
	}
	r.lock()
	defer r.unlock()
	x, err := r.newMR(m, t)
	if err != nil {
		return err
	}
	x.state, x.access, x.maxPages = memFree, ib.AccessRemote, maxNumSG
	m.Access = x.access
	return nil
}

// MapMRSG loads a fast-reg MR's page list from a DMA-mapped scatterlist
// (rxe_map_mr_sg / ib_sg_to_pages): the page size must be a multiple or a
// divisor of the system page (EINVAL); it maps as many entries as fit in
// max_num_sg pages and returns that count.
func (r *device) MapMRSG(m *emu.MR, sg []dma.Scatterlist, pageSize int) (int, error) {
	if pageSize <= 0 || (pageSize%dma.PageSize != 0 && dma.PageSize%pageSize != 0) {
		return 0, errorf(unix.EINVAL, "map MR sg: page size %d", pageSize)
	}
	r.lock()
	defer r.unlock()
	x := mrOf(m)
	x.pages, x.pageSize, x.length = nil, pageSize, 0
	mapped := 0
	for i, e := range sg {
		first := e.DMAAddress &^ uint64(pageSize-1)
		end := e.DMAAddress + uint64(e.DMALength)
		var pages []uint64
		for p := first; p < end; p += uint64(pageSize) {
			pages = append(pages, p)
		}
		if len(x.pages)+len(pages) > x.maxPages {
			break
		}
		if i == 0 {
			x.iova = e.DMAAddress
		}
		x.pages = append(x.pages, pages...)
		x.length += uint64(e.DMALength)
		mapped++
	}
	m.IOVA, m.Length, m.PageSize = x.iova, x.length, pageSize
	return mapped, nil
}

// ReregUserMR changes a user MR in place (rxe_rereg_user_mr): rxe does
// the PD and the access, a new range is EOPNOTSUPP, and so is access
// outside rxe's MR set; keys and memory stay. First an access that lets
// the MR be written is EACCES on a user MR whose pages were pinned
// read-only (ib_umem_check_rereg: registered with an access that did not
// let it be written); otherwise a PROT_READ buffer registered read-only
// could be made a remote write target. The access is checked before the
// PD moves, so a refused rereg changes nothing (6.12 moves the PD first
// and leaves it moved when it then refuses the access; later kernels
// check first).
func (r *device) ReregUserMR(m *emu.MR, flags emu.MRReregFlags, start, length, iova uint64, access ib.AccessFlags, pd *emu.PD) error {
	if bad := flags &^ (emu.MRReregPD | emu.MRReregAccess); bad != 0 {
		return errorf(unix.EOPNOTSUPP, "rereg MR: flags %v not supported", bad)
	}
	r.lock()
	defer r.unlock()
	x := mrOf(m)
	if flags&emu.MRReregAccess != 0 && access.Writable() && x.typ == emu.MRTypeUser && !x.writable {
		// ib_umem_check_rereg: the pages stay pinned as registered, and
		// were not pinned for writing.
		return errorf(unix.EACCES, "rereg MR: access %v lets the MR be written; its pages were pinned read-only", access)
	}
	if flags&emu.MRReregAccess != 0 && access&^accessMR != 0 {
		return errorf(unix.EOPNOTSUPP, "rereg MR: access %v not supported", access&^accessMR)
	}
	if flags&emu.MRReregPD != 0 {
		x.pd = pd
	}
	if flags&emu.MRReregAccess != 0 {
		x.access = access
	}
	return nil
}

// DeregMR frees an MR (rxe_dereg_mr): bound memory windows make it EINVAL.
func (r *device) DeregMR(m *emu.MR) error {
	r.lock()
	defer r.unlock()
	x := mrOf(m)
	if x.numMW > 0 {
		return errorf(unix.EINVAL, "dereg MR %#x: %d memory windows still bound", x.lkey, x.numMW)
	}
	x.state = memInvalid
	delete(r.mrs, x.idx)
	r.lastMR = nil
	r.mrPool.free(x.idx)
	// ib_umem_release: every packet looks its MR up by key under r.mu,
	// so nothing reaches the pages once the MR is gone from r.mrs.
	if x.unpin != nil {
		x.unpin()
		x.pinned, x.unpin = nil, nil
	}
	if x.uncharge != nil {
		x.uncharge()
		x.uncharge = nil
	}
	return nil
}

// mw is rxe's memory window.
type mw struct {
	core   *emu.MW
	idx    uint32
	typ    emu.MWType
	state  memState
	pd     *emu.PD
	rkey   uint32
	mr     *mr
	qp     *qp // type 2: the QP that bound it
	access ib.AccessFlags
	addr   uint64
	length uint64
}

func mwOf(w *emu.MW) *mw { return driver.Priv(w).(*mw) }

// AllocMW allocates a window (rxe_alloc_mw): type 1 starts VALID with
// length 0, type 2 FREE.
func (r *device) AllocMW(w *emu.MW) error {
	r.lock()
	defer r.unlock()
	x := &mw{core: w, typ: w.Type, pd: w.PD, state: memFree}
	if w.Type == emu.MWType1 {
		x.state = memValid
	}
	if err := poolLimit("alloc MW", "max_mw", len(r.mwPool.used), r.attr.MaxMW); err != nil {
		return err
	}
	idx, ok := r.mwPool.alloc(x)
	if !ok {
		return errorf(unix.ENOMEM, "MW pool exhausted")
	}
	x.idx = idx
	x.rkey = idx<<8 | uint32(r.keyByte(0))
	driver.SetKeys(w, 0, x.rkey)
	driver.SetPriv(w, x)
	r.mws[idx] = x
	return nil
}

// DeallocMW frees a window, unbinding it; it never fails.
func (r *device) DeallocMW(w *emu.MW) error {
	r.lock()
	defer r.unlock()
	x := mwOf(w)
	r.unbind(x)
	x.state = memInvalid
	delete(r.mws, x.idx)
	r.mwPool.free(x.idx)
	return nil
}

func (r *device) unbind(x *mw) {
	if x.mr != nil {
		x.mr.numMW--
		x.mr = nil
	}
	x.qp, x.access, x.addr, x.length = nil, 0, 0, 0
}

// regMR executes a REG_MR work request (rxe_reg_fast_mr): the MR must be
// FREE, in the QP's PD, and the new key may change only the low byte.
func (r *device) regMR(q *qp, wr *emu.SendWR) error {
	if wr.MR == nil {
		return errorf(unix.EINVAL, "REG_MR without an MR")
	}
	x, ok := driver.Priv(wr.MR).(*mr)
	if !ok || r.mrs[x.idx] != x {
		return errorf(unix.EINVAL, "REG_MR: MR does not exist")
	}
	switch {
	case x.state != memFree:
		return errorf(unix.EINVAL, "REG_MR: MR %#x is not FREE", x.lkey)
	case x.pd != q.pd:
		return errorf(unix.EINVAL, "REG_MR: MR %#x is in another PD", x.lkey)
	case wr.Key>>8 != x.idx:
		return errorf(unix.EINVAL, "REG_MR: key %#x changes the index bits of %#x", wr.Key, x.lkey)
	}
	x.lkey, x.rkey, x.access, x.state = wr.Key, wr.Key, wr.Access, memValid
	driver.SetKeys(x.core, wr.Key, wr.Key)
	x.core.Access = wr.Access
	return nil
}

// invalidate executes a LOCAL_INV (rxe_invalidate_mr / rxe_invalidate_mw):
// an MR must match the rkey (remote access) or lkey, have no bound MWs
// and be a fast-reg MR; an MW must match, not be type 1 and be bound.
func (r *device) invalidate(key uint32) error {
	idx := key >> 8
	if idx >= minMWIndex {
		x, ok := r.mws[idx]
		switch {
		case !ok:
			return errorf(unix.EINVAL, "invalidate %#x: no such MW", key)
		case x.rkey != key:
			return errorf(unix.EINVAL, "invalidate %#x: MW rkey is %#x", key, x.rkey)
		case x.typ == emu.MWType1:
			return errorf(unix.EINVAL, "invalidate %#x: type 1 MWs cannot be invalidated", key)
		case x.state == memInvalid:
			return errorf(unix.EINVAL, "invalidate %#x: MW is invalid", key)
		}
		r.unbind(x)
		x.state = memFree
		return nil
	}
	x, ok := r.mrs[idx]
	if !ok {
		return errorf(unix.EINVAL, "invalidate %#x: no such MR", key)
	}
	want := x.lkey
	if x.access&ib.AccessRemote != 0 {
		want = x.rkey
	}
	switch {
	case key != want:
		return errorf(unix.EINVAL, "invalidate %#x: MR key is %#x", key, want)
	case x.numMW > 0:
		return errorf(unix.EINVAL, "invalidate %#x: %d MWs bound", key, x.numMW)
	case x.typ != emu.MRTypeMemReg:
		return errorf(unix.EINVAL, "invalidate %#x: %v MRs cannot be invalidated", key, x.typ)
	}
	x.state = memFree
	return nil
}

// bindMW executes a BIND_MW work request (rxe_bind_mw).
func (r *device) bindMW(q *qp, wr *emu.SendWR) error {
	if wr.MW == nil {
		return errorf(unix.EINVAL, "BIND_MW without an MW")
	}
	w, ok := driver.Priv(wr.MW).(*mw)
	if !ok || r.mws[w.idx] != w || w.rkey != wr.MW.RKey() {
		return errorf(unix.EINVAL, "BIND_MW: MW does not exist or its rkey changed")
	}
	b := wr.Bind
	var m *mr
	if b.Length > 0 {
		if b.MR == nil {
			return errorf(unix.EINVAL, "BIND_MW: length %d without an MR", b.Length)
		}
		m, ok = driver.Priv(b.MR).(*mr)
		if !ok || r.mrs[m.idx] != m || m.lkey != b.MR.LKey() {
			return errorf(unix.EINVAL, "BIND_MW: MR lkey does not match")
		}
	}
	if bad := b.Access &^ accessMW; bad != 0 {
		return errorf(unix.EOPNOTSUPP, "BIND_MW: access %v not supported", bad)
	}
	switch {
	case w.typ == emu.MWType1 && w.state != memValid:
		return errorf(unix.EINVAL, "BIND_MW: type 1 MW not VALID")
	case w.typ == emu.MWType1 && b.Access&ib.AccessZeroBased != 0:
		return errorf(unix.EINVAL, "BIND_MW: type 1 MWs cannot be zero based")
	case w.typ == emu.MWType2 && w.state != memFree:
		return errorf(unix.EINVAL, "BIND_MW: type 2 MW is not FREE (already bound)")
	case w.typ == emu.MWType2 && b.Length == 0:
		return errorf(unix.EINVAL, "BIND_MW: type 2 MW needs a non-zero length")
	case w.pd != q.pd:
		return errorf(unix.EINVAL, "BIND_MW: MW in another PD")
	}
	if m != nil {
		switch {
		case m.pd != q.pd:
			return errorf(unix.EINVAL, "BIND_MW: MR in another PD")
		case m.access&ib.AccessZeroBased != 0:
			return errorf(unix.EINVAL, "BIND_MW: MR is zero based")
		case m.access&ib.AccessMWBind == 0:
			return errorf(unix.EINVAL, "BIND_MW: MR lacks IB_ACCESS_MW_BIND")
		case b.Access&(ib.AccessRemoteWrite|ib.AccessRemoteAtomic) != 0 && m.access&ib.AccessLocalWrite == 0:
			return errorf(unix.EINVAL, "BIND_MW: remote write/atomic needs LOCAL_WRITE on the MR")
		}
		if b.Access&ib.AccessZeroBased != 0 {
			if b.Length > m.length {
				return errorf(unix.EINVAL, "BIND_MW: zero-based window longer than the MR")
			}
		} else if b.Addr < m.iova || b.Addr+b.Length > m.iova+m.length {
			return errorf(unix.EINVAL, "BIND_MW: window outside the MR")
		}
	}
	r.unbind(w)
	w.rkey = w.rkey&0xFFFFFF00 | wr.Key&0xFF
	driver.SetKeys(w.core, 0, w.rkey)
	w.access, w.addr, w.length, w.state = b.Access, b.Addr, b.Length, memValid
	if m != nil {
		w.mr = m
		m.numMW++
	}
	if w.typ == emu.MWType2 {
		w.qp = q
	}
	return nil
}

// lookupRKey resolves an rkey for a remote access of length bytes at va by
// q (the responder's check_rkey): MR or MW by index, exact
// key, same PD, type-2 MW bound to q, access granted, VALID, range inside.
// A failure is what the responder answers with NAK 0x62 (remote access
// error); r.mu held. It returns the memory address of va.
func (r *device) lookupRKey(q *qp, rkey uint32, access ib.AccessFlags, va, length uint64) (uint64, error) {
	_, addr, err := r.rkeyMR(q, rkey, access, va, length)
	return addr, err
}

// rkeyMR is lookupRKey returning the MR behind the key as well (for a
// window, the MR it is bound to).
func (r *device) rkeyMR(q *qp, rkey uint32, access ib.AccessFlags, va, length uint64) (*mr, uint64, error) {
	fail := func(err error) (*mr, uint64, error) { return nil, 0, err }
	idx := rkey >> 8
	if idx >= minMWIndex {
		w, ok := r.mws[idx]
		switch {
		case !ok || w.rkey != rkey:
			return fail(errorf(unix.EACCES, "rkey %#x: no such MW", rkey))
		case w.pd != q.pd:
			return fail(errorf(unix.EACCES, "rkey %#x: MW in another PD", rkey))
		case w.typ == emu.MWType2 && w.qp != q:
			return fail(errorf(unix.EACCES, "rkey %#x: type 2 MW bound to another QP", rkey))
		case w.length == 0 || w.state != memValid:
			return fail(errorf(unix.EACCES, "rkey %#x: MW not bound", rkey))
		case w.access&access != access:
			return fail(errorf(unix.EACCES, "rkey %#x: MW access %v lacks %v", rkey, w.access, access))
		}
		base := w.addr
		if w.access&ib.AccessZeroBased != 0 {
			va += w.addr
			base = w.addr
		}
		if va < base || va+length > base+w.length {
			return fail(errorf(unix.EACCES, "rkey %#x: %#x+%d outside the window", rkey, va, length))
		}
		a, err := r.mrAddr(w.mr, va, length)
		return w.mr, a, err
	}
	m, ok := r.mrByIdx(idx)
	switch {
	case !ok || m.rkey != rkey:
		return fail(errorf(unix.EACCES, "rkey %#x: no such MR", rkey))
	case m.pd != q.pd:
		return fail(errorf(unix.EACCES, "rkey %#x: MR in another PD", rkey))
	case m.access&access != access:
		return fail(errorf(unix.EACCES, "rkey %#x: MR access %v lacks %v", rkey, m.access, access))
	case m.state != memValid:
		return fail(errorf(unix.EACCES, "rkey %#x: MR not valid", rkey))
	}
	a, err := r.mrAddr(m, va, length)
	return m, a, err
}

// memSlice returns the n bytes at memory address addr of user MR m in the
// device's Memory (m.space nil; addr from mrAddr), as Memory.Slice does,
// from the MR's memory looked up once while no buffer is freed. r.mu
// held.
func (r *device) memSlice(m *mr, addr uint64, n int) ([]byte, error) {
	mem := r.dev.Memory()
	if f := mem.Frees(); m.mem == nil || m.memFrees != f {
		b, err := mem.Slice(m.start, int(m.length))
		if err != nil {
			m.mem = nil
			return mem.Slice(addr, n)
		}
		m.mem, m.memFrees = b, f
	}
	off := addr - m.start
	if addr < m.start || uint64(n) > uint64(len(m.mem)) || off > uint64(len(m.mem))-uint64(n) {
		return mem.Slice(addr, n)
	}
	return m.mem[off : off+uint64(n) : off+uint64(n)], nil
}

// mrAddr checks va+length against an MR (mr_check_range) and returns the
// memory address: DMA MRs accept anything, user MRs map iova to their
// start, fast-reg MRs hold DMA addresses (= memory addresses).
func (r *device) mrAddr(m *mr, va, length uint64) (uint64, error) {
	if m.typ == emu.MRTypeDMA {
		return va, nil
	}
	if va < m.iova || length > m.length || va-m.iova > m.length-length {
		return 0, errorf(unix.EACCES, "%#x+%d outside MR %#x (%#x+%d)", va, length, m.lkey, m.iova, m.length)
	}
	if m.typ == emu.MRTypeUser {
		return m.start + (va - m.iova), nil
	}
	return va, nil
}
