package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// The work request IDs of the pingpong examples (PINGPONG_RECV_WRID,
// PINGPONG_SEND_WRID), which double as the pending bits of the main loop.
const (
	recvWRID = 1
	sendWRID = 2
)

// pingpongQKey is the Q_Key ud_pingpong uses on both sides.
const pingpongQKey = 0x11111111

// PingpongConfig configures one side of a pingpong run. Zero values take the
// tools' defaults (oob.PingpongDefaults) where one exists.
type PingpongConfig struct {
	// Mode is rc, uc, ud or srq; it must be valid.
	Mode oob.PingpongMode
	// Client marks the side given a server name: it sends first (and fills
	// the -c pattern).
	Client bool
	// Size is the message size (-s); 0 means the tool's default.
	Size uint32
	// Iters is the number of exchanges (-n); 0 means 1000. For srq it is
	// the total over all QPs, as srq_pingpong counts.
	Iters uint32
	// RxDepth is how many receives are kept posted (-r); 0 means 500.
	RxDepth uint32
	// NumQP is srq's number of QPs (-q); 0 means 16. Ignored by the other
	// modes.
	NumQP int
	// MTU is the path MTU (-m); 0 means IB_MTU_1024. ud uses none.
	MTU ib.MTU
	// SL is the service level (-l).
	SL uint8
	// Port is the device's port (-i); 0 means 1. A port the device does
	// not have fails as in the tools: ud's port query ("Unable to query
	// port info for port N"), the others' modify to INIT (the kernel's
	// ib_modify_qp refuses IB_QP_PORT with EINVAL).
	Port uint32
	// GIDIndex is the local GID index (-g). RoCE needs a GRH, so it must
	// name a GID of the device.
	GIDIndex int
	// Check fills (client) and validates (server) the -c pattern.
	Check bool
	// ODP registers the buffer with IB_ACCESS_ON_DEMAND (-o): its pages
	// are resolved when the device touches them.
	ODP bool
	// Fill, if set, writes the initial buffer content instead of the
	// tool's fill (0x7b; 0 for srq). ud's buffer starts with the 40 bytes
	// of GRH room: Fill sees the whole buffer.
	Fill func(buf []byte)
	// Timeout bounds every wait for a completion; 0 means DefaultTimeout.
	Timeout time.Duration
	// QPTimeout is the RC local ACK timeout exponent; 0 means 14 as the
	// tools set.
	QPTimeout uint8
	// Seed seeds the PSN generator (the tools' lrand48).
	Seed uint64
	// Resolver fills the destination MAC of the address vector, asked
	// with a background context (bound the wait in the Resolver); nil
	// leaves it to the device's neighbour table.
	Resolver emu.Resolver
	// MaxMemory caps the buffer NewPingpong allocates (Size, plus the GRH
	// room of ud); 0 means DefaultMaxMemory. A configuration over it, or
	// over the device's limits (max_qp_wr, max_srq_wr, max_cqe,
	// max_msg_sz), fails before anything is allocated.
	MaxMemory uint64
}

// Pingpong is one side of a pingpong run: its PD, CQ, QPs (one, or NumQP
// on one SRQ), buffer and receives.
type Pingpong struct {
	cfg   PingpongConfig
	dev   *emu.Device
	pd    *emu.PD
	cq    *cqWaiter
	srq   *emu.SRQ
	qps   []*emu.QP
	ah    *emu.AH
	buf   *buffer
	local []oob.PingpongDest
	rem   []oob.PingpongDest
	routs int
}

// PingpongResult is what a run measured and found.
type PingpongResult struct {
	Size, Iters uint32
	// Elapsed is the time of the main loop (gettimeofday around it).
	Elapsed time.Duration
	// Sent and Received count the completions seen.
	Sent, Received int
	// InvalidPages are the pages the -c check found wrong (server only).
	InvalidPages []int
}

