package rxe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
)

// odpAccess is what the ODP buffers of these tests grant.
const odpAccess = allAccess | ib.AccessOnDemand | ib.AccessFlushGlobal | ib.AccessFlushPersistent

// odpSize is the size of each side's ODP buffer: two pages.
const odpSize = 8192

// odpEnv is a connected pair with an ODP MR on each side.
type odpEnv struct {
	p          *pair
	c          conn
	addrA      uint64 // A's buffer (the requester's local memory)
	addrB      uint64 // B's buffer (the responder's memory)
	bufA, bufB []byte // their bytes as mapped now
	mrA, mrB   *emu.MR
}

// fill writes a pattern from seed into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*13)
	}
}

// odpMR allocates odpSize bytes on n filled from seed and registers them
// as an ODP MR.
func odpMR(t *testing.T, n *node, seed byte) (uint64, []byte, *emu.MR) {
	t.Helper()
	addr, b := n.dev.Memory().Alloc(odpSize)
	fill(b, seed)
	mr, err := n.pd.RegUserMR(addr, odpSize, addr, odpAccess)
	if err != nil {
		t.Fatalf("register ODP MR: %v", err)
	}
	return addr, b, mr
}

func newODPEnv(t *testing.T, typ qpstate.Type, srq bool) *odpEnv {
	t.Helper()
	p := newPair(t, pairOpts{})
	o := qpOpts{typ: typ, accessB: allAccess | ib.AccessFlushGlobal | ib.AccessFlushPersistent}
	if srq {
		s, err := p.b.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 16, MaxSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		o.srqB = s
	}
	e := &odpEnv{p: p}
	if typ == qpstate.TypeUD {
		e.c = conn{qa: p.a.udQP(typ, nil), qb: p.b.udQP(typ, o.srqB)}
	} else {
		e.c = p.connect(o)
	}
	e.addrA, e.bufA, e.mrA = odpMR(t, p.a, 1)
	e.addrB, e.bufB, e.mrB = odpMR(t, p.b, 101)
	return e
}

// unmap frees side's buffer ('a' or 'b'): the pages the ODP MR was
// registered on are gone from the address space.
func (e *odpEnv) unmap(t *testing.T, side byte) {
	t.Helper()
	n, addr := e.p.a, e.addrA
	if side == 'b' {
		n, addr = e.p.b, e.addrB
	}
	if err := n.dev.Memory().Free(addr); err != nil {
		t.Fatal(err)
	}
}

// remap unmaps side's buffer and maps a new one with other bytes at the
// same address, as a program that munmaps and mmaps MAP_FIXED does.
func (e *odpEnv) remap(t *testing.T, side byte) {
	t.Helper()
	e.unmap(t, side)
	b := make([]byte, odpSize)
	fill(b, 0x5A+side)
	n, addr := e.p.a, e.addrA
	if side == 'b' {
		n, addr = e.p.b, e.addrB
	}
	if err := n.dev.Memory().Map(addr, b); err != nil {
		t.Fatal(err)
	}
	if side == 'b' {
		e.bufB = b
	} else {
		e.bufA = b
	}
}

// odpCase is one opcode on ODP MRs: post starts it (and the receive it
// needs), check verifies the data once it succeeded, and unmapA and unmapB
// are the completions (A's send, B's receive or -1 for none) when A's or
// B's buffer is not mapped.
type odpCase struct {
	name   string
	typ    qpstate.Type
	srq    bool
	post   func(e *odpEnv)
	check  func(t *testing.T, e *odpEnv)
	unmapA [2]emu.WCStatus
	unmapB [2]emu.WCStatus
}

const noWC emu.WCStatus = -1

// recvB posts a receive of the whole of B's buffer (on the SRQ if any).
func (e *odpEnv) recvB() {
	wr := emu.RecvWR{WRID: 9, SGList: []emu.SGE{{Addr: e.addrB, Length: odpSize, LKey: e.mrB.LKey()}}}
	if s := e.c.qb.SRQ; s != nil {
		if _, err := s.PostRecv([]emu.RecvWR{wr}); err != nil {
			e.p.t.Fatal(err)
		}
		return
	}
	e.p.b.postRecv(e.c.qb, wr)
}

func (e *odpEnv) send(wr emu.SendWR) {
	wr.WRID, wr.SendFlags = 1, wr.SendFlags|emu.SendSignaled
	e.p.a.postSend(e.c.qa, wr)
}

