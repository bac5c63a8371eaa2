package workload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Perftest constants (perftest_parameters.h).
const (
	cycleBuffer    = 4096 // sysconf(_SC_PAGESIZE): the buffer the BW tests cycle through
	cacheLineSize  = 64
	defTxDepthBW   = 128
	defTxDepthLat  = 1
	defRxDepth     = 512
	defCQMod       = 100
	atomicAddValue = 1 // ATOMIC_ADD_VALUE
	minRNRTimer    = 12
)

// PerfConfig configures one side of a perftest run. Zero values take
// perftest 4.5's defaults.
type PerfConfig struct {
	// Test is the perftest tool; it must be valid.
	Test oob.PerftestTest
	// Client marks the side given a server name: the one that moves data
	// (BW tests, read and atomic latency) or sends first.
	Client bool
	// MaxSize is the largest message any Run will use (buffers are sized
	// for it); 0 means 65536 for BW tests, 2 for latency, 8 for atomics.
	MaxSize uint64
	// Iters is the number of messages per QP (-n); 0 means 5000 for
	// write_bw, 1000 otherwise.
	Iters uint64
	// TxDepth is the send queue depth (-t); 0 means 128 (BW) or 1
	// (latency).
	TxDepth int
	// RxDepth is the receives kept posted per QP in send tests (-r); 0
	// means 512, capped at Iters as perftest does.
	RxDepth int
	// NumQP is the number of QPs (-q); 0 means 1.
	NumQP int
	// OutReads is the number of outstanding reads/atomics (-o); 0 means
	// the device's max_qp_rd_atom.
	OutReads int
	// CQMod is the CQ moderation (-Q): one signaled WR in CQMod; 0 means
	// 100, capped at TxDepth. Latency tests signal every WR.
	CQMod int
	// MTU is the path MTU (-m); 0 means the port's active MTU.
	MTU qpstate.MTU
	// GIDIndex is the local GID index (-x).
	GIDIndex int
	// SL is the service level (-S).
	SL uint8
	// QPTimeout is the local ACK timeout exponent (-u); 0 means 14.
	QPTimeout uint8
	// InlineSize sends WRITE and SEND messages of at most this many
	// bytes inline (-I).
	InlineSize int
	// CompareSwap makes atomics ATOMIC_CMP_AND_SWP (-A CMP_AND_SWAP)
	// instead of FETCH_AND_ADD.
	CompareSwap bool
	// NoPeak skips the BW peak computation (-N).
	NoPeak bool
	// Gbits reports bandwidth in Gb/sec (--report_gbits).
	Gbits bool
	// Timeout bounds every wait; 0 means DefaultTimeout.
	Timeout time.Duration
	// Seed seeds the PSNs and the buffer content.
	Seed uint64
	// Resolve fills the destination MAC of the address vector; nil
	// leaves it to the device's neighbour table.
	Resolve Resolver
}

// Perf is one side of a perftest run: PD, send and receive CQs, NumQP RC
// QPs and one registered buffer. Each QP owns two halves of
// max(MaxSize, 4096) bytes (rounded to the cache line): the local half
// (what it sends, or where reads and atomic results land) and the remote
// half, whose address and R_Key it advertises (the target of the peer's
// WRITEs, READs and atomics and where its SENDs are received).
type Perf struct {
	cfg      PerfConfig
	dev      *emu.Device
	pd       *emu.PD
	scq, rcq *cqWaiter
	qps      []*emu.QP
	buf      *buffer
	region   int // bytes per half
	local    []oob.PerftestDest
	rem      []oob.PerftestDest
	rposted  []int

	// What the client did, for VerifyPerf.
	lastSize  uint64
	atomCount [][]uint64 // per QP, per slot: atomics applied
	atomBase  [][]uint64 // per QP, per slot: the remote half's counters at creation
}

