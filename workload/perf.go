package workload

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
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
	ucMaxRx        = 16000      // UC_MAX_RX: the UC and UD receive depth when -r is left at 512
	perftestQKey   = 0x11111111 // DEF_QKEY: the Q_Key of perftest's UD QPs and of the WRs it sends
)

// PerfConfig configures one side of a perftest run. Zero values take
// perftest 4.5's defaults.
type PerfConfig struct {
	// Test is the perftest tool; it must be valid.
	Test oob.PerftestTest
	// QPType is the transport (-c): qpstate.TypeRC (0 means RC),
	// TypeUC (write and send tests) or TypeUD (send tests). UC QPs are
	// connected like RC ones but have no ACKs, retries or reads; a UD QP
	// sends to an address handle per peer QP with Q_Key 0x11111111 and
	// receives each message behind 40 bytes of GRH.
	QPType qpstate.Type
	// PostList chains this many WRs in each post of the BW loops and of
	// the warm-up (-l); 0 means 1. It must divide Iters in iterations
	// mode, be a multiple of CQMod and be at most TxDepth; CQMod 0 with
	// a PostList above 1 means PostList (perftest's default). WR j of a
	// chain uses slot j of the cycle buffer and is signaled when j+1 is a
	// multiple of CQMod.
	PostList int
	// Events waits for completions on the CQs' completion handlers (armed
	// with ReqNotify) instead of polling first (-e, perftest's completion
	// channel).
	Events bool
	// UseSRQ shares one SRQ among the QPs of a side that receives (send
	// tests: the server, both sides of -b and of send_lat), RxDepth deep,
	// with RxDepth/NumQP receives posted for each QP index (--use-srq).
	// The address message's SRQ number stays 0, as perftest's does for RC,
	// UC and UD.
	UseSRQ bool
	// ODP registers the buffer as an on-demand paging MR (--odp).
	ODP bool
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
	// means 512, capped at Iters as perftest does; with UC and UD, 512
	// becomes min(Iters, 16000) in iterations mode.
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
	MTU ib.MTU
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
	// Duration runs for this long instead of Iters messages (-D):
	// perftest's duration mode, which counts only the completions seen
	// between Margin and Duration-Margin and reports no BW peak. 0 is
	// iterations mode.
	Duration time.Duration
	// Margin is the unmeasured time at each end of a duration run (-f);
	// it must be less than Duration/2. perftest's default, Duration/4 in
	// whole seconds, is the caller's to compute.
	Margin time.Duration
	// Bidirectional runs a BW test both ways at once (-b): both sides
	// post, and in send_bw both also receive.
	Bidirectional bool
	// PerformWarmUp posts TxDepth signaled WRs per QP and waits for them
	// before a write, read or atomic BW run (--perform_warm_up).
	PerformWarmUp bool
	// Clock drives the duration alarm and stamps its window; nil is the
	// wall clock.
	Clock clock.Clock
	// Timeout bounds every wait; 0 means DefaultTimeout.
	Timeout time.Duration
	// Seed seeds the PSNs and the buffer content.
	Seed uint64
	// Resolver fills the destination MAC of the address vector, asked
	// with a background context (bound the wait in the Resolver); nil
	// leaves it to the device's neighbour table.
	Resolver emu.Resolver
	// MaxMemory caps the bytes NewPerf may allocate for the buffer (2
	// halves per QP) and for the timestamps of an iterations run (16
	// bytes per message); 0 means DefaultMaxMemory. A configuration over
	// it, or over the device's limits (max_qp, max_qp_wr, max_cqe,
	// max_mr_size, max_msg_sz), fails before anything is allocated.
	MaxMemory uint64
	// CheckRecv, if set, is called on a receiving side of a send test for
	// every message received, with the QP index, the message's number on
	// that QP in the current Run (from 0) and its bytes; an error ends the
	// run. The receives then rotate over RxDepth buffers per QP instead
	// of sharing one (perftest's), so that each message stays intact until
	// it is checked. Not with UseSRQ; the ring must fit in MaxCheckRing.
	CheckRecv func(qp int, n uint64, msg []byte) error
}

