package bench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sort"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// peer is one emulated rxe device with a PD, a CQ and one RC QP.
type peer struct {
	dev   *emu.Device
	r     *rxe.Device
	pd    *emu.PD
	cq    *emu.CQ
	qp    *emu.QP
	ip    netip.Addr
	mac   [6]byte
	wake  chan struct{} // signalled by the CQ's completion handler
	timer *time.Timer   // wait's deadline, reused
	spin  time.Duration // how long wait busy-polls before sleeping
}

// newPeer creates device number i (10.0.0.i, MAC 02:00:00:00:00:i) on l.
func newPeer(i byte, l link.Link, mtu int) (*peer, error) {
	return newPeerAt(i, netip.AddrFrom4([4]byte{10, 0, 0, i}), l, mtu, false)
}

// newPeerAt is newPeer with the device's address ip; coalesce sets
// rxe.Config.CoalesceACKs (Options.CoalesceACKs).
func newPeerAt(i byte, ip netip.Addr, l link.Link, mtu int, coalesce bool) (*peer, error) {
	p := &peer{ip: ip, mac: [6]byte{2, 0, 0, 0, 0, i}, wake: make(chan struct{}, 1)}
	dev, err := rxe.New(rxe.Config{Seed: uint64(i), Link: l, NoMADLayer: true, CoalesceACKs: coalesce,
		Device: emu.Config{Name: fmt.Sprintf("rxe%d", i), NetDev: emu.NetDev{Name: fmt.Sprintf("eth%d", i),
			MAC: net.HardwareAddr(p.mac[:]), MTU: mtu, Addrs: []netip.Addr{p.ip}}}})
	if err != nil {
		return nil, err
	}
	p.dev, p.r = dev.Device, dev
	if p.pd, err = dev.AllocPD(0); err != nil {
		return nil, errors.Join(err, p.close())
	}
	p.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: 4096, CompHandler: func(*emu.CQ) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		return nil, errors.Join(err, p.close())
	}
	p.qp, err = p.pd.CreateQP(&emu.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: qpstate.TypeRC,
		SQSigType: emu.SignalReqWR, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		return nil, errors.Join(err, p.close())
	}
	return p, nil
}

func (p *peer) close() error { return p.r.Close() }

// counter returns the device's port counter called name (its
// hw_counters file), 0 if it has none.
func (p *peer) counter(name string) uint64 {
	s, err := p.dev.AllocHWPortStats(1)
	if err != nil {
		return 0
	}
	p.dev.GetHWStats(s, 1)
	v, _ := s.Counter(name)
	return v
}

// retries returns the requester's retries (completer_retry_err, every
// retransmission pass) and the duplicates the responder received
// (duplicate_request), the cost of a retransmission on the wire.
func (p *pair) retries() (retry, dup uint64) {
	return p.a.counter("completer_retry_err"), p.b.counter("duplicate_request")
}

// rcAccess is what the benchmark QPs allow their peer.
const rcAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead

// connect walks p's QP RESET→INIT→RTR→RTS towards the QP dqpn of the
// device at ip/mac, with path MTU mtu.
func connectQP(qp *emu.QP, mtu ib.MTU, ip netip.Addr, mac [6]byte, dqpn uint32) error {
	a := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: rcAccess}
	if err := qp.Modify(&a, qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags); err != nil {
		return err
	}
	a = qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: mtu, DestQPNum: dqpn, RQPSN: 0,
		MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AHAttr: ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: mac,
			GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(ip), SGIDIndex: 1, HopLimit: 64}}}
	if err := qp.Modify(&a, qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|
		qpstate.AttrRQPSN|qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer); err != nil {
		return err
	}
	// timeout 14 (67 ms) as perftest; retry and RNR retry 7.
	a = qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	return qp.Modify(&a, qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|
		qpstate.AttrRNRRetry|qpstate.AttrMaxQPRdAtomic)
}

// pair is two connected peers.
type pair struct{ a, b *peer }

// newPair makes two devices on la and lb (the two ends of one wire) and
// connects their RC QPs with path MTU mtu; devMTU is the netdev MTU. The
// devices coalesce their ACKs if o.CoalesceACKs is set.
func newPair(o *Options, la, lb link.Link, devMTU int, mtu ib.MTU) (*pair, error) {
	return newPairAt(o, la, lb, devMTU, mtu, netip.AddrFrom4([4]byte{10, 0, 0, 1}), netip.AddrFrom4([4]byte{10, 0, 0, 2}))
}