// sendCase is a SEND of 5000 bytes (two packets) from A's buffer into
// B's receive.
func sendCase(name string, typ qpstate.Type, srq bool) odpCase {
	c := odpCase{name: name, typ: typ, srq: srq,
		post: func(e *odpEnv) {
			e.recvB()
			wr := emu.SendWR{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: e.addrA + 100, Length: 5000, LKey: e.mrA.LKey()}}}
			if typ == qpstate.TypeUD {
				wr.SGList[0].Length = 1000
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = e.p.a.ah(e.p.b.ip, e.p.b.mac), e.c.qb.QPNum(), 0x11111111
			}
			e.send(wr)
		},
		check: func(t *testing.T, e *odpEnv) {
			off, n := 0, 5000
			if typ == qpstate.TypeUD {
				off, n = emu.GRHSize, 1000
			}
			if !bytes.Equal(e.bufB[off:off+n], e.bufA[100:100+n]) {
				t.Error("the receive buffer does not hold the bytes sent")
			}
		},
		// rxe_requester: copy_data's -EFAULT is IB_WC_LOC_PROT_ERR.
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		// send_data_in: RESPST_ERR_MALFORMED_WQE, LOC_QP_OP_ERR on the
		// receive and NAK remote operational error on RC.
		unmapB: [2]emu.WCStatus{emu.WCRemOpErr, emu.WCLocQPOpErr},
	}
	if typ == qpstate.TypeUD || typ == qpstate.TypeUC {
		// No acknowledgement tells the sender.
		c.unmapB[0] = emu.WCSuccess
	}
	return c
}

// writeCase is an RDMA WRITE of 6000 bytes from A's buffer into B's.
func writeCase(name string, typ qpstate.Type, unmapB [2]emu.WCStatus) odpCase {
	return odpCase{name: name, typ: typ,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{{Addr: e.addrA, Length: 6000, LKey: e.mrA.LKey()}},
				RemoteAddr: e.addrB + 1000, RKey: e.mrB.RKey()})
		},
		check: func(t *testing.T, e *odpEnv) {
			if !bytes.Equal(e.bufB[1000:7000], e.bufA[:6000]) {
				t.Error("the target does not hold the bytes written")
			}
		},
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		unmapB: unmapB}
}