// MaxCheckRing bounds the receive ring of PerfConfig.CheckRecv: NumQP ×
// RxDepth × MaxSize bytes (rounded up to the cache line).
const MaxCheckRing = 256 << 20

// Perf is one side of a perftest run: PD, send and receive CQs, NumQP RC
// QPs and one registered buffer. Each QP owns two halves of
// max(MaxSize, 4096) bytes (rounded to the cache line): the local half
// (what it sends, or where reads and atomic results land) and the remote
// half, whose address and R_Key it advertises (the target of the peer's
// WRITEs, READs and atomics and where its SENDs are received).
type Perf struct {
	cfg      PerfConfig
	sampler  atomic.Pointer[sampler] // the duration alarm of the current run
	dev      *emu.Device
	pd       *emu.PD
	scq, rcq *cqWaiter
	qps      []*emu.QP
	buf      *buffer
	region   int // bytes per half
	local    []oob.PerftestDest
	rem      []oob.PerftestDest
	rposted  []int
	ahs      []*emu.AH // UD: one per QP, towards the peer's QP of the same index
	srq      *emu.SRQ  // UseSRQ on a receiving side
	ring     *buffer   // CheckRecv: RxDepth receive buffers per QP
	slot     int       // bytes per ring buffer
	rposts   []uint64  // CheckRecv: receives posted per QP, ever
	rdone    []uint64  // CheckRecv: receives completed per QP, ever
	rcount   []uint64  // CheckRecv: receives completed per QP in this Run

	// What the client did, for VerifyPerf.
	lastSize  uint64
	sent      []uint64   // per QP: messages posted in the last Run
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
	// LatDuration is the latency row of a duration run, instead of Lat.
	LatDuration oob.LatDurationReport
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
	// perftest sets the CQ moderation of a post list after its clamps.
	cqModGiven := c.CQMod != 0
	if c.Test.IsBW() {
		c.TxDepth = orDefault(c.TxDepth, defTxDepthBW)
		c.CQMod = min(orDefault(c.CQMod, defCQMod), c.TxDepth)
	} else {
		c.TxDepth = orDefault(c.TxDepth, defTxDepthLat)
		c.CQMod = 1
		c.NumQP = 1
	}
	c.RxDepth = orDefault(c.RxDepth, defRxDepth)
	c.QPType = orDefault(c.QPType, qpstate.TypeRC)
	switch {
	case c.QPType == qpstate.TypeUC && c.Test.Verb() != oob.VerbWrite && c.Test.Verb() != oob.VerbSend,
		c.QPType == qpstate.TypeUD && c.Test.Verb() != oob.VerbSend,
		c.QPType != qpstate.TypeRC && c.QPType != qpstate.TypeUC && c.QPType != qpstate.TypeUD:
		return fmt.Errorf("perf: %s QPs with %s: %w", c.QPType, c.Test, unix.EINVAL)
	case c.UseSRQ && c.Test.Verb() != oob.VerbSend:
		return fmt.Errorf("Using SRQ only avavilible in SEND tests: %w", unix.EINVAL)
	case c.UseSRQ && c.NumQP > c.RxDepth:
		return fmt.Errorf("Using SRQ depth should be greater than number of QPs: %w", unix.EINVAL)
	case c.Duration < 0 || c.Margin < 0:
		return fmt.Errorf("perf: negative duration %v or margin %v: %w", c.Duration, c.Margin, unix.EINVAL)
	case c.Duration > 0 && c.Duration <= 2*c.Margin:
		return fmt.Errorf("please check that DURATION > 2*MARGIN (%v, %v): %w", c.Duration, c.Margin, unix.EINVAL)
	case c.Bidirectional && !c.Test.IsBW():
		return fmt.Errorf("Bidirectional is only available in BW test: %w", unix.EINVAL)
	case c.Duration == 0:
		// Iterations mode: no queue deeper than the messages it carries
		// (perftest's force_dependecies).
		c.TxDepth = int(min(uint64(c.TxDepth), c.Iters))
		c.RxDepth = int(min(uint64(c.RxDepth), c.Iters))
		if c.QPType != qpstate.TypeRC && c.RxDepth == defRxDepth {
			c.RxDepth = int(min(c.Iters, ucMaxRx))
		}
		c.CQMod = min(c.CQMod, c.TxDepth)
	}
	c.PostList = orDefault(c.PostList, 1)
	if c.PostList > 1 {
		if !c.Test.IsBW() {
			return fmt.Errorf("Post list is supported in BW tests only: %w", unix.EINVAL)
		}
		if !cqModGiven {
			c.CQMod = c.PostList
		}
		switch {
		case c.Duration == 0 && c.Iters%uint64(c.PostList) != 0:
			return fmt.Errorf("Number of iterations must be a multiple of post list size: %w", unix.EINVAL)
		case c.PostList%c.CQMod != 0:
			return fmt.Errorf("Post list size must be a multiple of CQ moderation: %w", unix.EINVAL)
		case c.PostList > c.TxDepth:
			return fmt.Errorf("post list %d deeper than the TX depth %d: %w", c.PostList, c.TxDepth, unix.EINVAL)
		}
	}
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
	return c.checkLimits(dev)
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
	p.region = max(alignUp(int(cfg.MaxSize), cacheLineSize)+p.recvOff(), cycleBuffer)
	access := ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
	if cfg.ODP {
		access |= ib.AccessOnDemand
	}
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
	if cfg.Events {
		p.scq.spins, p.rcq.spins = 0, 0
	}
	gid, err := localGID(dev, cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	p.rposted = make([]int, cfg.NumQP)
	if cfg.CheckRecv != nil && p.receives() {
		if cfg.UseSRQ {
			return nil, fmt.Errorf("perf: CheckRecv with UseSRQ: %w", unix.EINVAL)
		}
		p.slot = alignUp(int(cfg.MaxSize)+p.recvOff(), cacheLineSize)
		n := max(cfg.RxDepth, 1) * cfg.NumQP
		if p.slot*n > MaxCheckRing {
			return nil, fmt.Errorf("perf: CheckRecv: %d receive buffers of %d bytes exceed %d: %w", n, p.slot, MaxCheckRing, unix.ENOMEM)
		}
		if p.ring, err = newBuffer(dev, p.pd, p.slot*n, ib.AccessLocalWrite); err != nil {
			return nil, err
		}
		p.rposts, p.rdone, p.rcount = make([]uint64, cfg.NumQP), make([]uint64, cfg.NumQP), make([]uint64, cfg.NumQP)
	}
	if cfg.UseSRQ && p.receives() {
		sa := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: uint32(cfg.RxDepth), MaxSGE: 1}}
		if p.srq, err = p.pd.CreateSRQ(sa); err != nil {
			return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
	}
	for i := range cfg.NumQP {
		init := &emu.QPInitAttr{SendCQ: p.scq.cq, RecvCQ: p.rcq.cq, SRQ: p.srq, QPType: cfg.QPType, SQSigType: emu.SignalReqWR,
			Cap: qpstate.Cap{MaxSendWR: uint32(cfg.TxDepth), MaxRecvWR: uint32(max(cfg.RxDepth, 1)), MaxSendSGE: 1,
				MaxRecvSGE: 1, MaxInlineData: uint32(max(cfg.InlineSize, 0))}}
		qp, err := p.pd.CreateQP(init)
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		p.qps = append(p.qps, qp)
		if err := toInit(qp, 1, p.qpAccess(), perftestQKey); err != nil {
			return nil, err
		}
		p.local = append(p.local, oob.PerftestDest{OutReads: uint16(cfg.OutReads), QPN: qp.QPNum(),
			PSN: rng.Uint32() & ib.PSNMask, RKey: p.buf.mr.RKey(), VAddr: p.remoteAddr(i), GID: gid})
		if n := cfg.RxDepth; p.receives() {
			if p.srq != nil {
				n /= cfg.NumQP // ctx_set_recv_wqes: the SRQ's depth split among the QPs
			}
			if err := p.postRecv(i, n); err != nil {
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

// qpAccess is the remote access the QPs grant (ctx_modify_qp_to_init): a
// UC QP takes only WRITEs.
func (p *Perf) qpAccess() ib.AccessFlags {
	if p.cfg.QPType == qpstate.TypeUC {
		return ib.AccessLocalWrite | ib.AccessRemoteWrite
	}
	return ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
}

// receives reports whether this side posts receives: the send tests'
// server, and both sides of send latency and of bidirectional send_bw.
func (p *Perf) receives() bool {
	return p.cfg.Test.Verb() == oob.VerbSend && (!p.cfg.Client || !p.cfg.Test.IsBW() || p.cfg.Bidirectional)
}

// sends reports whether this side posts the test's WRs in Run.
func (p *Perf) sends() bool {
	t := p.cfg.Test
	switch {
	case t.IsBW():
		return p.cfg.Client || p.cfg.Bidirectional
	case t == oob.PerftestSendLat || t == oob.PerftestWriteLat:
		return true
	}
	return p.cfg.Client
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

// recvOff is where a received message's data starts in the remote half:
// a UD receive lands 40 bytes of GRH first, and perftest places it so that
// the data starts a cache line in.
func (p *Perf) recvOff() int {
	if p.cfg.QPType == qpstate.TypeUD {
		return cacheLineSize
	}
	return 0
}

// recvExtra is what a receive completion counts beyond the message: the
// GRH of UD.
func (p *Perf) recvExtra() int {
	if p.cfg.QPType == qpstate.TypeUD {
		return emu.GRHSize // UD_ADDITION: the GRH in front of each UD receive
	}
	return 0
}

// postRecv posts n receives on QP i into its remote half (for UD, room for
// the GRH in front of the data).
func (p *Perf) postRecv(i, n int) error {
	sge := p.buf.sge(p.remoteOff(i)+p.recvOff()-p.recvExtra(), int(p.cfg.MaxSize)+p.recvExtra())
	wr := []emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{sge}}}
	for range n {
		if p.ring != nil {
			wr[0].SGList[0] = p.ring.sge(p.ringOff(i, p.rposts[i])+p.recvOff()-p.recvExtra(), int(p.cfg.MaxSize)+p.recvExtra())
			p.rposts[i]++
		}
		var err error
		if p.srq != nil {
			_, err = p.srq.PostRecv(wr)
		} else {
			_, err = p.qps[i].PostRecv(wr)
		}
		if err != nil {
			return fmt.Errorf("Couldn't post receive: %w", err)
		}
		p.rposted[i]++
	}
	return nil
}

// ringOff is where receive k of QP i lands in the CheckRecv ring: QP i's
// RxDepth buffers in turn. Receives complete in the order they were
// posted and at most RxDepth are posted, so buffer k%RxDepth is reposted
// only after receive k was checked.
func (p *Perf) ringOff(i int, k uint64) int {
	depth := max(p.cfg.RxDepth, 1)
	return (i*depth + int(k%uint64(depth))) * p.slot
}

// received accounts for a receive completion of wc on QP i of size bytes
// and, with CheckRecv, checks the message.
func (p *Perf) received(i int, size uint64) error {
	if p.ring == nil {
		return nil
	}
	off := p.ringOff(i, p.rdone[i]) + p.recvOff()
	n := p.rcount[i]
	p.rdone[i]++
	p.rcount[i]++
	return p.cfg.CheckRecv(i, n, p.ring.b[off:off+int(size)])
}

// ChecksEachMessage reports whether this side checks every message it
// receives (PerfConfig.CheckRecv on a receiving side).
func (p *Perf) ChecksEachMessage() bool { return p.ring != nil }

// SentMessage returns the bytes message n of a Run at size on QP i is
// sent from: the slot of the cycle buffer sendWR uses for it (chain
// position with a post list), or nil for a closed Perf. With CheckRecv on
// the peer, an in-process pair compares each message received with it.
func (p *Perf) SentMessage(i int, n, size uint64) []byte {
	if p.buf == nil || i >= p.cfg.NumQP || size > p.cfg.MaxSize {
		return nil
	}
	slot := 0
	inc := alignUp(int(size), cacheLineSize)
	if p.cfg.Test.IsBW() && size <= cycleBuffer/2 {
		slot = int(n % uint64(cycleBuffer/inc))
	}
	if pl := uint64(p.cfg.PostList); pl > 1 {
		slot = int(n % pl)
	}
	off := slot * inc
	return p.half(i, false)[off : off+int(size)]
}

// Local returns the addresses to send to the peer (one per QP).
func (p *Perf) Local() []oob.PerftestDest { return p.local }

// Config returns the configuration with its defaults filled in.
func (p *Perf) Config() PerfConfig { return p.cfg }

// SetPathMTU changes the path MTU Connect will use (perftest's MTU
// exchange settles on the smaller of both sides').
func (p *Perf) SetPathMTU(m ib.MTU) { p.cfg.MTU = m }

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
		pa := &path{typ: p.cfg.QPType, mtu: p.cfg.MTU, sl: p.cfg.SL, gidIndex: p.cfg.GIDIndex, dgid: emu.GID(r.GID),
			localPSN: p.local[i].PSN, remotePSN: r.PSN, remoteQPN: r.QPN, timeout: p.cfg.QPTimeout, retry: 7,
			rnrRetry: 7, minRNR: minRNRTimer, rdAtomic: uint8(max(1, min(int(r.OutReads), p.cfg.OutReads))),
			destRdAtomic: uint8(max(1, p.cfg.OutReads))}
		if p.cfg.Resolver != nil {
			mac, err := p.cfg.Resolver.Resolve(context.Background(), pa.dgid.Addr())
			if err != nil {
				return fmt.Errorf("resolve %v: %w", pa.dgid, err)
			}
			pa.dmac = mac
		}
		if err := toRTS(qp, pa); err != nil {
			return err
		}
		if p.cfg.QPType == qpstate.TypeUD {
			av := pa.av()
			ah, err := p.pd.CreateAH(&av)
			if err != nil {
				return fmt.Errorf("Unable to create address handler for UD QP: %w", err)
			}
			p.ahs = append(p.ahs, ah)
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
	if p.cfg.QPType == qpstate.TypeUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.ahs[i], p.rem[i].QPN, perftestQKey
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
// which only waits for the report (unless Bidirectional: then both sides
// run the client's loop, and in send_bw perftest's run_iter_bi).
func (p *Perf) Run(size uint64) (PerfResult, error) {
	if size == 0 || size > p.cfg.MaxSize {
		return PerfResult{}, fmt.Errorf("perf: size %d not in 1..%d: %w", size, p.cfg.MaxSize, unix.EINVAL)
	}
	if p.rem == nil {
		return PerfResult{}, fmt.Errorf("perf: Run before Connect: %w", unix.EINVAL)
	}
	p.lastSize = size
	p.sent = make([]uint64, len(p.qps))
	if p.ring != nil {
		clear(p.rcount)
	}
	t := p.cfg.Test
	switch {
	case t.IsBW() && t.Verb() == oob.VerbSend && p.cfg.Bidirectional:
		return p.runBiSend(size)
	case t.IsBW() && p.sends():
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
		if total == 0 {
			return fmt.Sprintf("%s %s: %d completions so far", p.cfg.Test.Tool(), s, done)
		}
		return fmt.Sprintf("%s %s: %d of %d completions", p.cfg.Test.Tool(), s, done, total)
	}
}

// newSampler returns the duration alarm of a run, or nil in iterations
// mode.
func (p *Perf) newSampler() *sampler {
	if p.cfg.Duration == 0 {
		return nil
	}
	clk := p.cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	s := newSampler(clk, p.cfg.Duration, p.cfg.Margin)
	p.sampler.Store(s)
	return s
}

// Close destroys the side's objects.
func (p *Perf) Close() error {
	for _, q := range p.qps {
		q.Destroy()
	}
	p.qps = nil
	for _, ah := range p.ahs {
		ah.Destroy()
	}
	p.ahs = nil
	if p.srq != nil {
		p.srq.Destroy()
		p.srq = nil
	}
	for _, c := range []*cqWaiter{p.scq, p.rcq} {
		if c != nil {
			c.cq.Destroy()
		}
	}
	p.scq, p.rcq = nil, nil
	if p.ring != nil {
		p.ring.free(p.dev)
		p.ring = nil
	}
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