// PerfResult is what one Run measured.
type PerfResult struct {
	// BW is the bandwidth row (BW tests; on the side that measured).
	BW oob.BWReport
	// Lat is the latency row (latency tests, the client; send and write
	// latency also on the server).
	Lat oob.LatReport
	// Measured says whether this side measured anything (a BW server of
	// write, read and atomic tests does nothing until the report).
	Measured bool
}

func (c *PerfConfig) fill(dev *emu.Device) error {
	if !c.Test.IsValid() {
		return fmt.Errorf("perf: invalid test %d: %w", c.Test, unix.EINVAL)
	}
	def := oob.PerftestDefaults(c.Test)
	c.MaxSize = orDefault(c.MaxSize, def.Size)
	c.Iters = orDefault(c.Iters, def.Iters)
	c.NumQP = orDefault(c.NumQP, 1)
	if c.Test.IsBW() {
		c.TxDepth = orDefault(c.TxDepth, defTxDepthBW)
		c.CQMod = min(orDefault(c.CQMod, defCQMod), c.TxDepth)
	} else {
		c.TxDepth = orDefault(c.TxDepth, defTxDepthLat)
		c.CQMod = 1
		c.NumQP = 1
	}
	c.RxDepth = int(min(uint64(orDefault(c.RxDepth, defRxDepth)), c.Iters))
	c.QPTimeout = orDefault(c.QPTimeout, 14)
	c.Timeout = orDefault(c.Timeout, DefaultTimeout)
	if c.OutReads == 0 {
		c.OutReads = dev.Query().MaxQPRdAtom
	}
	c.OutReads = min(c.OutReads, dev.Query().MaxQPRdAtom, 255)
	if c.MTU == 0 {
		pa, err := dev.QueryPort(1)
		if err != nil {
			return fmt.Errorf("Couldn't get port info: %w", err)
		}
		c.MTU = pa.ActiveMTU
	}
	if c.Test.Verb() == oob.VerbAtomic {
		c.MaxSize = 8
	}
	return nil
}

