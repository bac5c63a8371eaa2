package rxe

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// The structure-aware fuzz targets build each frame from fields (opcode,
// BTH flags, PSN relative to the one the QP expects, keys and addresses
// chosen among the device's MRs, payload), let the fuzzer flip bits of
// the transport headers, and seal the ICRC, so that what they generate
// passes rxe's receive checks and reaches the responder and completer.
// Every input runs against a fresh pair whose device b has a QP of each
// type (RC, UC, UD) in each state (RESET, INIT, RTR, RTS, SQD, SQE, ERR).
// Invariants checked after every frame: no panic; the pair settles (no
// hang); no byte of a remote-read-only MR or of unregistered memory
// changes; the frame counts once (exactly one of rcvd_pkts, icrc_err and
// dropped_pkts grows by one); every frame a device sends is well formed,
// has a good ICRC and is counted in sent_pkts; every receive completion is
// of a posted receive, once; b, which posts no send, completes none.

// fuzzTypes and fuzzStates are the QPs of a respFixture: index
// type*len(fuzzStates)+state.
var (
	fuzzTypes  = []qpstate.Type{qpstate.TypeRC, qpstate.TypeUC, qpstate.TypeUD}
	fuzzStates = []qpstate.State{qpstate.StateReset, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS,
		qpstate.StateSQD, qpstate.StateSQE, qpstate.StateErr}
)

// validOpcodes are the opcodes wire can build, in order.
var validOpcodes = func() []wire.Opcode {
	var ops []wire.Opcode
	for i := range 256 {
		if wire.Opcode(i).HeaderLen() > 0 {
			ops = append(ops, wire.Opcode(i))
		}
	}
	return ops
}()

const (
	fuzzQKey    = 0x11111111
	fuzzMRSize  = 16 << 10
	fuzzRecvLen = 2048
)

// respFixture is a pair whose device b holds the QPs under test and
// memory with known content: an MR open to remote write, read and atomics
// (w), one open to remote read only (ro), an unregistered guard buffer and
// the receive buffers.
type respFixture struct {
	p         *pair
	qps       []*emu.QP
	peerRC    *emu.QP // on a: the RC and UC QPs of b answer to these
	peerUC    *emu.QP
	peerUD    *emu.QP
	wAddr     uint64
	wMR       *emu.MR
	roAddr    uint64
	roMR      *emu.MR
	ro, guard []byte // their content, to compare
	roNow     []byte
	guardNow  []byte
	guardAddr uint64
	recvAddr  uint64
	recvMR    *emu.MR
	posted    map[uint64]bool // receive WRs posted and not completed
	nextWR    uint64
}