var odpCases = []odpCase{
	sendCase("RC SEND", qpstate.TypeRC, false),
	sendCase("RC SEND to SRQ", qpstate.TypeRC, true),
	sendCase("UD SEND", qpstate.TypeUD, false),
	sendCase("UD SEND to SRQ", qpstate.TypeUD, true),
	// write_data_in: RESPST_ERR_RKEY_VIOLATION, NAK remote access.
	writeCase("RC RDMA WRITE", qpstate.TypeRC, [2]emu.WCStatus{emu.WCRemAccessErr, noWC}),
	// rxe reports no UC ODP caps but refuses UC nothing on an ODP MR: the
	// pages are resolved as for RC; a fault drops the WRITE (class E).
	sendCase("UC SEND", qpstate.TypeUC, false),
	writeCase("UC RDMA WRITE", qpstate.TypeUC, [2]emu.WCStatus{emu.WCSuccess, noWC}),
	{name: "RC RDMA READ", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRRDMARead, SGList: []emu.SGE{{Addr: e.addrA + 8, Length: 6000, LKey: e.mrA.LKey()}},
				RemoteAddr: e.addrB, RKey: e.mrB.RKey()})
		},
		check: func(t *testing.T, e *odpEnv) {
			if !bytes.Equal(e.bufA[8:6008], e.bufB[:6000]) {
				t.Error("the local buffer does not hold the bytes read")
			}
		},
		// rxe_comp do_read: copy_data fails, IB_WC_LOC_PROT_ERR.
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		// read_reply: RESPST_ERR_RKEY_VIOLATION.
		unmapB: [2]emu.WCStatus{emu.WCRemAccessErr, noWC}},
	{name: "RC CMP_SWAP", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			cmp := binary.LittleEndian.Uint64(e.bufB[4096:])
			e.send(emu.SendWR{Opcode: emu.WRAtomicCmpAndSwp, SGList: []emu.SGE{{Addr: e.addrA + 16, Length: 8, LKey: e.mrA.LKey()}},
				RemoteAddr: e.addrB + 4096, RKey: e.mrB.RKey(), CompareAdd: cmp, Swap: 0x1122334455667788})
		},
		check: func(t *testing.T, e *odpEnv) {
			if got := binary.LittleEndian.Uint64(e.bufB[4096:]); got != 0x1122334455667788 {
				t.Errorf("target %#x after a compare that matched", got)
			}
		},
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		// rxe_odp_atomic_op: the fault is RESPST_ERR_RKEY_VIOLATION.
		unmapB: [2]emu.WCStatus{emu.WCRemAccessErr, noWC}},
	{name: "RC FETCH_ADD", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRAtomicFetchAndAdd, SGList: []emu.SGE{{Addr: e.addrA + 16, Length: 8, LKey: e.mrA.LKey()}},
				RemoteAddr: e.addrB + 8, RKey: e.mrB.RKey(), CompareAdd: 5})
		},
		check: func(t *testing.T, e *odpEnv) {
			orig := binary.LittleEndian.Uint64(e.bufA[16:])
			if got := binary.LittleEndian.Uint64(e.bufB[8:]); got != orig+5 {
				t.Errorf("target %#x, want the original %#x returned plus 5", got, orig)
			}
		},
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		unmapB: [2]emu.WCStatus{emu.WCRemAccessErr, noWC}},
	{name: "RC ATOMIC_WRITE", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRAtomicWrite, SGList: []emu.SGE{{Addr: e.addrA + 24, Length: 8, LKey: e.mrA.LKey()}},
				RemoteAddr: e.addrB + 4104, RKey: e.mrB.RKey()})
		},
		check: func(t *testing.T, e *odpEnv) {
			if !bytes.Equal(e.bufB[4104:4112], e.bufA[24:32]) {
				t.Error("the target does not hold the 8 bytes written")
			}
		},
		unmapA: [2]emu.WCStatus{emu.WCLocProtErr, noWC},
		// rxe_odp_do_atomic_write: RESPST_ERR_RKEY_VIOLATION.
		unmapB: [2]emu.WCStatus{emu.WCRemAccessErr, noWC}},
	{name: "RC FLUSH persistent", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRFlush, RemoteAddr: e.addrB, RKey: e.mrB.RKey(), FlushLen: odpSize,
				FlushType: emu.FlushPersistent, FlushLevel: emu.FlushRange})
		},
		check:  func(*testing.T, *odpEnv) {},
		unmapA: [2]emu.WCStatus{emu.WCSuccess, noWC},
		// rxe_odp_flush_pmem_iova faults the range in: it fails.
		unmapB: [2]emu.WCStatus{emu.WCRemAccessErr, noWC}},
	{name: "RC FLUSH global", typ: qpstate.TypeRC,
		post: func(e *odpEnv) {
			e.send(emu.SendWR{Opcode: emu.WRFlush, RemoteAddr: e.addrB, RKey: e.mrB.RKey(), FlushLen: odpSize,
				FlushType: emu.FlushGlobal, FlushLevel: emu.FlushMR})
		},
		check:  func(*testing.T, *odpEnv) {},
		unmapA: [2]emu.WCStatus{emu.WCSuccess, noWC},
		// Global visibility touches no page.
		unmapB: [2]emu.WCStatus{emu.WCSuccess, noWC}},
}

// wantStatuses checks A's send completion and B's receive completion.
func (e *odpEnv) wantStatuses(t *testing.T, want [2]emu.WCStatus) {
	t.Helper()
	e.p.run(0)
	for i, cq := range []*emu.CQ{e.p.a.scq, e.p.b.rcq} {
		wcs := poll(cq)
		switch {
		case want[i] == noWC && len(wcs) != 0:
			t.Errorf("%s CQ: %d completions, want none: %+v", []string{"A's send", "B's receive"}[i], len(wcs), wcs)
		case want[i] != noWC && (len(wcs) == 0 || wcs[0].Status != want[i]):
			t.Errorf("%s CQ: %+v, want first %v", []string{"A's send", "B's receive"}[i], wcs, want[i])
		}
	}
}