// Lines returns the two result lines the tools print, plus an "invalid
// data in page N" line for each page the -c check found wrong.
func (r PingpongResult) Lines() string {
	s := oob.FormatPingpongResult(r.Size, r.Iters, r.Elapsed)
	for _, p := range r.InvalidPages {
		s += oob.FormatInvalidPage(p)
	}
	return s
}

// NewPingpong creates one side's objects on dev as pp_init_ctx does, moves
// the QPs to INIT and posts RxDepth receives (the tools do this before the
// address exchange).
func NewPingpong(dev *emu.Device, cfg PingpongConfig) (_ *Pingpong, err error) {
	if !cfg.Mode.IsValid() {
		return nil, fmt.Errorf("pingpong: invalid mode %d: %w", cfg.Mode, unix.EINVAL)
	}
	def := oob.PingpongDefaults(cfg.Mode)
	cfg.Size = orDefault(cfg.Size, def.Size)
	cfg.Iters = orDefault(cfg.Iters, def.Iters)
	cfg.RxDepth = orDefault(cfg.RxDepth, def.RxDepth)
	cfg.MTU = orDefault(cfg.MTU, ib.MTU1024)
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	cfg.QPTimeout = orDefault(cfg.QPTimeout, 14)
	cfg.Port = orDefault(cfg.Port, 1)
	nqp := 1
	if cfg.Mode == oob.PingpongSRQ {
		nqp = orDefault(cfg.NumQP, int(def.NumQP))
		if nqp < 1 || nqp >= oob.SRQMaxQP || uint32(nqp) > cfg.RxDepth {
			return nil, fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP: %w",
				cfg.RxDepth, nqp, unix.EINVAL)
		}
	}
	cfg.NumQP = nqp
	if err := cfg.checkLimits(dev, nqp); err != nil {
		return nil, err
	}
	p := &Pingpong{cfg: cfg, dev: dev}
	defer func() {
		if err != nil {
			p.Close() // p, not the nil result
		}
	}()
	if cfg.Mode == oob.PingpongUD {
		pa, err := dev.QueryPort(cfg.Port)
		if err != nil {
			return nil, fmt.Errorf("Unable to query port info for port %d: %w", cfg.Port, err)
		}
		if int(cfg.Size) > pa.ActiveMTU.Bytes() {
			return nil, fmt.Errorf("Requested size larger than port MTU (%d): %w", pa.ActiveMTU.Bytes(), unix.EINVAL)
		}
	}
	if p.pd, err = dev.AllocPD(0); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	bufLen := int(cfg.Size)
	if cfg.Mode == oob.PingpongUD {
		bufLen += emu.GRHSize
	}
	access := ib.AccessLocalWrite
	if cfg.ODP {
		access |= ib.AccessOnDemand
	}
	if p.buf, err = newBuffer(dev, p.pd, bufLen, access); err != nil {
		return nil, err
	}
	p.buf.b = p.buf.b[:bufLen]
	switch {
	case cfg.Fill != nil:
		cfg.Fill(p.buf.b)
	case cfg.Mode != oob.PingpongSRQ:
		for i := range p.buf.b {
			p.buf.b[i] = oob.PingpongFill
		}
	}
	if cfg.Client && cfg.Check {
		data := p.buf.b
		if cfg.Mode == oob.PingpongUD {
			data = data[emu.GRHSize:]
		}
		oob.FillCheckPattern(data, pageSize)
	}
	if p.cq, err = newCQ(dev, int(cfg.RxDepth)+nqp); err != nil {
		return nil, err
	}
	typ := qpstate.TypeRC
	switch cfg.Mode {
	case oob.PingpongUC:
		typ = qpstate.TypeUC
	case oob.PingpongUD:
		typ = qpstate.TypeUD
	case oob.PingpongSRQ:
		sa := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: cfg.RxDepth, MaxSGE: 1}}
		if p.srq, err = p.pd.CreateSRQ(sa); err != nil {
			return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d))
	gid, err := localGID(dev, cfg.GIDIndex)
	if err != nil {
		return nil, err
	}
	for range nqp {
		init := &emu.QPInitAttr{SendCQ: p.cq.cq, RecvCQ: p.cq.cq, SRQ: p.srq, QPType: typ, SQSigType: emu.SignalReqWR,
			Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}
		if p.srq != nil {
			init.Cap.MaxRecvWR = 0
		}
		qp, err := p.pd.CreateQP(init)
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		p.qps = append(p.qps, qp)
		if err := toInit(qp, cfg.Port, 0, pingpongQKey); err != nil {
			return nil, err
		}
		p.local = append(p.local, oob.PingpongDest{QPN: qp.QPNum(), PSN: rng.Uint32() & ib.PSNMask, GID: gid})
	}
	if n := p.postRecv(int(cfg.RxDepth)); n < int(cfg.RxDepth) {
		return nil, fmt.Errorf("Couldn't post receive (%d): %w", n, unix.ENOMEM)
	}
	p.routs = int(cfg.RxDepth)
	return p, nil
}

