package rxe

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// recorder is a Link decorator keeping a copy of every frame written.
type recorder struct {
	link.Link
	self, peer *link.PipeEnd
	mu         sync.Mutex
	frames     [][]byte
	off        bool
}

func (c *recorder) WritePackets(bufs [][]byte) (int, error) {
	c.mu.Lock()
	if !c.off {
		for _, b := range bufs {
			c.frames = append(c.frames, bytes.Clone(b))
		}
	}
	c.mu.Unlock()
	return c.Link.WritePackets(bufs)
}

// Pending makes the recorder a Pender: frames the peer queued that this
// end has not read.
func (c *recorder) Pending() int {
	return int(c.peer.Stats().TxFrames - c.self.Stats().RxFrames)
}

// take returns and clears the recorded frames, parsed.
func (c *recorder) take(t testing.TB) []wire.Packet {
	t.Helper()
	c.mu.Lock()
	fs := c.frames
	c.frames = nil
	c.mu.Unlock()
	ps := make([]wire.Packet, 0, len(fs))
	for _, f := range fs {
		p, err := wire.Parse(f)
		if err != nil {
			t.Fatalf("device wrote an unparsable frame: %v", err)
		}
		if err := p.VerifyICRC(); err != nil {
			t.Fatalf("device wrote a frame with a bad ICRC: %v", err)
		}
		ps = append(ps, p)
	}
	return ps
}

// node is one device of a pair with its PD, CQs and link ends.
type node struct {
	*env
	ip  netip.Addr
	mac [6]byte
	end *link.PipeEnd // this device's end of the pipe
	rec *recorder
	flt *link.Faults
	fl  uint32 // flow label and traffic class of the AVs it builds
	tc  uint8
}

// pair is two emulated rxe devices on an in-memory link, both
// synchronous on one manual clock.
type pair struct {
	t    testing.TB
	clk  *clock.Manual
	a, b *node
}

type pairOpts struct {
	quirksA, quirksB Quirks
	faults           *link.FaultConfig // applied on both directions (seeds differ)
	mtu              int
	noMAD            bool // leave QP index 16 free so that a GSI QP can be created
	queueLen         int  // pipe queue length; 0 means 65536
	ipv6             bool // fd00::N instead of 10.0.0.N
	flowLabel        uint32
	trafficClass     uint8
	kernel           Kernel // both devices' Config.Kernel (0: the default)
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	clk := clock.NewManual(time.Unix(1000, 0))
	mtu := o.mtu
	if mtu == 0 {
		mtu = 4200
	}
	ql := o.queueLen
	if ql == 0 {
		ql = 1 << 16
	}
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: mtu, QueueLen: ql})
	p := &pair{t: t, clk: clk}
	mk := func(i byte, end, peer *link.PipeEnd, q Quirks) *node {
		n := &node{ip: netip.AddrFrom4([4]byte{10, 0, 0, i}), mac: [6]byte{2, 0, 0, 0, 0, i}, end: end,
			fl: o.flowLabel, tc: o.trafficClass}
		if o.ipv6 {
			n.ip = netip.AddrFrom16([16]byte{0xfd, 15: i})
		}
		var inner link.Link = end
		if o.faults != nil {
			fc := *o.faults
			fc.Seed += uint64(i)
			fc.Clock = clk
			n.flt = link.NewFaults(end, fc)
			inner = n.flt
		}
		n.rec = &recorder{Link: inner, self: end, peer: peer}
		var l link.Link = n.rec
		cfg := Config{Seed: uint64(i), Link: l, Synchronous: true, Quirks: q, NoMADLayer: o.noMAD, Kernel: o.kernel,
			Device: emu.Config{Name: "rxe" + string('0'+i), Clock: clk, NetDev: emu.NetDev{Name: "eth0",
				MAC: net.HardwareAddr(n.mac[:]), MTU: mtu, Addrs: []netip.Addr{n.ip}}}}
		n.env = newEnvWith(t, cfg)
		n.scq, n.rcq = n.cq(8192), n.cq(8192)
		t.Cleanup(func() { n.r.Close() })
		return n
	}
	p.a = mk(1, ea, eb, o.quirksA)
	p.b = mk(2, eb, ea, o.quirksB)
	return p
}

