package rxe

import "github.com/softroce/softroce/emu"

// readAheadSize bounds one read ahead of the requester from a user MR in
// another process's address space.
const readAheadSize = 64 << 10

// readAhead holds payload bytes of the send WQE being sent, read from a
// user MR that lies in another address space (a daemon's client, where
// each read is a system call) ahead of the packets that carry them: one
// read per readAheadSize bytes of an SGE instead of one per packet. The
// bytes are the WQE's alone: its buffer is the device's until the WQE
// completes, so they cannot change meanwhile, and runSQ drops them when it
// starts another WQE. Every packet still looks its SGEs up (lookupLKey),
// so an MR deregistered mid-message fails the packets after it as before.
type readAhead struct {
	w      *sendWQE // the WQE the bytes belong to (nil: none)
	m      *mr
	addr   uint64 // address of buf[0] in m's space
	buf    []byte
	mem    []byte // buf's backing store, kept between WQEs
	failed bool   // a read ahead for w failed: w's packets read their own bytes
}

// dropReadAhead forgets the bytes read ahead (a WQE starts); r.mu held.
func (q *qp) dropReadAhead() {
	if q.ahead != nil {
		q.ahead.w, q.ahead.failed = nil, false
	}
}

// readSGE reads dst from the SGE s of w (already looked up: m) for the
// requester; rest is how many bytes of the SGE remain from s.Addr on.
// A user MR in another address space is read ahead (readAhead); when the
// read ahead fails (a page further on is not mapped), the WQE's packets
// read their own bytes from then on, so the fault fails the packet that
// reaches it.
func (r *device) readSGE(q *qp, w *sendWQE, m *mr, s emu.SGE, rest uint64, dst []byte) error {
	if m.typ != emu.MRTypeUser || m.space == nil || m.pinned != nil || w == nil {
		return r.sgeIO(m, s, dst, false)
	}
	addr, err := r.mrAddr(m, s.Addr, uint64(len(dst)))
	if err != nil {
		return err
	}
	r.flushWrites()
	a := q.ahead
	if a != nil && a.w == w && a.failed {
		return r.memIO(m, addr, dst, false)
	}
	if a == nil || a.w != w || a.m != m || addr < a.addr || addr+uint64(len(dst)) > a.addr+uint64(len(a.buf)) {
		n := int(min(rest, readAheadSize))
		if n <= len(dst) {
			return r.memIO(m, addr, dst, false)
		}
		if a == nil {
			a = &readAhead{}
			q.ahead = a
		}
		if len(a.mem) < n {
			a.mem = make([]byte, readAheadSize)
		}
		if _, err := m.space.ReadAt(a.mem[:n], addr); err != nil {
			a.w, a.buf, a.failed = w, nil, true
			return r.memIO(m, addr, dst, false)
		}
		a.w, a.m, a.addr, a.buf, a.failed = w, m, addr, a.mem[:n], false
	}
	copy(dst, a.buf[addr-a.addr:])
	return nil
}
