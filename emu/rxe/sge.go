package rxe

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// lookupLKey resolves the MR of a local SGE (lookup_mr with
// RXE_LOOKUP_LOCAL): the index must exist, the lkey match
// exactly, the MR be in q's PD, grant every bit of access and be VALID, and
// the SGE lie inside it. r.mu held.
func (r *device) lookupLKey(q *qp, s emu.SGE, access ib.AccessFlags) (*mr, error) {
	m, ok := r.mrByIdx(s.LKey >> 8)
	switch {
	case !ok || m.lkey != s.LKey:
		return nil, errorf(unix.EINVAL, "lkey %#x: no such MR", s.LKey)
	case m.pd != q.pd:
		return nil, errorf(unix.EINVAL, "lkey %#x: MR in another PD", s.LKey)
	case m.access&access != access:
		return nil, errorf(unix.EACCES, "lkey %#x: MR access %v lacks %v", s.LKey, m.access, access)
	case m.state != memValid:
		return nil, errorf(unix.EINVAL, "lkey %#x: MR not valid", s.LKey)
	}
	if _, err := r.mrAddr(m, s.Addr, uint64(s.Length)); err != nil {
		return nil, err
	}
	return m, nil
}

// mrByIdx returns the MR of index idx, trying the one it found last
// before the map: the packets of a message use the same MR. r.mu held.
func (r *device) mrByIdx(idx uint32) (*mr, bool) {
	if m := r.lastMR; m != nil && m.idx == idx {
		return m, true
	}
	m, ok := r.mrs[idx]
	if ok {
		r.lastMR = m
	}
	return m, ok
}

// sgeIO moves buf to or from an SGE for the device. DMA and fast-reg MRs
// hold DMA addresses: the access goes through the device's DMA mapper, so
// strict mode checks it (mapped, direction, ownership). A user MR is
// pinned user memory reached through its own mapping, not the DMA API.
func (r *device) sgeIO(m *mr, s emu.SGE, buf []byte, write bool) error {
	addr, err := r.mrAddr(m, s.Addr, uint64(len(buf)))
	if err != nil {
		return err
	}
	return r.memIO(m, addr, buf, write)
}

// gather copies the data of a send SGE list into dst (the requester
// reading a message; rxe's copy_data from the lkeys). Every SGE is looked
// up; a failure is what the requester turns into IB_WC_LOC_QP_OP_ERR (bad
// key) or IB_WC_LOC_PROT_ERR (memory fault). r.mu held.
func (r *device) gather(q *qp, sgl []emu.SGE, dst []byte) (int, error) {
	n := 0
	for _, s := range sgl {
		if n == len(dst) {
			break
		}
		m, err := r.lookupLKey(q, s, 0)
		if err != nil {
			return n, err
		}
		k := min(int(s.Length), len(dst)-n)
		if err := r.sgeIO(m, emu.SGE{Addr: s.Addr, Length: uint32(k), LKey: s.LKey}, dst[n:n+k], false); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// scatter copies src into a receive or read-result SGE list, which needs
// IB_ACCESS_LOCAL_WRITE (the responder writing a message, the completer a
// READ response). It fails with ENOSPC when src does not fit. r.mu held.
func (r *device) scatter(q *qp, sgl []emu.SGE, src []byte) (int, error) {
	n := 0
	for _, s := range sgl {
		if n == len(src) {
			break
		}
		m, err := r.lookupLKey(q, s, ib.AccessLocalWrite)
		if err != nil {
			return n, err
		}
		k := min(int(s.Length), len(src)-n)
		if err := r.sgeIO(m, emu.SGE{Addr: s.Addr, Length: uint32(k), LKey: s.LKey}, src[n:n+k], true); err != nil {
			return n, err
		}
		n += k
	}
	if n < len(src) {
		return n, errorf(unix.ENOSPC, "%d bytes do not fit the %d-byte SGE list", len(src), n)
	}
	return n, nil
}