func newRespFixture(t testing.TB) *respFixture {
	t.Helper()
	p := newPair(t, pairOpts{queueLen: 1 << 12})
	fx := &respFixture{p: p, posted: map[uint64]bool{}}
	o := qpOpts{maxSend: 8, maxRecv: 8}
	fx.peerRC = p.a.newQP(qpstate.TypeRC, nil, o)
	fx.peerUC = p.a.newQP(qpstate.TypeUC, nil, o)
	fx.peerUD = p.a.udQP(qpstate.TypeUD, nil)
	b := p.b
	fx.wAddr, _, fx.wMR = b.buf(fuzzMRSize, 0x11)
	var ro []byte
	fx.roAddr, ro, _ = b.buf(4096, 0x22)
	var err error
	fx.roMR, err = b.pd.RegUserMR(fx.roAddr, 4096, fx.roAddr, ib.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fx.roNow, fx.ro = ro, bytes.Clone(ro)
	fx.guardAddr, fx.guardNow = b.dev.Memory().Alloc(4096)
	for i := range fx.guardNow {
		fx.guardNow[i] = byte(i * 13)
	}
	fx.guard = bytes.Clone(fx.guardNow)
	fx.recvAddr, _, fx.recvMR = b.buf(8*fuzzRecvLen, 0)
	var rcPeer, ucPeer *emu.QP
	for _, typ := range fuzzTypes {
		for _, st := range fuzzStates {
			q := b.newQP(typ, nil, o)
			fx.walk(q, st)
			fx.qps = append(fx.qps, q)
			if st == qpstate.StateRTS && typ == qpstate.TypeRC {
				rcPeer = q
			}
			if st == qpstate.StateRTS && typ == qpstate.TypeUC {
				ucPeer = q
			}
		}
	}
	// a's RC and UC QPs talk to b's RTS QPs of their type.
	p.a.connect(fx.peerRC, b, rcPeer.QPNum(), 0, 0, qpOpts{mtu: ib.MTU1024, timeout: 14, retry: 7, rnr: 7,
		minRNR: 1, rdAtomic: 16, destAtom: 16}, allAccess)
	p.a.connect(fx.peerUC, b, ucPeer.QPNum(), 0, 0, qpOpts{mtu: ib.MTU1024}, allAccess)
	for _, q := range fx.qps {
		fx.replenish(q)
	}
	p.a.rec.take(t)
	p.b.rec.take(t)
	return fx
}

// walk takes a fresh QP of b to st, through the attributes its type needs
// (SQE, which no modify reaches, is set as a failed send would).
func (fx *respFixture) walk(q *emu.QP, st qpstate.State) {
	b, a := fx.p.b, fx.p.a
	if st == qpstate.StateReset {
		return
	}
	peer := fx.peerRC
	if q.QPType == qpstate.TypeUC {
		peer = fx.peerUC
	}
	o := qpOpts{mtu: ib.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 1, rdAtomic: 16, destAtom: 16}
	steps := []qpstate.State{qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS}
	upto := map[qpstate.State]int{qpstate.StateInit: 1, qpstate.StateRTR: 2}[st]
	if upto == 0 {
		upto = 3
	}
	for _, s := range steps[:upto] {
		var attr qpstate.Attr
		var m qpstate.AttrMask
		switch s {
		case qpstate.StateInit:
			attr = qpstate.Attr{QPState: s, PortNum: 1, QPAccessFlags: allAccess, QKey: fuzzQKey}
			m = qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort
			if q.QPType == qpstate.TypeUD {
				m |= qpstate.AttrQKey
			} else {
				m |= qpstate.AttrAccessFlags
			}
		case qpstate.StateRTR:
			attr = qpstate.Attr{QPState: s, PathMTU: o.mtu, DestQPNum: peer.QPNum(), RQPSN: 0x100,
				MaxDestRdAtomic: o.destAtom, MinRNRTimer: o.minRNR,
				AHAttr: ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: a.mac,
					GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(a.ip), SGIDIndex: 1, HopLimit: 64}}}
			m = qpstate.AttrState
			switch q.QPType {
			case qpstate.TypeRC:
				m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
					qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
			case qpstate.TypeUC:
				m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN
			}
		case qpstate.StateRTS:
			attr = qpstate.Attr{QPState: s, SQPSN: 0x200, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnr,
				MaxRdAtomic: o.rdAtomic}
			m = qpstate.AttrState | qpstate.AttrSQPSN
			if q.QPType == qpstate.TypeRC {
				m |= qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
			}
		}
		b.modify(q, attr, m)
	}
	switch st {
	case qpstate.StateSQD, qpstate.StateErr:
		b.modify(q, qpstate.Attr{QPState: st}, qpstate.AttrState)
	case qpstate.StateSQE:
		b.r.lock()
		qpOf(q).state = qpstate.StateSQE
		b.r.unlock()
	}
}

// replenish keeps 4 receives posted on q (none in RESET, where posting
// fails as in rxe).
func (fx *respFixture) replenish(q *emu.QP) {
	x := qpOf(q)
	fx.p.b.r.lock()
	n := len(x.rq)
	fx.p.b.r.unlock()
	for ; n < 4; n++ {
		id := fx.nextWR
		slot := uint64(id % 8)
		wr := emu.RecvWR{WRID: id, SGList: []emu.SGE{{Addr: fx.recvAddr + slot*fuzzRecvLen, Length: fuzzRecvLen,
			LKey: fx.recvMR.LKey()}}}
		if _, err := q.PostRecv([]emu.RecvWR{wr}); err != nil {
			return
		}
		fx.posted[id] = true
		fx.nextWR++
	}
}

