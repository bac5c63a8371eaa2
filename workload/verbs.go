package workload

import (
	"fmt"
	"runtime"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// DefaultTimeout is how long a wait for a completion (or, in write_lat, for
// the peer's write) may last when a Config leaves Timeout zero.
const DefaultTimeout = 10 * time.Second

// cqWaiter is a CQ with the completion-notification plumbing a waiting
// consumer needs: the handler signals a channel, and wait polls, arms,
// sleeps.
type cqWaiter struct {
	cq     *emu.CQ
	notify chan struct{}
	// spins is how many empty polls a wait makes before it arms the CQ
	// and sleeps: spinPolls, or 0 to sleep on the completion handler at
	// once (perftest's -e, ibv_get_cq_event on a completion channel).
	spins int
}

func newCQ(dev *emu.Device, n int) (*cqWaiter, error) {
	w := &cqWaiter{notify: make(chan struct{}, 1), spins: spinPolls}
	cq, err := dev.CreateCQ(emu.CQInitAttr{CQE: n, CompHandler: func(*emu.CQ) {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("create CQ of %d entries: %w", n, err)
	}
	w.cq = cq
	return w, nil
}

// spinPolls is how many empty polls (yielding between them) a wait makes
// before it arms the CQ and sleeps: a completion that is microseconds away
// is seen without a wake-up.
const spinPolls = 64

// wait returns at least one completion, or an error wrapping ETIMEDOUT when
// none came within timeout. what describes the wait for the message.
func (w *cqWaiter) wait(wc []emu.WC, timeout time.Duration, what func() string) (int, error) {
	return w.waitOr(wc, timeout, what, nil)
}

// waitOr is wait that also returns, with no completion and no error, once
// stop is closed (the end of a duration run); a nil stop never closes.
func (w *cqWaiter) waitOr(wc []emu.WC, timeout time.Duration, what func() string, stop <-chan struct{}) (int, error) {
	if n := w.cq.Poll(wc); n > 0 {
		return n, nil
	}
	for range w.spins {
		runtime.Gosched()
		if n := w.cq.Poll(wc); n > 0 {
			return n, nil
		}
		if closed(stop) {
			return 0, nil
		}
	}
	deadline := time.Now().Add(timeout)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Arm, then poll once more: a completion that arrived between
		// the last poll and the arming is reported as missed
		// (ib_req_notify_cq with IB_CQ_REPORT_MISSED_EVENTS).
		w.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
		if n := w.cq.Poll(wc); n > 0 {
			return n, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("%s: no completion in %v: %w", what(), timeout, unix.ETIMEDOUT)
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-w.notify:
		case <-timer.C:
		case <-stop:
			return w.cq.Poll(wc), nil
		}
	}
}

// closed reports whether c is closed (never for nil).
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// WCError is a work completion with an error status, which ends a run as
// it ends the real tools; its text is the real tool's. errors.Is(err,
// unix.EIO) holds for it.
type WCError struct {
	Status emu.WCStatus
	WRID   uint64
	// Recv marks a receive completion (perftest reports those "at server").
	Recv bool
	// Perftest selects perftest's text instead of the pingpongs'.
	Perftest bool
}

// Error is the text the tool prints for the completion. The pingpongs
// (rc_pingpong.c's parse_single_wc and its siblings) print libibverbs'
// ibv_wc_status_str text: "Failed status Work Request Flushed Error (5)
// for wr_id 1". perftest (NOTIFY_COMP_ERROR_SEND / _RECV, without their
// counter line) prints the number and, for sends, the syndrome
// (vendor_err, 0 from rxe): " Completion with error at client\n Failed
// status 5: wr_id 1 syndrom 0x0".
func (e *WCError) Error() string {
	switch {
	case e.Perftest && e.Recv:
		return fmt.Sprintf(" Completion with error at server\n Failed status %d: wr_id %d", int(e.Status), int(e.WRID))
	case e.Perftest:
		return fmt.Sprintf(" Completion with error at client\n Failed status %d: wr_id %d syndrom 0x0", int(e.Status), int(e.WRID))
	}
	return fmt.Sprintf("Failed status %s (%d) for wr_id %d", oob.WCStatusStr(int(e.Status)), int(e.Status), int(e.WRID))
}

// Unwrap returns unix.EIO.
func (e *WCError) Unwrap() error { return unix.EIO }

// wcError returns the *WCError of a failed completion of a pingpong.
func wcError(wc *emu.WC) error {
	return &WCError{Status: wc.Status, WRID: wc.WRID, Recv: wc.Opcode&emu.WCRecv != 0}
}

// perfWCError returns the *WCError of a failed completion of a perftest
// run.
func perfWCError(wc *emu.WC) error {
	return &WCError{Status: wc.Status, WRID: wc.WRID, Recv: wc.Opcode&emu.WCRecv != 0, Perftest: true}
}

// path is what connects a local QP to a remote one.
type path struct {
	typ             qpstate.Type
	mtu             ib.MTU
	sl              uint8
	gidIndex        int
	dgid            emu.GID
	dmac            [6]byte
	localPSN        uint32
	remotePSN       uint32
	remoteQPN       uint32
	timeout         uint8
	retry, rnrRetry uint8
	minRNR          uint8
	rdAtomic        uint8
	destRdAtomic    uint8
	hopLimit        uint8
	access          ib.AccessFlags
	qkey            uint32
}

// toInit moves a new QP from RESET to INIT with the masks ib_modify_qp
// requires for its type: PKEY_INDEX|PORT plus ACCESS_FLAGS (RC, UC) or
// QKEY (UD), on the device's port.
func toInit(qp *emu.QP, port uint32, access ib.AccessFlags, qkey uint32) error {
	a := qpstate.Attr{QPState: qpstate.StateInit, PortNum: port, QPAccessFlags: access, QKey: qkey}
	m := qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort
	if qp.QPType == qpstate.TypeUD {
		m |= qpstate.AttrQKey
	} else {
		m |= qpstate.AttrAccessFlags
	}
	if err := qp.Modify(&a, m); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// av is the RoCEv2 address vector of p.
func (p *path) av() ib.AHAttr {
	hop := p.hopLimit
	if hop == 0 {
		hop = 64
	}
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, SL: p.sl, AHFlags: ib.AHGRH, DMAC: p.dmac,
		GRH: ib.GlobalRoute{DGID: p.dgid, SGIDIndex: uint8(p.gidIndex), HopLimit: hop}}
}

// toRTS moves an INIT QP to RTR and RTS as pp_connect_ctx and perftest's
// ctx_modify_qp_to_rtr/rts do, with the masks of ib_modify_qp's table:
// RC adds AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER at RTR
// and TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC at RTS; UC the first four
// at RTR; UD only the state (and SQ_PSN at RTS, like every type).
func toRTS(qp *emu.QP, p *path) error {
	rtr := qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: p.mtu, DestQPNum: p.remoteQPN, RQPSN: p.remotePSN,
		MaxDestRdAtomic: p.destRdAtomic, MinRNRTimer: p.minRNR, AHAttr: p.av()}
	m := qpstate.AttrState
	switch qp.QPType {
	case qpstate.TypeRC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
			qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
	case qpstate.TypeUC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN
	}
	if err := qp.Modify(&rtr, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	rts := qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: p.localPSN, Timeout: p.timeout, RetryCnt: p.retry,
		RNRRetry: p.rnrRetry, MaxRdAtomic: p.rdAtomic}
	m = qpstate.AttrState | qpstate.AttrSQPSN
	if qp.QPType == qpstate.TypeRC {
		m |= qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
	}
	if err := qp.Modify(&rts, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// localGID returns the GID at index idx of port 1.
func localGID(dev *emu.Device, idx int) (emu.GID, error) {
	e, err := dev.QueryGID(1, idx)
	if err != nil {
		return emu.GID{}, fmt.Errorf("Could not get local gid for gid index %d: %w", idx, err)
	}
	return e.GID, nil
}

// buffer is registered emulated memory.
type buffer struct {
	addr uint64
	b    []byte
	mr   *emu.MR
}

func newBuffer(dev *emu.Device, pd *emu.PD, n int, access ib.AccessFlags) (*buffer, error) {
	addr, b := dev.Memory().Alloc(max(n, 8))
	mr, err := pd.RegUserMR(addr, uint64(len(b)), addr, access)
	if err != nil {
		dev.Memory().Free(addr)
		return nil, fmt.Errorf("Couldn't register MR of %d bytes: %w", n, err)
	}
	return &buffer{addr: addr, b: b, mr: mr}, nil
}

func (b *buffer) free(dev *emu.Device) {
	if b == nil {
		return
	}
	b.mr.Dereg()
	dev.Memory().Free(b.addr)
}

func (b *buffer) sge(off, n int) emu.SGE {
	return emu.SGE{Addr: b.addr + uint64(off), Length: uint32(n), LKey: b.mr.LKey()}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