// TestODPOpcodes: each opcode rxe 7.3 serves on ODP MRs moves its data,
// on pages mapped at registration and on pages the owner mapped anew
// after it (the MR reaches the new ones); with the pages of either side
// unmapped it completes as rxe_odp.c makes it: the requester's own fault
// IB_WC_LOC_PROT_ERR, a responder's RKEY violation (NAK remote access
// error; on UC a dropped WRITE), a receive's malformed WQE. UC, which rxe
// does not list in its ODP caps, is served all the same, as rxe does.
func TestODPOpcodes(t *testing.T) {
	for _, c := range odpCases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("mapped", func(t *testing.T) {
				e := newODPEnv(t, c.typ, c.srq)
				c.post(e)
				e.wantStatuses(t, [2]emu.WCStatus{emu.WCSuccess, map[bool]emu.WCStatus{true: emu.WCSuccess, false: noWC}[c.unmapB[1] != noWC]})
				c.check(t, e)
			})
			t.Run("remapped", func(t *testing.T) {
				e := newODPEnv(t, c.typ, c.srq)
				e.remap(t, 'a')
				e.remap(t, 'b')
				c.post(e)
				e.wantStatuses(t, [2]emu.WCStatus{emu.WCSuccess, map[bool]emu.WCStatus{true: emu.WCSuccess, false: noWC}[c.unmapB[1] != noWC]})
				c.check(t, e)
			})
			for _, side := range []byte{'a', 'b'} {
				t.Run("unmapped "+string(side), func(t *testing.T) {
					e := newODPEnv(t, c.typ, c.srq)
					e.unmap(t, side)
					c.post(e)
					want := c.unmapA
					if side == 'b' {
						want = c.unmapB
					}
					e.wantStatuses(t, want)
				})
			}
		})
	}
}

// TestODPRegister: an ODP MR is registered as rxe_odp_mr_init_user does:
// over memory not mapped (which a pinned MR refuses with EFAULT), without
// a pinned page to charge, with FLUSH_PERSISTENT on memory that is not
// persistent; implicit ODP is EINVAL (rxe has no IB_ODP_SUPPORT_IMPLICIT),
// a wrapping range EOVERFLOW; and a device without ODP (rxe before 6.15)
// refuses IB_ACCESS_ON_DEMAND with EOPNOTSUPP.
func TestODPRegister(t *testing.T) {
	e := newEnv(t)
	addr, _ := e.dev.Memory().Alloc(odpSize)
	if err := e.dev.Memory().Free(addr); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pd.RegUserMR(addr, odpSize, addr, allAccess); !errors.Is(err, unix.EFAULT) {
		t.Errorf("pinned MR on unmapped memory: %v, want EFAULT", err)
	}
	if _, err := e.pd.RegUserMR(addr, odpSize, addr, allAccess|ib.AccessOnDemand); err != nil {
		t.Errorf("ODP MR on unmapped memory: %v", err)
	}
	live, _ := e.dev.Memory().Alloc(odpSize)
	if _, err := e.pd.RegUserMR(live, odpSize, live, allAccess|ib.AccessFlushPersistent); !errors.Is(err, unix.EINVAL) {
		t.Errorf("pinned persistent-flush MR: %v, want EINVAL", err)
	}
	if _, err := e.pd.RegUserMR(live, odpSize, live, odpAccess); err != nil {
		t.Errorf("ODP persistent-flush MR: %v", err)
	}
	for _, c := range []struct {
		name                string
		start, length, iova uint64
		want                unix.Errno
	}{
		{"implicit", 0, math.MaxUint64, 0, unix.EINVAL},
		{"implicit with iova", 0, math.MaxUint64, 0x1000, unix.EINVAL},
		{"wraps", 0xFFFFFFFFFFFFF000, 0x2000, 0xFFFFFFFFFFFFF000, unix.EOVERFLOW},
		{"rounds past the top", 0xFFFFFFFFFFFFF000, 0xF00, 0xFFFFFFFFFFFFF000, unix.EOVERFLOW},
		{"no page", 0x10000, 0, 0x10000, unix.EINVAL},
	} {
		if _, err := e.pd.RegUserMR(c.start, c.length, c.iova, allAccess|ib.AccessOnDemand); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	old := newEnvWith(t, Config{NoODP: true})
	a, _ := old.dev.Memory().Alloc(odpSize)
	if _, err := old.pd.RegUserMR(a, odpSize, a, allAccess|ib.AccessOnDemand); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("ON_DEMAND without ODP: %v, want EOPNOTSUPP", err)
	}
	if c := old.dev.Query().ODPCaps; c != (emu.ODPCaps{}) {
		t.Errorf("NoODP device: odp caps %+v", c)
	}
}