// fuzzFrame is one generated request (or response) frame.
type fuzzFrame struct {
	op      uint8  // opcode; one wire cannot build maps onto the table
	flags   uint8  // bit 0 SE, 1 MigReq, 2 AckReq, 3 bad P_Key, 4 TVer 1, 5 FECN, 6 BECN
	psnOff  int16  // PSN relative to the one the QP expects
	keySel  uint8  // bits 0-1: MR (w, ro, guard address, raw imm); 2: wrong Q_Key; 3: raw IETH key
	va      uint16 // offset from the chosen MR's start, minus 256
	dmaLen  uint32 // RETH DMA length; atomic swap/add value
	imm     uint32 // immediate data; compare value; raw keys
	xor     []byte // flipped onto the transport headers before the ICRC is sealed
	payload []byte
}

// build makes the frame for QP q of b, sent by a.
func (fx *respFixture) build(q *emu.QP, ff fuzzFrame) []byte {
	a, b := fx.p.a, fx.p.b
	op := wire.Opcode(ff.op)
	if op.HeaderLen() == 0 {
		op = validOpcodes[int(ff.op)%len(validOpcodes)]
	}
	b.r.lock()
	psn := qpOf(q).respPSN
	b.r.unlock()
	f := wire.Frame{SrcMAC: a.mac, DstMAC: b.mac, Src: a.ip, Dst: b.ip, HopLimit: 64,
		BTH: wire.BTHFields{Opcode: op, SE: ff.flags&1 != 0, MigReq: ff.flags&2 != 0, AckReq: ff.flags&4 != 0,
			PKey: 0xFFFF, DestQP: q.QPNum(), PSN: ib.PSNAdd(psn, uint32(int32(ff.psnOff)))}}
	if ff.flags&8 != 0 {
		f.BTH.PKey = 0x1234
	}
	if ff.flags&16 != 0 {
		f.BTH.TVer = 1
	}
	f.BTH.FECN, f.BTH.BECN = ff.flags&32 != 0, ff.flags&64 != 0
	base, key := fx.wAddr, fx.wMR.RKey()
	switch ff.keySel & 3 {
	case 1:
		base, key = fx.roAddr, fx.roMR.RKey()
	case 2:
		base = fx.guardAddr
	case 3:
		key = ff.imm
	}
	va := base + uint64(int64(ff.va)-256)
	f.RETH = wire.RETHFields{VA: va, RKey: key, DMALen: ff.dmaLen}
	f.AtomicETH = wire.AtomicETHFields{VA: va, RKey: key, SwapAdd: uint64(ff.dmaLen), Compare: uint64(ff.imm)}
	f.DETH = wire.DETHFields{QKey: fuzzQKey, SrcQP: fx.peerUD.QPNum()}
	if ff.keySel&4 != 0 {
		f.DETH.QKey = ff.imm
	}
	f.ImmDt.Imm = ff.imm
	f.IETH.RKey = fx.wMR.RKey()
	if ff.keySel&8 != 0 {
		f.IETH.RKey = ff.imm
	}
	f.AETH = wire.AETHFields{Syndrome: wire.Syndrome(ff.imm), MSN: ff.dmaLen & 0xFFFFFF}
	f.AtomicAckETH.OrigData = uint64(ff.imm)
	f.Payload = ff.payload[:min(len(ff.payload), 4096)]
	buf := make([]byte, f.Len())
	n, err := wire.Build(buf, &f)
	if err != nil {
		return nil
	}
	buf = buf[:n]
	l4 := wire.EthernetSize + wire.IPv4Size
	hdr := buf[l4+wire.UDPSize : f.PayloadOffset()]
	for i, x := range ff.xor[:min(len(ff.xor), len(hdr))] {
		hdr[i] ^= x
	}
	wire.SealICRC(buf, wire.EthernetSize) // a malformed frame is left as it is, to be dropped
	return buf
}