// pageSize is sysconf(_SC_PAGESIZE) on the machines the tools run on.
const pageSize = 4096

// Local returns the addresses to send to the peer (one per QP).
func (p *Pingpong) Local() []oob.PingpongDest { return p.local }

// Buffer returns the buffer the side sends from and receives into (for
// ud, with the 40 bytes of GRH room in front).
func (p *Pingpong) Buffer() []byte { return p.buf.b }

// Data returns the message part of the buffer: all of it, or ud's bytes
// after the GRH room.
func (p *Pingpong) Data() []byte {
	if p.cfg.Mode == oob.PingpongUD {
		return p.buf.b[emu.GRHSize:]
	}
	return p.buf.b
}

// Connect moves the QPs to RTR and RTS towards the peer's addresses
// (pp_connect_ctx) and, for ud, creates the address handle. The server
// calls it before it answers the exchange, the client after.
func (p *Pingpong) Connect(remote []oob.PingpongDest) error {
	if len(remote) < len(p.qps) {
		return fmt.Errorf("pingpong: %d remote addresses for %d QPs: %w", len(remote), len(p.qps), unix.EINVAL)
	}
	p.rem = remote
	for i, qp := range p.qps {
		r := remote[i]
		pa := &path{typ: qp.QPType, mtu: p.cfg.MTU, sl: p.cfg.SL, gidIndex: p.cfg.GIDIndex, dgid: emu.GID(r.GID),
			localPSN: p.local[i].PSN, remotePSN: r.PSN, remoteQPN: r.QPN, timeout: p.cfg.QPTimeout, retry: 7,
			rnrRetry: 7, minRNR: 12, rdAtomic: 1, destRdAtomic: 1, hopLimit: 1}
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
		if qp.QPType == qpstate.TypeUD {
			av := pa.av()
			ah, err := p.pd.CreateAH(&av)
			if err != nil {
				return fmt.Errorf("Failed to create AH: %w", err)
			}
			p.ah = ah
		}
	}
	return nil
}