// newPairAt is newPair with the devices' addresses ipA and ipB.
func newPairAt(o *Options, la, lb link.Link, devMTU int, mtu ib.MTU, ipA, ipB netip.Addr) (*pair, error) {
	a, err := newPeerAt(1, ipA, la, devMTU, o.CoalesceACKs)
	if err != nil {
		return nil, err
	}
	b, err := newPeerAt(2, ipB, lb, devMTU, o.CoalesceACKs)
	if err != nil {
		return nil, errors.Join(err, a.close())
	}
	p := &pair{a, b}
	if err := connectQP(a.qp, mtu, b.ip, b.mac, b.qp.QPNum()); err != nil {
		return nil, errors.Join(err, p.close())
	}
	if err := connectQP(b.qp, mtu, a.ip, a.mac, a.qp.QPNum()); err != nil {
		return nil, errors.Join(err, p.close())
	}
	return p, nil
}

func (p *pair) close() error { return errors.Join(p.a.close(), p.b.close()) }

// inprocSpin is how long wait busy-polls the CQ (yielding the processor
// between polls) before it sleeps on the completion handler, on an
// in-process link: perftest's latency tests busy-poll, and a sleeping
// poller pays a goroutine wake-up per completion. On a TAP the devices'
// readers wait in the runtime's network poller, which a busy processor
// does not look at: spinning there delays the very frame awaited, so TAP
// pairs do not spin.
const inprocSpin = 50 * time.Microsecond

// spinCheck is how many polls of a busy-polling wait go between two
// readings of the clock.
const spinCheck = 16

// wait polls p's CQ into wc until at least one completion arrives or the
// deadline passes: first busy-polling for spinFor, then sleeping on the
// completion handler.
func (p *peer) wait(wc []emu.WC, deadline time.Time) (int, error) {
	var spinUntil time.Time
	if p.spin > 0 {
		spinUntil = time.Now().Add(p.spin)
	}
	for polls := 1; ; polls++ {
		if n := p.cq.Poll(wc); n > 0 {
			return n, nil
		}
		// The clock is read every spinCheck polls: reading it on each
		// took a twentieth of the in-process WRITE's CPU time.
		if p.spin > 0 && (polls%spinCheck != 0 || time.Now().Before(spinUntil)) {
			runtime.Gosched()
			continue
		}
		if p.cq.ReqNotify(emu.CQNextComp|emu.CQReportMissedEvents) > 0 {
			continue
		}
		d := time.Until(deadline)
		if d <= 0 {
			return 0, fmt.Errorf("no completion: %w", errTimeout)
		}
		if p.timer == nil {
			p.timer = time.NewTimer(d)
		} else {
			p.timer.Reset(d)
		}
		select {
		case <-p.wake:
		case <-p.timer.C:
		}
		p.timer.Stop()
	}
}

var errTimeout = errors.New("timed out")

// writer is a registered source on a and destination on b, and the
// signaled RDMA WRITE between them.
type writer struct {
	smr, dmr *emu.MR
	wr       []emu.SendWR
}

func (p *pair) newWriter(msg int) (*writer, error) {
	saddr, _ := p.a.dev.Memory().Alloc(msg)
	smr, err := p.a.pd.RegUserMR(saddr, uint64(msg), saddr, rcAccess)
	if err != nil {
		return nil, err
	}
	daddr, _ := p.b.dev.Memory().Alloc(msg)
	dmr, err := p.b.pd.RegUserMR(daddr, uint64(msg), daddr, rcAccess)
	if err != nil {
		return nil, errors.Join(err, smr.Dereg())
	}
	return &writer{smr: smr, dmr: dmr, wr: []emu.SendWR{{Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: saddr, Length: uint32(msg), LKey: smr.LKey()}}, RemoteAddr: daddr, RKey: dmr.RKey()}}}, nil
}

func (w *writer) close() error { return errors.Join(w.smr.Dereg(), w.dmr.Dereg()) }