// NewPerf creates one side's objects on dev, moves the QPs to INIT and, for
// send tests, posts the receives (perftest does all this before the
// exchange).
func NewPerf(dev *emu.Device, cfg PerfConfig) (_ *Perf, err error) {
	if err := cfg.fill(dev); err != nil {
		return nil, err
	}
	p := &Perf{cfg: cfg, dev: dev}
	defer func() {
		if err != nil {
			p.Close() // p, not the nil result
		}
	}()
	if p.pd, err = dev.AllocPD(0); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	p.region = max(alignUp(int(cfg.MaxSize), cacheLineSize), cycleBuffer)
	access := qpstate.AccessLocalWrite | qpstate.AccessRemoteWrite | qpstate.AccessRemoteRead | qpstate.AccessRemoteAtomic
	if p.buf, err = newBuffer(dev, p.pd, 2*p.region*cfg.NumQP, access); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x2545f4914f6cdd1d))
	// write_lat polls the last byte of each message for the peer's count,
	// so its buffer starts zeroed as perftest's does; a random byte there
	// equal to 1 made the server take it for the client's first WRITE and
	// send before it (the real client then waits forever).
	if cfg.Test != oob.PerftestWriteLat {
		for i := range p.buf.b {
			p.buf.b[i] = byte(rng.Uint32())
		}
	}
	if p.scq, err = newCQ(dev, cfg.TxDepth*cfg.NumQP); err != nil {
		return nil, err
	}
	if p.rcq, err = newCQ(dev, max(cfg.RxDepth, 1)*cfg.NumQP); err != nil {
		return nil, err
	}
	gid, err := localGID(dev, cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	p.rposted = make([]int, cfg.NumQP)
	for i := range cfg.NumQP {
		init := &emu.QPInitAttr{SendCQ: p.scq.cq, RecvCQ: p.rcq.cq, QPType: qpstate.TypeRC, SQSigType: emu.SignalReqWR,
			Cap: qpstate.Cap{MaxSendWR: uint32(cfg.TxDepth), MaxRecvWR: uint32(max(cfg.RxDepth, 1)), MaxSendSGE: 1,
				MaxRecvSGE: 1, MaxInlineData: uint32(max(cfg.InlineSize, 0))}}
		qp, err := p.pd.CreateQP(init)
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		p.qps = append(p.qps, qp)
		if err := toInit(qp, access, 0); err != nil {
			return nil, err
		}
		p.local = append(p.local, oob.PerftestDest{OutReads: uint16(cfg.OutReads), QPN: qp.QPNum,
			PSN: rng.Uint32() & 0xffffff, RKey: p.buf.mr.RKey, VAddr: p.remoteAddr(i), GID: gid})
		if p.receives() {
			if err := p.postRecv(i, cfg.RxDepth); err != nil {
				return nil, err
			}
		}
	}
	p.atomBase = make([][]uint64, cfg.NumQP)
	p.atomCount = make([][]uint64, cfg.NumQP)
	for i := range cfg.NumQP {
		h := p.half(i, true)
		for s := 0; s+8 <= len(h); s += cacheLineSize {
			p.atomBase[i] = append(p.atomBase[i], binary.LittleEndian.Uint64(h[s:]))
		}
		p.atomCount[i] = make([]uint64, len(p.atomBase[i]))
	}
	return p, nil
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// receives reports whether this side posts receives: the send tests'
// server, and both sides of send latency.
func (p *Perf) receives() bool {
	return p.cfg.Test.Verb() == oob.VerbSend && (!p.cfg.Client || !p.cfg.Test.IsBW())
}

func (p *Perf) localOff(i int) int      { return 2 * p.region * i }
func (p *Perf) remoteOff(i int) int     { return 2*p.region*i + p.region }
func (p *Perf) remoteAddr(i int) uint64 { return p.buf.addr + uint64(p.remoteOff(i)) }
func (p *Perf) half(i int, remote bool) []byte {
	off := p.localOff(i)
	if remote {
		off = p.remoteOff(i)
	}
	return p.buf.b[off : off+p.region]
}

// postRecv posts n receives on QP i into its remote half.
func (p *Perf) postRecv(i, n int) error {
	wr := []emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{p.buf.sge(p.remoteOff(i), int(p.cfg.MaxSize))}}}
	for range n {
		if _, err := p.qps[i].PostRecv(wr); err != nil {
			return fmt.Errorf("Couldn't post receive: %w", err)
		}
		p.rposted[i]++
	}
	return nil
}

// Local returns the addresses to send to the peer (one per QP).
func (p *Perf) Local() []oob.PerftestDest { return p.local }

// Config returns the configuration with its defaults filled in.
func (p *Perf) Config() PerfConfig { return p.cfg }

// SetPathMTU changes the path MTU Connect will use (perftest's MTU
// exchange settles on the smaller of both sides').
func (p *Perf) SetPathMTU(m qpstate.MTU) { p.cfg.MTU = m }

// Connect moves the QPs to RTR and RTS towards the peer's addresses
// (ctx_connect): max_dest_rd_atomic is the local out_reads, max_rd_atomic
// the peer's, min_rnr_timer 12, retry and RNR retry 7.
func (p *Perf) Connect(remote []oob.PerftestDest) error {
	if len(remote) < len(p.qps) {
		return fmt.Errorf("perf: %d remote addresses for %d QPs: %w", len(remote), len(p.qps), unix.EINVAL)
	}
	p.rem = remote
	for i, qp := range p.qps {
		r := remote[i]
		pa := &path{typ: qpstate.TypeRC, mtu: p.cfg.MTU, sl: p.cfg.SL, gidIndex: p.cfg.GIDIndex, dgid: emu.GID(r.GID),
			localPSN: p.local[i].PSN, remotePSN: r.PSN, remoteQPN: r.QPN, timeout: p.cfg.QPTimeout, retry: 7,
			rnrRetry: 7, minRNR: minRNRTimer, rdAtomic: uint8(max(1, min(int(r.OutReads), p.cfg.OutReads))),
			destRdAtomic: uint8(max(1, p.cfg.OutReads))}
		if p.cfg.Resolve != nil {
			mac, err := p.cfg.Resolve(pa.dgid)
			if err != nil {
				return fmt.Errorf("resolve %v: %w", pa.dgid, err)
			}
			pa.dmac = mac
		}
		if err := toRTS(qp, pa); err != nil {
			return err
		}
	}
	return nil
}

