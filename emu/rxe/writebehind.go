package rxe

import (
	"errors"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
)

// writeBehindSize bounds the RDMA WRITE payload the responder gathers
// before it writes it to a user MR in another address space.
const writeBehindSize = 64 << 10

// writeBehind is RDMA WRITE payload accepted for a user MR that lies in
// another address space (a daemon's client, where each write is a system
// call), not yet written there: the packets of one message that follow
// each other in a batch go in one write. It never outlives the device's
// lock (unlock writes it first), nor a message's last packet, and any other
// access to memory (memIO, the requester's reads) writes it first, so
// nothing the device or a peer does after a packet can see memory without
// it.
type writeBehind struct {
	m    *mr
	addr uint64 // address of buf[0] in m's space
	buf  []byte
}

// writePayload places an RDMA WRITE packet's payload at addr of m (execWrite);
// last is the message's last packet. r.mu held.
//
// A user MR in another address space takes the payload into r.wb, and
// writing it cannot fail: the kernel's MR holds the pages it pinned at
// registration, so a WRITE lands even where the program has since unmapped
// them (out of its sight); here the bytes for pages it no longer maps are
// dropped, and an owner that exited takes nothing.
func (r *device) writePayload(m *mr, addr uint64, pay []byte, last bool) error {
	if m.typ != emu.MRTypeUser || m.space == nil || m.pinned != nil || m.odp {
		// An ODP MR has no pinned pages to take a write the program's
		// mappings refuse: each packet is written as it comes, and one
		// that faults fails (rxe_odp_mr_copy).
		return r.memIO(m, addr, pay, true)
	}
	wb := &r.wb
	if len(wb.buf) > 0 && (wb.m != m || wb.addr+uint64(len(wb.buf)) != addr || len(wb.buf)+len(pay) > writeBehindSize) {
		r.flushWrites()
	}
	if len(pay) > writeBehindSize {
		r.flushWrites()
		writeSpace(m, addr, pay)
		return nil
	}
	if len(wb.buf) == 0 {
		wb.m, wb.addr = m, addr
		if cap(wb.buf) < writeBehindSize {
			wb.buf = make([]byte, 0, writeBehindSize)
		}
	}
	wb.buf = append(wb.buf, pay...)
	if last {
		r.flushWrites()
	}
	return nil
}

// flushWrites writes r.wb to its MR's space. r.mu held.
func (r *device) flushWrites() {
	wb := &r.wb
	if len(wb.buf) == 0 {
		return
	}
	writeSpace(wb.m, wb.addr, wb.buf)
	wb.buf, wb.m = wb.buf[:0], nil
}

// writeSpace writes b at addr of m's space. A range that fails as a whole
// (the program unmapped part of it) is written page by page, so the pages
// still mapped get their bytes.
func writeSpace(m *mr, addr uint64, b []byte) {
	if _, err := m.space.WriteAt(b, addr); err == nil || errors.Is(err, dma.ErrSpaceGone) {
		return
	}
	for off := 0; off < len(b); {
		a := addr + uint64(off)
		n := min(len(b)-off, int(dma.PageSize-a%dma.PageSize))
		m.space.WriteAt(b[off:off+n], a)
		off += n
	}
}