// deliver feeds one frame to b, lets the pair run and checks the
// invariants.
func (fx *respFixture) deliver(t *testing.T, q *emu.QP, frame []byte) {
	t.Helper()
	p, b := fx.p, fx.p.b
	cnt := func() (in, sent uint64) {
		b.r.lock()
		defer b.r.unlock()
		c := &b.r.counters
		return c[cntRcvdPkts] + c[cntICRCErr] + c[cntDroppedPkts], c[cntSentPkts]
	}
	in0, sent0 := cnt()
	aSent0 := fx.p.a.counter("sent_pkts")
	b.r.lock()
	b.r.receive(frame)
	b.r.unlock()
	if in1, _ := cnt(); in1 != in0+1 {
		t.Fatalf("one frame received, rcvd_pkts+icrc_err+dropped_pkts grew by %d", in1-in0)
	}
	p.run(50 * time.Millisecond)
	_, sent1 := cnt()
	if got := len(p.b.rec.take(t)); uint64(got) != sent1-sent0 {
		t.Fatalf("b wrote %d frames, sent_pkts grew by %d", got, sent1-sent0)
	}
	if got := len(p.a.rec.take(t)); uint64(got) != fx.p.a.counter("sent_pkts")-aSent0 {
		t.Fatalf("a wrote %d frames, sent_pkts disagrees", got)
	}
	if !bytes.Equal(fx.roNow, fx.ro) {
		t.Fatal("a remote-read-only MR changed")
	}
	if !bytes.Equal(fx.guardNow, fx.guard) {
		t.Fatal("memory outside every MR changed")
	}
	for _, w := range poll(b.rcq) {
		if !fx.posted[w.WRID] {
			t.Fatalf("receive completion of wr_id %d, never posted or completed before (%v)", w.WRID, w.Status)
		}
		delete(fx.posted, w.WRID)
	}
	if ws := poll(b.scq); len(ws) > 0 {
		t.Fatalf("send completions on b, which posted no send: %+v", ws)
	}
	poll(p.a.scq)
	poll(p.a.rcq)
	fx.replenish(q)
}

// captureRequests returns the RoCE frames of each of the repository's
// captures, parsed.
func captureRequests(t testing.TB) [][]wire.Packet {
	var out [][]wire.Packet
	for _, file := range testutil.Captures(t, "*.pcap") {
		var ps []wire.Packet
		for _, data := range testutil.ReadPcapFile(t, file) {
			if p, err := wire.Parse(data); err == nil {
				ps = append(ps, p)
			}
		}
		out = append(out, ps)
	}
	return out
}

// seedOf describes captured packet p as a fuzzFrame against b's QPs
// (PSN offset from its QP's first PSN in the capture, VA low bits).
func seedOf(p wire.Packet, firstPSN uint32) (fuzzFrame, int) {
	ff := fuzzFrame{op: uint8(p.Opcode()), va: 256, payload: bytes.Clone(p.Payload())}
	bth := p.BTH()
	if bth.SE() {
		ff.flags |= 1
	}
	if bth.AckReq() {
		ff.flags |= 4
	}
	ff.psnOff = int16(ib.PSNAdd(bth.PSN(), -firstPSN) & 0x7FFF)
	if reth := p.RETH(); reth != nil {
		ff.va += uint16(reth.VA() & 0xFFF)
		ff.dmaLen = reth.DMALen()
	}
	if a := p.AtomicETH(); a != nil {
		ff.va = 256 + uint16(a.VA()&0xFF8)
		ff.dmaLen, ff.imm = uint32(a.SwapAdd()), uint32(a.Compare())
	}
	if imm := p.ImmDt(); imm != nil {
		ff.imm = imm.Imm()
	}
	typ := 0
	switch p.Opcode().Transport() {
	case wire.TransportUC:
		typ = 1
	case wire.TransportUD:
		typ = 2
	}
	return ff, typ*len(fuzzStates) + 3 // the RTS QP of its type
}