// sendWR builds the WR of message k on QP i at size: the opcode of the
// test, addresses cycling through the cycle buffer in steps of the size
// rounded to the cache line when the size is at most half of it
// (increase_loc_addr / increase_rem_addr), and returns the slot used.
func (p *Perf) sendWR(i int, k uint64, size uint64, signaled bool) (emu.SendWR, int) {
	slot := 0
	inc := alignUp(int(size), cacheLineSize)
	if p.cfg.Test.IsBW() && size <= cycleBuffer/2 {
		slot = int(k % uint64(cycleBuffer/inc))
	}
	off := slot * inc
	wr := emu.SendWR{WRID: uint64(i), SGList: []emu.SGE{p.buf.sge(p.localOff(i)+off, int(size))},
		RemoteAddr: p.rem[i].VAddr + uint64(off), RKey: p.rem[i].RKey}
	if signaled {
		wr.SendFlags = emu.SendSignaled
	}
	switch p.cfg.Test.Verb() {
	case oob.VerbWrite:
		wr.Opcode = emu.WRRDMAWrite
	case oob.VerbRead:
		wr.Opcode = emu.WRRDMARead
	case oob.VerbSend:
		wr.Opcode = emu.WRSend
	case oob.VerbAtomic:
		wr.Opcode = emu.WRAtomicFetchAndAdd
		wr.CompareAdd = atomicAddValue
		if p.cfg.CompareSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = emu.WRAtomicCmpAndSwp, 0, 0
		}
	}
	if (wr.Opcode == emu.WRRDMAWrite || wr.Opcode == emu.WRSend) && int(size) <= p.cfg.InlineSize {
		wr.SendFlags |= emu.SendInline
	}
	return wr, slot
}

// Run runs the test at size (at most MaxSize) and returns what this side
// measured. Both sides call it once the QPs are connected; the BW server of
// write, read and atomic tests returns at once, like perftest's server,
// which only waits for the report.
func (p *Perf) Run(size uint64) (PerfResult, error) {
	if size == 0 || size > p.cfg.MaxSize {
		return PerfResult{}, fmt.Errorf("perf: size %d not in 1..%d: %w", size, p.cfg.MaxSize, unix.EINVAL)
	}
	if p.rem == nil {
		return PerfResult{}, fmt.Errorf("perf: Run before Connect: %w", unix.EINVAL)
	}
	p.lastSize = size
	t := p.cfg.Test
	switch {
	case t.IsBW() && p.cfg.Client:
		return p.runBWClient(size)
	case t.IsBW() && t.Verb() == oob.VerbSend:
		return p.runBWServer(size)
	case t.IsBW():
		return PerfResult{}, nil
	case t == oob.PerftestSendLat || t == oob.PerftestWriteLat:
		return p.runPingLat(size)
	case p.cfg.Client:
		return p.runReadLat(size)
	}
	return PerfResult{}, nil
}

// clockFrom returns a "cycle" counter: nanoseconds since start, at least 1
// so that 0 can mean "no stamp".
func clockFrom(start time.Time) func() int64 {
	return func() int64 { return int64(time.Since(start)) + 1 }
}

func (p *Perf) what(s string, done, total uint64) func() string {
	return func() string {
		return fmt.Sprintf("%s %s: %d of %d completions", p.cfg.Test.Tool(), s, done, total)
	}
}

