package rxe

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/wire"
)

// flushBuf registers size bytes on n with access.
func flushBuf(t *testing.T, n *node, size int, access ib.AccessFlags) (uint64, *emu.MR) {
	t.Helper()
	addr, _ := n.dev.Memory().Alloc(size)
	mr, err := n.pd.RegUserMR(addr, uint64(size), addr, access)
	if err != nil {
		t.Fatal(err)
	}
	return addr, mr
}

// TestFlushGlobal: a FLUSH of a range with placement global visibility
// goes out as BTH FETH RETH (SEL 0, PLT 1, the range in the RETH), is
// answered with an empty RDMA_READ_RESPONSE_ONLY, and completes
// IB_WC_FLUSH with the flush's length; a whole-region FLUSH (IB_FLUSH_MR)
// succeeds whatever its RETH range says.
func TestFlushGlobal(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{accessB: allAccess | ib.AccessFlushGlobal})
	dst, mrb := flushBuf(t, p.b, 4096, allAccess|ib.AccessFlushGlobal)
	p.a.postSend(c.qa,
		emu.SendWR{WRID: 1, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled, RemoteAddr: dst + 64, RKey: mrb.RKey(),
			FlushLen: 1024, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushRange},
		emu.SendWR{WRID: 2, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled, RemoteAddr: 0x1234, RKey: mrb.RKey(),
			FlushLen: 1 << 20, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushMR})
	p.settle()
	req := p.a.rec.take(t)
	wantOps(t, "requests", req, wire.RCFlush, wire.RCFlush)
	f, r := req[0].FETH(), req[0].RETH()
	if f.Selectivity() != 0 || f.Placement() != 1 || r.VA() != dst+64 || r.RKey() != mrb.RKey() || r.DMALen() != 1024 {
		t.Errorf("first FLUSH: FETH sel %d plt %d, RETH %#x %#x %d", f.Selectivity(), f.Placement(), r.VA(), r.RKey(), r.DMALen())
	}
	if f := req[1].FETH(); f.Selectivity() != 1 || f.Placement() != 1 {
		t.Errorf("second FLUSH: FETH sel %d plt %d, want 1 1", f.Selectivity(), f.Placement())
	}
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCRDMAReadResponseOnly, wire.RCRDMAReadResponseOnly)
	for i, x := range resp {
		if x.PayloadLen() != 0 || x.BTH().PSN() != req[i].BTH().PSN() {
			t.Errorf("response %d: %d bytes, PSN %d, want empty for PSN %d", i, x.PayloadLen(), x.BTH().PSN(), req[i].BTH().PSN())
		}
	}
	wcs := poll(p.a.scq)
	wantWC(t, "send", wcs, emu.WCSuccess, emu.WCSuccess)
	if wcs[0].Opcode != emu.WCFlush || wcs[0].ByteLen != 1024 || wcs[1].ByteLen != 1<<20 {
		t.Errorf("WCs %+v", wcs)
	}

	// A duplicate FLUSH is answered again from its responder resource.
	if _, err := p.a.end.WritePackets([][]byte{req[0].Frame()}); err != nil {
		t.Fatal(err)
	}
	p.settle()
	dup := p.b.rec.take(t)
	wantOps(t, "duplicate", dup, wire.RCRDMAReadResponseOnly)
	if dup[0].BTH().PSN() != req[0].BTH().PSN() {
		t.Errorf("duplicate answered with PSN %d, want %d", dup[0].BTH().PSN(), req[0].BTH().PSN())
	}
	if n := p.b.counter("duplicate_request"); n != 1 {
		t.Errorf("duplicate_request %d, want 1", n)
	}
}

// TestFlushNAKs: the responder's refusals, each with the NAK rxe sends
// and the completion the requester gets: the QP without the FLUSH access
// of the placement type (check_qp_attr_access: NAK 0x61), the MR without
// it or a range outside it (check_rkey: NAK 0x62), a persistent flush
// into memory that cannot be persistent (0x62), a RETH length above 2^31
// (check_length: NAK 0x61).
func TestFlushNAKs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		qpAccess   ib.AccessFlags
		mrAccess   ib.AccessFlags
		typ, level uint8
		off        uint64
		length     uint32
		syn        wire.Syndrome
		status     emu.WCStatus
	}{
		{name: "qp-without-flush-global", qpAccess: allAccess, mrAccess: allAccess | ib.AccessFlushGlobal,
			typ: emu.FlushGlobal, length: 64, syn: nakInvalidReq, status: emu.WCRemInvReqErr},
		{name: "qp-without-flush-persistent", qpAccess: allAccess | ib.AccessFlushGlobal, mrAccess: allAccess | ib.AccessFlushGlobal,
			typ: emu.FlushGlobal | emu.FlushPersistent, length: 64, syn: nakInvalidReq, status: emu.WCRemInvReqErr},
		{name: "mr-without-flush-global", qpAccess: allAccess | ib.AccessFlushGlobal, mrAccess: allAccess,
			typ: emu.FlushGlobal, length: 64, syn: nakRemAccess, status: emu.WCRemAccessErr},
		{name: "range-outside-mr", qpAccess: allAccess | ib.AccessFlushGlobal, mrAccess: allAccess | ib.AccessFlushGlobal,
			typ: emu.FlushGlobal, off: 4000, length: 200, syn: nakRemAccess, status: emu.WCRemAccessErr},
		{name: "persistent-into-volatile-mr", qpAccess: allAccess | ib.AccessFlushGlobal | ib.AccessFlushPersistent,
			mrAccess: allAccess | ib.AccessFlushGlobal, typ: emu.FlushPersistent, level: emu.FlushMR, syn: nakRemAccess, status: emu.WCRemAccessErr},
		{name: "length-above-2^31", qpAccess: allAccess | ib.AccessFlushGlobal, mrAccess: allAccess | ib.AccessFlushGlobal,
			typ: emu.FlushGlobal, length: 1<<31 + 1, syn: nakInvalidReq, status: emu.WCRemInvReqErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{accessB: tc.qpAccess})
			dst, mrb := flushBuf(t, p.b, 4096, tc.mrAccess)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled,
				RemoteAddr: dst + tc.off, RKey: mrb.RKey(), FlushLen: tc.length, FlushType: tc.typ, FlushLevel: tc.level})
			p.settle()
			wantOps(t, "requests", p.a.rec.take(t), wire.RCFlush)
			wantSyndrome(t, p.b.rec.take(t), tc.syn)
			wcs := poll(p.a.scq)
			wantWC(t, "send", wcs, tc.status)
		})
	}
}

// TestFlushPersistentMRRefused: registering ordinary memory with
// IB_ACCESS_FLUSH_PERSISTENT is EINVAL, as rxe refuses pages that are not
// persistent memory; FLUSH_GLOBAL alone registers.
func TestFlushPersistentMRRefused(t *testing.T) {
	p := newPair(t, pairOpts{})
	addr, _ := p.a.dev.Memory().Alloc(4096)
	if _, err := p.a.pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite|ib.AccessFlushPersistent); !errors.Is(err, unix.EINVAL) {
		t.Errorf("reg MR with FLUSH_PERSISTENT: %v, want EINVAL", err)
	}
	mr, err := p.a.pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite|ib.AccessFlushGlobal)
	if err != nil {
		t.Fatalf("reg MR with FLUSH_GLOBAL: %v", err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}