// FuzzResponderFrame sends one generated frame to a QP of each type and
// state; seeds are every distinct request of the real captures, aimed at
// the RTS QP of their type and at the same type in every other state.
func FuzzResponderFrame(f *testing.F) {
	seen := map[string]bool{}
	for _, ps := range captureRequests(f) {
		first := map[uint32]uint32{}
		for _, p := range ps {
			if !p.Opcode().IsRequest() {
				continue
			}
			qpn := p.BTH().DestQP()
			if _, ok := first[qpn]; !ok {
				first[qpn] = p.BTH().PSN()
			}
			ff, sel := seedOf(p, first[qpn])
			k := string([]byte{ff.op, byte(len(ff.payload) >> 8)})
			if seen[k] {
				continue
			}
			seen[k] = true
			for st := range fuzzStates {
				sel := sel - 3 + st
				f.Add(uint8(sel), ff.op, ff.flags, ff.psnOff, ff.keySel, ff.va, ff.dmaLen, ff.imm, []byte(nil), ff.payload)
			}
		}
	}
	f.Fuzz(func(t *testing.T, sel, op, flags uint8, psnOff int16, keySel uint8, va uint16, dmaLen, imm uint32,
		xor, payload []byte) {
		fx := newRespFixture(t)
		q := fx.qps[int(sel)%len(fx.qps)]
		ff := fuzzFrame{op: op, flags: flags, psnOff: psnOff, keySel: keySel, va: va, dmaLen: dmaLen, imm: imm,
			xor: xor, payload: payload}
		if frame := fx.build(q, ff); frame != nil {
			fx.deliver(t, q, frame)
		}
	})
}

// seqRecord is the size of one frame's fields in a FuzzResponderSequence
// input: op, flags, psnOff (int8), keySel, va (2), dmaLen (4), imm (4),
// payload length (2), then the payload.
const seqRecord = 16

// encodeSeq appends ff to an input of FuzzResponderSequence.
func encodeSeq(b []byte, ff fuzzFrame) []byte {
	b = append(b, ff.op, ff.flags, byte(int8(max(-128, min(127, ff.psnOff)))), ff.keySel)
	b = binary.BigEndian.AppendUint16(b, ff.va)
	b = binary.BigEndian.AppendUint32(b, ff.dmaLen)
	b = binary.BigEndian.AppendUint32(b, ff.imm)
	b = binary.BigEndian.AppendUint16(b, uint16(len(ff.payload)))
	return append(b, ff.payload...)
}

// decodeSeq reads up to 16 frames from an input of FuzzResponderSequence.
func decodeSeq(b []byte) []fuzzFrame {
	var out []fuzzFrame
	for len(b) >= seqRecord && len(out) < 16 {
		ff := fuzzFrame{op: b[0], flags: b[1], psnOff: int16(int8(b[2])), keySel: b[3],
			va: binary.BigEndian.Uint16(b[4:]), dmaLen: binary.BigEndian.Uint32(b[6:]), imm: binary.BigEndian.Uint32(b[10:])}
		n := min(int(binary.BigEndian.Uint16(b[14:])), len(b)-seqRecord)
		ff.payload = b[seqRecord : seqRecord+n]
		out = append(out, ff)
		b = b[seqRecord+n:]
	}
	return out
}

// FuzzResponderSequence sends a sequence of generated frames to one QP
// (its PSNs relative to what the QP expects before each), so that
// multi-packet messages, duplicates, gaps and state changes caused by
// earlier frames are reached. Seeds are the captures' conversations: the
// first requests of each QP in order, aimed at the QPs of their type in
// every state.
func FuzzResponderSequence(f *testing.F) {
	for _, ps := range captureRequests(f) {
		byQP := map[uint32][]wire.Packet{}
		var order []uint32
		for _, p := range ps {
			if !p.Opcode().IsRequest() {
				continue
			}
			qpn := p.BTH().DestQP()
			if _, ok := byQP[qpn]; !ok {
				order = append(order, qpn)
			}
			byQP[qpn] = append(byQP[qpn], p)
		}
		for _, qpn := range order[:min(2, len(order))] {
			seq := byQP[qpn][:min(8, len(byQP[qpn]))]
			var in []byte
			sel := 0
			for _, p := range seq {
				ff, s := seedOf(p, p.BTH().PSN())
				// PSN offset 0: each the next the QP expects, as in the
				// capture (the sender's PSNs differ from the fixture's).
				in = encodeSeq(in, ff)
				sel = s
			}
			for st := range fuzzStates {
				f.Add(uint8(sel-3+st), slices.Clone(in))
			}
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, in []byte) {
		fx := newRespFixture(t)
		q := fx.qps[int(sel)%len(fx.qps)]
		for _, ff := range decodeSeq(in) {
			if frame := fx.build(q, ff); frame != nil {
				fx.deliver(t, q, frame)
			}
		}
	})
}