// runBWClient is run_iter_bw: keep up to TxDepth WRs outstanding per QP,
// one signaled every CQMod (and the last), stamping each post and each
// completion.
func (p *Perf) runBWClient(size uint64) (PerfResult, error) {
	cfg := p.cfg
	iters, nqp := cfg.Iters, len(p.qps)
	tot := iters * uint64(nqp)
	tposted, tcompleted := make([]int64, tot), make([]int64, tot)
	scnt, ccnt := make([]uint64, nqp), make([]uint64, nqp)
	var totS, totC uint64
	wc := make([]emu.WC, cfg.TxDepth*nqp)
	now := clockFrom(time.Now())
	for totC < tot {
		for i, qp := range p.qps {
			for scnt[i] < iters && scnt[i]-ccnt[i] < uint64(cfg.TxDepth) {
				k := scnt[i]
				sig := k%uint64(cfg.CQMod) == uint64(cfg.CQMod-1) || k == iters-1
				wr, slot := p.sendWR(i, k, size, sig)
				tposted[totS] = now()
				if _, err := qp.PostSend([]emu.SendWR{wr}); err != nil {
					return PerfResult{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, k, err)
				}
				if cfg.Test.Verb() == oob.VerbAtomic && slot < len(p.atomCount[i]) && !cfg.CompareSwap {
					p.atomCount[i][slot]++
				}
				scnt[i]++
				totS++
			}
		}
		n, err := p.scq.wait(wc, cfg.Timeout, p.what("client", totC, tot))
		if err != nil {
			return PerfResult{}, err
		}
		for j := range wc[:n] {
			w := &wc[j]
			if w.Status != emu.WCSuccess {
				return PerfResult{}, perfWCError(w)
			}
			i := int(w.WRID)
			d := min(ccnt[i]+uint64(cfg.CQMod), iters) - ccnt[i]
			ccnt[i] += d
			totC += d
			tcompleted[totC-1] = now()
		}
	}
	secs := float64(tcompleted[tot-1]-tposted[0]) / 1e9
	r := oob.BWFromRun(size, tot, secs, cfg.Gbits)
	r.Iters = iters
	if !cfg.NoPeak {
		r.BWPeak = PeakBW(size, tposted, tcompleted, cfg.CQMod, cfg.Gbits)
	}
	return PerfResult{BW: r, Measured: true}, nil
}

// runBWServer is the send_bw server: count Iters receives per QP,
// reposting each, and time them from the first to the last.
func (p *Perf) runBWServer(size uint64) (PerfResult, error) {
	cfg := p.cfg
	iters, nqp := cfg.Iters, len(p.qps)
	tot := iters * uint64(nqp)
	rcnt := make([]uint64, nqp)
	var totR uint64
	wc := make([]emu.WC, cfg.RxDepth*nqp)
	var first, last time.Time
	for totR < tot {
		n, err := p.rcq.wait(wc, cfg.Timeout, p.what("server", totR, tot))
		if err != nil {
			return PerfResult{}, err
		}
		if first.IsZero() {
			first = time.Now()
		}
		for j := range wc[:n] {
			w := &wc[j]
			if w.Status != emu.WCSuccess {
				return PerfResult{}, perfWCError(w)
			}
			if uint64(w.ByteLen) != size {
				return PerfResult{}, fmt.Errorf("received %d bytes, want %d: %w", w.ByteLen, size, unix.EIO)
			}
			i := int(w.WRID)
			p.rposted[i]--
			rcnt[i]++
			totR++
			if err := p.postRecv(i, 1); err != nil {
				return PerfResult{}, err
			}
		}
	}
	last = time.Now()
	r := oob.BWFromRun(size, tot, last.Sub(first).Seconds(), cfg.Gbits)
	r.Iters = iters
	return PerfResult{BW: r, Measured: true}, nil
}