// settle processes frames on both devices until nothing moves.
func (p *pair) settle() {
	p.t.Helper()
	for range 1 << 20 {
		if p.a.r.Poll()+p.b.r.Poll() == 0 {
			return
		}
	}
	p.t.Fatal("pair never settled")
}

// run settles and lets virtual time pass for d, firing timers in order.
func (p *pair) run(d time.Duration) {
	p.t.Helper()
	end := p.clk.Now().Add(d)
	for {
		p.settle()
		next, ok := p.clk.NextDeadline()
		if !ok || next.After(end) {
			break
		}
		p.clk.Advance(next.Sub(p.clk.Now()))
	}
	if rest := end.Sub(p.clk.Now()); rest > 0 {
		p.clk.Advance(rest)
	}
	p.settle()
}

// conn holds a connected QP pair.
type conn struct {
	qa, qb *emu.QP
}

// qpOpts are the connection attributes; zero fields get defaults.
type qpOpts struct {
	typ                qpstate.Type
	mtu                ib.MTU
	sqpsnA, sqpsnB     uint32
	timeout            uint8
	retry, rnr         uint8
	minRNR             uint8
	rdAtomic, destAtom uint8
	accessB            ib.AccessFlags
	noAccessDefaults   bool
	srqB               *emu.SRQ
	maxSend, maxRecv   uint32
	sigAll             bool
}

func (n *node) newQP(typ qpstate.Type, srq *emu.SRQ, o qpOpts) *emu.QP {
	n.t.Helper()
	ms, mr := o.maxSend, o.maxRecv
	if ms == 0 {
		ms = 256
	}
	if mr == 0 {
		mr = 256
	}
	sig := emu.SignalReqWR
	if o.sigAll {
		sig = emu.SignalAllWR
	}
	init := &emu.QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq, SRQ: srq, QPType: typ, SQSigType: sig, PortNum: 1,
		EventHandler: n.record, Cap: qpstate.Cap{MaxSendWR: ms, MaxRecvWR: mr, MaxSendSGE: 8, MaxRecvSGE: 8, MaxInlineData: 256}}
	qp, err := n.pd.CreateQP(init)
	if err != nil {
		n.t.Fatal(err)
	}
	return qp
}

// connect brings q (on n) to RTS towards peer QP dqpn on peer.
func (n *node) connect(q *emu.QP, peer *node, dqpn uint32, sqpsn, rqpsn uint32, o qpOpts, access ib.AccessFlags) {
	n.t.Helper()
	init := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: access, QKey: 0x11111111}
	m := qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort
	if q.QPType == qpstate.TypeGSI {
		m = qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrQKey
	} else if q.QPType == qpstate.TypeUD {
		m |= qpstate.AttrQKey
	} else {
		m |= qpstate.AttrAccessFlags
	}
	n.modify(q, init, m)
	rtr := qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: o.mtu, DestQPNum: dqpn, RQPSN: rqpsn,
		MaxDestRdAtomic: o.destAtom, MinRNRTimer: o.minRNR,
		AHAttr: ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: peer.mac,
			GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(peer.ip), SGIDIndex: 1, HopLimit: 64,
				FlowLabel: n.fl, TrafficClass: n.tc}}}
	m = qpstate.AttrState
	switch q.QPType {
	case qpstate.TypeRC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
			qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
	case qpstate.TypeUC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN
	}
	n.modify(q, rtr, m)
	rts := qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: sqpsn, Timeout: o.timeout, RetryCnt: o.retry,
		RNRRetry: o.rnr, MaxRdAtomic: o.rdAtomic}
	m = qpstate.AttrState | qpstate.AttrSQPSN
	if q.QPType == qpstate.TypeRC {
		m |= qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
	}
	n.modify(q, rts, m)
}

const allAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead |
	ib.AccessRemoteAtomic

// connect creates and connects a QP pair with defaults filled in: MTU
// 1024, timeout 14, retry 7, rnr 7, min_rnr_timer 12, rd_atomic 16.
func (p *pair) connect(o qpOpts) conn {
	p.t.Helper()
	if o.typ == 0 {
		o.typ = qpstate.TypeRC
	}
	if o.mtu == 0 {
		o.mtu = ib.MTU1024
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.destAtom == 0 {
		o.destAtom = 16
	}
	if o.minRNR == 0 {
		o.minRNR = 12
	}
	accB := o.accessB
	if accB == 0 && !o.noAccessDefaults {
		accB = allAccess
	}
	qa := p.a.newQP(o.typ, nil, o)
	qb := p.b.newQP(o.typ, o.srqB, o)
	p.a.connect(qa, p.b, qb.QPNum(), o.sqpsnA, o.sqpsnB, o, allAccess)
	p.b.connect(qb, p.a, qa.QPNum(), o.sqpsnB, o.sqpsnA, o, accB)
	return conn{qa: qa, qb: qb}
}

// buf allocates n bytes of registered memory on the node, filled with a
// pattern from seed, and returns its address, bytes and MR.
func (n *node) buf(size int, seed byte) (uint64, []byte, *emu.MR) {
	n.t.Helper()
	addr, b := n.dev.Memory().Alloc(max(size, 8))
	b = b[:size]
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	mr, err := n.pd.RegUserMR(addr, uint64(max(size, 8)), addr, allAccess)
	if err != nil {
		n.t.Fatal(err)
	}
	return addr, b, mr
}

func (n *node) postSend(q *emu.QP, wrs ...emu.SendWR) {
	n.t.Helper()
	if bad, err := q.PostSend(wrs); err != nil {
		n.t.Fatalf("post send (bad %d): %v", bad, err)
	}
}

func (n *node) postRecv(q *emu.QP, wrs ...emu.RecvWR) {
	n.t.Helper()
	if bad, err := q.PostRecv(wrs); err != nil {
		n.t.Fatalf("post recv (bad %d): %v", bad, err)
	}
}

// poll drains a CQ.
func poll(cq *emu.CQ) []emu.WC {
	var out []emu.WC
	wc := make([]emu.WC, 16)
	for {
		n := cq.Poll(wc)
		out = append(out, wc[:n]...)
		if n < len(wc) {
			return out
		}
	}
}

// counter returns a named hardware counter.
func (n *node) counter(name string) uint64 {
	for i, d := range statDescs {
		if d.Name == name {
			n.r.mu.Lock()
			defer n.r.mu.Unlock()
			return n.r.counters[i]
		}
	}
	n.t.Fatalf("no counter %q", name)
	return 0
}

// ops summarizes packets as opcode names.
func ops(ps []wire.Packet) []string {
	var s []string
	for i := range ps {
		s = append(s, ps[i].Opcode().String())
	}
	return s
}

// ah creates an address handle on n towards peer's IP (or a multicast
// group address).
func (n *node) ah(dst netip.Addr, dmac [6]byte) *emu.AH {
	n.t.Helper()
	a, err := n.pd.CreateAH(&ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: dmac,
		GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(dst), SGIDIndex: 1, HopLimit: 64, TrafficClass: 0x28}})
	if err != nil {
		n.t.Fatal(err)
	}
	return a
}

// udQP creates a UD (or GSI) QP on n in RTS.
func (n *node) udQP(typ qpstate.Type, srq *emu.SRQ) *emu.QP {
	n.t.Helper()
	q := n.newQP(typ, srq, qpOpts{})
	n.connect(q, n, 0, 0, 0, qpOpts{}, 0)
	return q
}