// writeLoop posts RDMA WRITEs of msg bytes from a to b, keeping depth of
// them outstanding, until d has passed; it returns the bytes completed and
// the time they took.
func (p *pair) writeLoop(msg, depth int, d time.Duration) (int64, time.Duration, error) {
	w, err := p.newWriter(msg)
	if err != nil {
		return 0, 0, err
	}
	defer w.close()
	wr := w.wr
	wc := make([]emu.WC, 64)
	var done int64
	out := 0
	start := time.Now()
	stop := start.Add(d)
	for {
		now := time.Now()
		for out < depth && now.Before(stop) {
			if _, err := p.a.qp.PostSend(wr); err != nil {
				return done, 0, fmt.Errorf("post RDMA WRITE: %w", err)
			}
			out++
		}
		if out == 0 {
			return done, time.Since(start), nil
		}
		n, err := p.a.wait(wc, now.Add(5*time.Second))
		if err != nil {
			return done, 0, err
		}
		for _, c := range wc[:n] {
			if c.Status != emu.WCSuccess {
				return done, 0, fmt.Errorf("RDMA WRITE completed with %v", c.Status)
			}
			out--
			done += int64(msg)
		}
	}
}

// writeN posts n RDMA WRITEs w from a to b, keeping depth of them
// outstanding, and waits for all of them (for benchmarks).
func (p *pair) writeN(w *writer, depth, n int) error {
	wc := make([]emu.WC, 64)
	out, posted := 0, 0
	for posted < n || out > 0 {
		for out < depth && posted < n {
			if _, err := p.a.qp.PostSend(w.wr); err != nil {
				return fmt.Errorf("post RDMA WRITE: %w", err)
			}
			out++
			posted++
		}
		k, err := p.a.wait(wc, time.Now().Add(5*time.Second))
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != emu.WCSuccess {
				return fmt.Errorf("RDMA WRITE completed with %v", c.Status)
			}
			out--
		}
	}
	return nil
}

// pingpong runs iters SEND round trips of size bytes from a to b and back
// and returns the round-trip times, sorted.
func (p *pair) pingpong(size, iters int) ([]time.Duration, error) {
	type side struct {
		*peer
		sge  emu.SGE
		recv []emu.RecvWR
		wc   []emu.WC
	}
	mk := func(x *peer) (side, error) {
		addr, _ := x.dev.Memory().Alloc(size)
		mr, err := x.pd.RegUserMR(addr, uint64(size), addr, rcAccess)
		if err != nil {
			return side{}, err
		}
		sge := emu.SGE{Addr: addr, Length: uint32(size), LKey: mr.LKey()}
		return side{x, sge, []emu.RecvWR{{SGList: []emu.SGE{sge}}}, make([]emu.WC, 4)}, nil
	}
	a, err := mk(p.a)
	if err != nil {
		return nil, err
	}
	b, err := mk(p.b)
	if err != nil {
		return nil, err
	}
	post := func(s side) error {
		if _, err := s.qp.PostRecv(s.recv); err != nil {
			return fmt.Errorf("post recv: %w", err)
		}
		return nil
	}
	send := []emu.SendWR{{Opcode: emu.WRSend, SGList: []emu.SGE{a.sge}}}
	// Unsignaled sends: each side waits only for its receive completion,
	// as ibv_rc_pingpong's latency loop does without events.
	if err := post(a); err != nil {
		return nil, err
	}
	if err := post(b); err != nil {
		return nil, err
	}
	recvOne := func(s side, deadline time.Time) error {
		for {
			n, err := s.wait(s.wc, deadline)
			if err != nil {
				return err
			}
			for _, c := range s.wc[:n] {
				if c.Status != emu.WCSuccess {
					return fmt.Errorf("completion %v %v", c.Opcode, c.Status)
				}
				if c.Opcode == emu.WCRecv {
					return nil
				}
			}
		}
	}
	errc := make(chan error, 1)
	go func() { // the pong side
		bsend := []emu.SendWR{{Opcode: emu.WRSend, SGList: []emu.SGE{b.sge}}}
		for range iters {
			if err := recvOne(b, time.Now().Add(5*time.Second)); err != nil {
				errc <- fmt.Errorf("pong: %w", err)
				return
			}
			if err := post(b); err != nil {
				errc <- err
				return
			}
			if _, err := b.qp.PostSend(bsend); err != nil {
				errc <- fmt.Errorf("pong send: %w", err)
				return
			}
		}
		errc <- nil
	}()
	rtts := make([]time.Duration, 0, iters)
	for range iters {
		t0 := time.Now()
		if _, err := a.qp.PostSend(send); err != nil {
			return nil, fmt.Errorf("ping send: %w", err)
		}
		if err := recvOne(a, t0.Add(5*time.Second)); err != nil {
			return nil, fmt.Errorf("ping: %w", err)
		}
		rtts = append(rtts, time.Since(t0))
		if err := post(a); err != nil {
			return nil, err
		}
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts, nil
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// gbps converts bytes over a duration to Gb/s.
func gbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) * 8 / d.Seconds() / 1e9
}