// runReadLat is run_iter_lat for READ and atomics: one WR at a time,
// stamped at post, waited for.
func (p *Perf) runReadLat(size uint64) (PerfResult, error) {
	cfg := p.cfg
	tposted := make([]int64, cfg.Iters)
	now := clockFrom(time.Now())
	wc := make([]emu.WC, 1)
	for k := range cfg.Iters {
		wr, slot := p.sendWR(0, k, size, true)
		tposted[k] = now()
		if _, err := p.qps[0].PostSend([]emu.SendWR{wr}); err != nil {
			return PerfResult{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", k, err)
		}
		if cfg.Test.Verb() == oob.VerbAtomic && !cfg.CompareSwap {
			p.atomCount[0][slot]++
		}
		if _, err := p.scq.wait(wc, cfg.Timeout, p.what("client", k, cfg.Iters)); err != nil {
			return PerfResult{}, err
		}
		if wc[0].Status != emu.WCSuccess {
			return PerfResult{}, perfWCError(&wc[0])
		}
	}
	return PerfResult{Lat: LatencyStats(size, tposted, 1), Measured: true}, nil
}

// runPingLat is run_iter_lat_send and run_iter_lat_write: one side sends
// first — the client in send_lat, the server in write_lat (perftest's
// "!(scnt < 1 && machine == SERVER)" there against "== CLIENT" in
// send_lat) — and each side waits for the peer's message (a receive
// completion, or for write_lat the last byte of its remote half turning
// into the message count) before it sends the next, stamping each post.
func (p *Perf) runPingLat(size uint64) (PerfResult, error) {
	cfg := p.cfg
	iters := cfg.Iters
	tposted := make([]int64, iters)
	now := clockFrom(time.Now())
	write := cfg.Test == oob.PerftestWriteLat
	recvFlag := p.half(0, true)[size-1 : size]
	sendFlag := p.half(0, false)
	swc, rwc := make([]emu.WC, cfg.TxDepth), make([]emu.WC, 1)
	first := cfg.Client != write // this side sends first
	var scnt, rcnt, outstanding uint64
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && first) {
			rcnt++
			if write {
				if err := p.waitByte(recvFlag, byte(rcnt), rcnt); err != nil {
					return PerfResult{}, err
				}
			} else {
				if _, err := p.rcq.wait(rwc, cfg.Timeout, p.what("receive", rcnt-1, iters)); err != nil {
					return PerfResult{}, err
				}
				if rwc[0].Status != emu.WCSuccess {
					return PerfResult{}, perfWCError(&rwc[0])
				}
				p.rposted[0]--
				if err := p.postRecv(0, 1); err != nil {
					return PerfResult{}, err
				}
			}
		}
		if scnt < iters {
			for outstanding >= uint64(cfg.TxDepth) {
				if err := p.reap(swc, &outstanding, scnt, iters); err != nil {
					return PerfResult{}, err
				}
			}
			wr, _ := p.sendWR(0, scnt, size, true)
			tposted[scnt] = now()
			scnt++
			if write {
				sendFlag[size-1] = byte(scnt)
			}
			if _, err := p.qps[0].PostSend([]emu.SendWR{wr}); err != nil {
				return PerfResult{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			outstanding++
		}
	}
	for outstanding > 0 {
		if err := p.reap(swc, &outstanding, scnt, iters); err != nil {
			return PerfResult{}, err
		}
	}
	return PerfResult{Lat: LatencyStats(size, tposted, 2), Measured: true}, nil
}

// reap waits for send completions of a latency test (every WR is
// signaled) and takes them off *outstanding; scnt WRs were posted.
func (p *Perf) reap(wc []emu.WC, outstanding *uint64, scnt, iters uint64) error {
	n, err := p.scq.wait(wc, p.cfg.Timeout, p.what("send", scnt-*outstanding, iters))
	if err != nil {
		return err
	}
	for j := range wc[:n] {
		if wc[j].Status != emu.WCSuccess {
			return perfWCError(&wc[j])
		}
	}
	*outstanding -= uint64(n)
	return nil
}

// waitByte polls a byte of the remote half until the peer's WRITE sets it
// to want, as write_lat polls its receive buffer: no completion tells a
// responder that a WRITE landed. It yields between polls and sleeps once
// the wait gets long; after Timeout it fails with ETIMEDOUT.
func (p *Perf) waitByte(b []byte, want byte, n uint64) error {
	if readFlag(b) == want {
		return nil
	}
	deadline := time.Now().Add(p.cfg.Timeout)
	for spins := 0; ; spins++ {
		if readFlag(b) == want {
			return nil
		}
		if spins < 1024 {
			runtime.Gosched()
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: write %d of the peer never arrived in %v: %w", p.cfg.Test.Tool(), n, p.cfg.Timeout, unix.ETIMEDOUT)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// Close destroys the side's objects.
func (p *Perf) Close() error {
	for _, q := range p.qps {
		q.Destroy()
	}
	p.qps = nil
	for _, c := range []*cqWaiter{p.scq, p.rcq} {
		if c != nil {
			c.cq.Destroy()
		}
	}
	p.scq, p.rcq = nil, nil
	if p.buf != nil {
		p.buf.free(p.dev)
		p.buf = nil
	}
	if p.pd != nil {
		err := p.pd.Dealloc()
		p.pd = nil
		return err
	}
	return nil
}

// VerifyPerf checks, when both sides of a run are in one process, that the
// last Run moved the right bytes: after WRITE the server's remote half holds
// the client's data in every slot the run used, after SEND the last message
// is in the receive buffer (both ways for send_lat, and write_lat checks
// both directions too), after READ the client's local half holds the
// server's data, and after atomics every counter of the server equals its
// initial value plus the fetch-and-adds the client posted to it (unchanged
// for compare-and-swap of 0 with 0).
func VerifyPerf(client, server *Perf) error {
	size := client.lastSize
	cfg := client.cfg
	inc := alignUp(int(size), cacheLineSize)
	slots := 1
	if cfg.Test.IsBW() && size <= cycleBuffer/2 {
		slots = int(min(uint64(cycleBuffer/inc), cfg.Iters))
	}
	for i := range client.qps {
		cl, cr := client.half(i, false), client.half(i, true)
		sl, sr := server.half(i, false), server.half(i, true)
		switch cfg.Test.Verb() {
		case oob.VerbWrite:
			for s := range slots {
				o := s * inc
				if !bytes.Equal(sr[o:o+int(size)], cl[o:o+int(size)]) {
					return fmt.Errorf("%s: QP %d slot %d: server memory differs from the data written: %w", cfg.Test, i, s, unix.EIO)
				}
			}
			if cfg.Test == oob.PerftestWriteLat && !bytes.Equal(cr[:size], sl[:size]) {
				return fmt.Errorf("%s: client memory differs from the server's writes: %w", cfg.Test, unix.EIO)
			}
		case oob.VerbRead:
			for s := range slots {
				o := s * inc
				if !bytes.Equal(cl[o:o+int(size)], sr[o:o+int(size)]) {
					return fmt.Errorf("%s: QP %d slot %d: data read differs from server memory: %w", cfg.Test, i, s, unix.EIO)
				}
			}
		case oob.VerbSend:
			last := int((cfg.Iters - 1) % uint64(slots))
			o := last * inc
			if !bytes.Equal(sr[:size], cl[o:o+int(size)]) {
				return fmt.Errorf("%s: QP %d: last message received differs from the one sent: %w", cfg.Test, i, unix.EIO)
			}
			if cfg.Test == oob.PerftestSendLat && !bytes.Equal(cr[:size], sl[:size]) {
				return fmt.Errorf("%s: client received differs from what the server sent: %w", cfg.Test, unix.EIO)
			}
		case oob.VerbAtomic:
			for s, base := range server.atomBase[i] {
				got := binary.LittleEndian.Uint64(sr[s*cacheLineSize:])
				if want := base + client.atomCount[i][s]*atomicAddValue; got != want {
					return fmt.Errorf("%s: QP %d counter %d is %#x, want %#x: %w", cfg.Test, i, s, got, want, unix.EIO)
				}
			}
		}
	}
	return nil
}

// readFlag reads a byte the device may be writing, as write_lat's volatile
// poll does: a plain load of a flag; the data behind it is compared only
// after a completion or a post has synchronized with the device.
func readFlag(b []byte) byte { return b[0] }