// postRecv posts n receives (pp_post_recv) and returns how many it posted.
func (p *Pingpong) postRecv(n int) int {
	sge := []emu.SGE{p.buf.sge(0, len(p.buf.b))}
	wr := []emu.RecvWR{{WRID: recvWRID, SGList: sge}}
	for i := range n {
		var err error
		if p.srq != nil {
			_, err = p.srq.PostRecv(wr)
		} else {
			_, err = p.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend posts one signaled SEND on QP i (pp_post_send).
func (p *Pingpong) postSend(i int) error {
	wr := emu.SendWR{WRID: sendWRID, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{p.buf.sge(0, int(p.cfg.Size))}}
	if p.cfg.Mode == oob.PingpongUD {
		wr.SGList[0] = p.buf.sge(emu.GRHSize, int(p.cfg.Size))
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.ah, p.rem[i].QPN, pingpongQKey
	}
	if _, err := p.qps[i].PostSend([]emu.SendWR{wr}); err != nil {
		return fmt.Errorf("Couldn't post send: %w", err)
	}
	return nil
}

// Run is the tools' main loop: the client sends first; each side posts its
// next send on a QP once that QP's previous send and a receive have
// completed, until Iters sends and Iters receives have completed. Receives
// are replenished when the posted count falls to 1 (srq: to the number of
// QPs). A failed completion, a failed post or a wait longer than
// Config.Timeout ends the run with an error.
func (p *Pingpong) Run() (PingpongResult, error) {
	cfg := p.cfg
	res := PingpongResult{Size: cfg.Size, Iters: cfg.Iters}
	pending := make([]int, len(p.qps))
	for i := range p.qps {
		pending[i] = recvWRID
		if cfg.Client {
			if err := p.postSend(i); err != nil {
				return res, err
			}
			pending[i] |= sendWRID
		}
	}
	low := 1
	if p.srq != nil {
		low = len(p.qps)
	}
	iters := int(cfg.Iters)
	wc := make([]emu.WC, cfg.RxDepth+uint32(len(p.qps)))
	what := func() string {
		return fmt.Sprintf("%s pingpong: %d of %d receives and %d of %d sends completed", cfg.Mode,
			res.Received, iters, res.Sent, iters)
	}
	start := time.Now()
	for res.Received < iters || res.Sent < iters {
		n, err := p.cq.wait(wc, cfg.Timeout, what)
		if err != nil {
			return res, err
		}
		for j := range wc[:n] {
			w := &wc[j]
			if w.Status != emu.WCSuccess {
				return res, wcError(w)
			}
			qi := p.qpIndex(w.QP)
			if qi < 0 {
				return res, fmt.Errorf("Couldn't find QPN %06x: %w", qpNum(w.QP), unix.EPROTO)
			}
			switch w.WRID {
			case sendWRID:
				res.Sent++
			case recvWRID:
				if p.routs--; p.routs <= low {
					p.routs += p.postRecv(int(cfg.RxDepth) - p.routs)
					if p.routs < int(cfg.RxDepth) {
						return res, fmt.Errorf("Couldn't post receive (%d): %w", p.routs, unix.ENOMEM)
					}
				}
				res.Received++
			default:
				return res, fmt.Errorf("Completion for unknown wr_id %d: %w", w.WRID, unix.EPROTO)
			}
			pending[qi] &^= int(w.WRID)
			if res.Sent < iters && pending[qi] == 0 {
				if err := p.postSend(qi); err != nil {
					return res, err
				}
				pending[qi] = recvWRID | sendWRID
			}
		}
	}
	res.Elapsed = time.Since(start)
	if !cfg.Client && cfg.Check {
		res.InvalidPages = oob.CheckPattern(p.Data(), pageSize)
	}
	return res, nil
}

func qpNum(q *emu.QP) uint32 {
	if q == nil {
		return 0
	}
	return q.QPNum()
}

func (p *Pingpong) qpIndex(q *emu.QP) int {
	for i, x := range p.qps {
		if x == q {
			return i
		}
	}
	return -1
}

// Stop moves every QP to ERR (IB_QPS_ERR, mask IB_QP_STATE), flushing
// what is still posted: from then on the device writes nothing more into
// the buffer. srq_pingpong's QPs can have a send in flight when the loop
// ends (each QP posts while fewer than Iters sends completed in total), so
// compare buffers only after both sides stopped.
func (p *Pingpong) Stop() error {
	for _, q := range p.qps {
		a := qpstate.Attr{QPState: qpstate.StateErr}
		if err := q.Modify(&a, qpstate.AttrState); err != nil {
			return fmt.Errorf("Failed to modify QP to ERR: %w", err)
		}
	}
	return nil
}

// Close destroys the side's objects (pp_close_ctx).
func (p *Pingpong) Close() error {
	for _, q := range p.qps {
		q.Destroy()
	}
	p.qps = nil
	if p.ah != nil {
		p.ah.Destroy()
		p.ah = nil
	}
	if p.srq != nil {
		p.srq.Destroy()
		p.srq = nil
	}
	if p.cq != nil {
		p.cq.cq.Destroy()
		p.cq = nil
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
