package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Param is what a consumer says about a connection (struct
// rdma_conn_param): the RDMA READ and atomic depths in each direction,
// the RC retry counts, and private data.
type Param struct {
	ResponderResources uint8 // READs/atomics the peer may have outstanding at us
	InitiatorDepth     uint8 // READs/atomics we may have outstanding at the peer
	RetryCount         uint8 // RC transport retries (3 bits)
	RNRRetryCount      uint8 // RNR retries (3 bits; 7 is infinite)
	PrivateData        []byte
}

// State is a connection's state (a subset of the kernel's ib_cm_state).
type State int

// Connection states.
const (
	StateIdle State = iota
	StateREQSent
	StateREQRcvd
	StateREPSent
	StateEstablished
	StateDREQSent
	StateTimeWait
	StateClosed
)

func (s State) String() string {
	return [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "REP_SENT", "ESTABLISHED", "DREQ_SENT", "TIMEWAIT", "CLOSED"}[s]
}

// RejectError is the error of a connection the peer rejected (rping's
// "cma event RDMA_CM_EVENT_REJECTED, error 8"). errors.Is(err,
// unix.ECONNREFUSED) holds for it.
type RejectError struct {
	Reason      mad.RejReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rdmacm: rejected: %v (%d)", e.Reason, uint16(e.Reason))
}

// Unwrap returns unix.ECONNREFUSED.
func (e *RejectError) Unwrap() error { return unix.ECONNREFUSED }

// Conn is one RC connection managed by a CM.
type Conn struct {
	cm      *CM
	qp      *emu.QP
	active  bool
	tid     uint64
	localID uint32
	peerGID emu.GID
	gidIdx  int

	mu         sync.Mutex
	state      State
	remoteID   uint32
	remoteGUID uint64
	remoteQPN  uint32
	req, rep   mad.MAD // the REQ and the REP (ours or the peer's)
	last       mad.MAD // the message the timer resends
	tries      int
	maxTries   int           // retransmissions before giving up (max_cm_retries)
	timeout    time.Duration // the connection's wait per try (cm_id_priv->timeout_ms)
	interval   time.Duration // the pending message's wait per try: timeout, or an MRA's
	mraRcvd    bool          // the pending message was acknowledged by an MRA
	mraSent    bool          // we sent an MRA for the peer's REQ (MRA_REQ_SENT)
	timer      clock.Timer
	param      Param
	peerParam  Param // the peer's depths and retries from its REQ or REP
	peerPD     []byte
	result     chan error // the pending Connect/Accept/Disconnect
	done       chan struct{}
	doneOnce   sync.Once
	err        error
}

// QP returns the connection's data QP.
func (cn *Conn) QP() *emu.QP { return cn.qp }

// State returns the connection's state.
func (cn *Conn) State() State { cn.mu.Lock(); defer cn.mu.Unlock(); return cn.state }

// RemoteQPN returns the peer's QP number.
func (cn *Conn) RemoteQPN() uint32 { cn.mu.Lock(); defer cn.mu.Unlock(); return cn.remoteQPN }

// PeerParam returns the depths, retry counts and private data the peer
// sent in its REQ or REP.
func (cn *Conn) PeerParam() Param {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	p := cn.peerParam
	p.PrivateData = cn.peerPD
	return p
}

// Done is closed once the connection is over: the peer disconnected (its
// DREQ answered), Disconnect finished, or the CM closed. Err says why.
func (cn *Conn) Done() <-chan struct{} { return cn.done }

// Err returns nil while the connection is up, then why it ended
// (ECONNRESET for the peer's DREQ).
func (cn *Conn) Err() error { cn.mu.Lock(); defer cn.mu.Unlock(); return cn.err }

// Connect is rdma_connect on a route to dst:port: qp (an RC QP in RESET
// or INIT) is connected to the peer's listener, and the Conn returned
// once the REP came and the RTU was sent. A REJ fails it with a
// *RejectError; ctx ending or the retries running out (ETIMEDOUT) fail it
// too. Private data beyond the 56 bytes a REQ leaves after the rdma_cm
// header is EINVAL (mad.CheckPrivateData).
func (c *CM) Connect(ctx context.Context, qp *emu.QP, dst netip.Addr, port uint16, p Param) (*Conn, error) {
	if qp.QPType != qpstate.TypeRC {
		return nil, fmt.Errorf("rdmacm: connect: QP type %v, want RC: %w", qp.QPType, unix.EINVAL)
	}
	if err := mad.CheckPrivateData(mad.AttrREQ, len(p.PrivateData), true); err != nil {
		return nil, fmt.Errorf("rdmacm: connect: %w", err)
	}
	dgid := emu.GIDFromAddr(dst)
	gidIdx, sgid, err := c.localGIDFor(dgid)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: connect: %w", err)
	}
	if _, err := c.ah(dgid); err != nil { // resolve the peer before the REQ
		return nil, fmt.Errorf("rdmacm: connect: %w", err)
	}
	if err := toInit(qp, p.ResponderResources); err != nil {
		return nil, fmt.Errorf("rdmacm: connect: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("rdmacm: connect: %w", unix.ECONNABORTED)
	}
	cn := &Conn{cm: c, qp: qp, active: true, localID: c.newIDLocked(), peerGID: dgid, gidIdx: gidIdx,
		state: StateREQSent, param: p, result: make(chan error, 1), done: make(chan struct{}),
		timeout: c.timeoutOr(REQTimeout), maxTries: c.cfg.MaxRetries}
	cn.tid = c.rnd.Uint64() & 0xffffffff
	psn := c.psnLocked()
	srcPort := uint16(c.rnd.IntN(0x4000)) + 0xc000 // an ephemeral port, as the kernel's rdma_bind_addr picks
	c.conns[cn.localID] = cn
	c.mu.Unlock()

	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: srcPort,
		Src: netip.AddrFrom16(sgid).Unmap(), Dst: dst})
	copy(pd[mad.CMAHeaderSize:], p.PrivateData)
	req := mad.NewCM(mad.AttrREQ, cn.tid)
	mtu := c.ports.activeMTU
	mad.REQ(req).Encode(&mad.REQFields{LocalCommID: cn.localID, ServiceID: mad.ServiceID(mad.PortSpaceTCP, port),
		LocalCAGUID: c.guid, LocalQPN: qp.QPNum(), ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, RemoteCMResponseTimeout: cmResponseTimeout, TransportServiceType: mad.TransportRC,
		StartingPSN: psn, LocalCMResponseTimeout: cmResponseTimeout, RetryCount: p.RetryCount, PartitionKey: 0xffff,
		PathMTU: uint8(mtu), RNRRetryCount: p.RNRRetryCount, MaxCMRetries: uint8(min(c.cfg.MaxRetries, 15)),
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff, PrimaryLocalGID: sgid, PrimaryRemoteGID: dgid,
		PrimaryHopLimit: 64, PrimaryLocalACKTimeout: packetLifeTime + 1, PrivateData: pd})
	cn.mu.Lock()
	cn.req = req
	cn.sendLocked(req)
	cn.mu.Unlock()
	if err := cn.wait(ctx); err != nil {
		c.forget(cn)
		return nil, fmt.Errorf("rdmacm: connect to %v port %d: %w", dst, port, err)
	}
	return cn, nil
}

// wait waits for the pending operation's result.
func (cn *Conn) wait(ctx context.Context) error {
	select {
	case err := <-cn.result:
		return err
	case <-ctx.Done():
		cn.mu.Lock()
		cn.stopTimerLocked()
		cn.mu.Unlock()
		return ctx.Err()
	}
}

func (cn *Conn) complete(err error) {
	select {
	case cn.result <- err:
	default:
	}
}

// sendLocked sends m and arms the retransmission timer for it.
func (cn *Conn) sendLocked(m mad.MAD) {
	cn.last, cn.tries, cn.interval, cn.mraRcvd = m, 0, cn.timeout, false
	cn.cm.send(cn.peerGID, m)
	cn.armLocked()
}

func (cn *Conn) armLocked() {
	cn.stopTimerLocked()
	cn.timer = cn.cm.clk.AfterFunc(cn.interval, cn.retransmit)
}

// timeoutOr is Config.RetryInterval if set, else the kernel's time d.
func (c *CM) timeoutOr(d time.Duration) time.Duration {
	if c.cfg.RetryInterval != 0 {
		return c.cfg.RetryInterval
	}
	return d
}

// CMTimeout converts a 5-bit IBA time (4.096 µs × 2^t) to the duration
// the kernel's cm waits for it: 2^(t−8) ms, at least 1 ms
// (cm_convert_to_ms).
func CMTimeout(t uint8) time.Duration {
	return time.Millisecond << max(int(t&0x1f)-8, 0)
}

func (cn *Conn) stopTimerLocked() {
	if cn.timer != nil {
		cn.timer.Stop()
		cn.timer = nil
	}
}

// retransmit is the timer: send the last message again, or give up.
func (cn *Conn) retransmit() {
	cn.mu.Lock()
	if cn.last == nil {
		cn.mu.Unlock()
		return
	}
	if cn.tries >= cn.maxTries {
		st := cn.state
		err := fmt.Errorf("no answer to %v after %d retries: %w", cn.last.AttributeID(), cn.maxTries, unix.ETIMEDOUT)
		cn.last, cn.timer = nil, nil
		cn.mu.Unlock()
		if st == StateDREQSent {
			// The kernel's cm gives up waiting for the DREP and goes
			// to TIMEWAIT: the disconnect succeeds.
			cn.finish(StateTimeWait, unix.ENOTCONN)
			cn.complete(nil)
			return
		}
		cn.finish(StateClosed, err)
		cn.complete(err)
		return
	}
	cn.tries++
	cn.cm.stats.retries.Add(1)
	m := cn.last
	cn.cm.send(cn.peerGID, m)
	cn.timer = cn.cm.clk.AfterFunc(cn.interval, cn.retransmit)
	cn.mu.Unlock()
}

// finish ends the connection with err.
func (cn *Conn) finish(st State, err error) {
	cn.mu.Lock()
	cn.state = st
	cn.stopTimerLocked()
	if cn.err == nil {
		cn.err = err
	}
	cn.mu.Unlock()
	cn.doneOnce.Do(func() { close(cn.done) })
}

func (cn *Conn) fail(err error) {
	cn.finish(StateClosed, err)
	cn.complete(err)
}

func (c *CM) forget(cn *Conn) {
	c.mu.Lock()
	if c.conns[cn.localID] == cn {
		delete(c.conns, cn.localID)
	}
	if k := (remoteKey{cn.remoteGUID, cn.remoteID}); !cn.active && c.remote[k] == cn {
		delete(c.remote, k)
	}
	c.mu.Unlock()
}

// handle is a MAD addressed to this connection.
func (cn *Conn) handle(m mad.MAD) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if m.TransactionID() != cn.tid && m.AttributeID() != mad.AttrDREQ && m.AttributeID() != mad.AttrDREP {
		return
	}
	switch m.AttributeID() {
	case mad.AttrREP:
		cn.onREPLocked(m)
	case mad.AttrRTU:
		if cn.state == StateREPSent {
			cn.stopTimerLocked()
			cn.last = nil
			cn.state = StateEstablished
			err := toRTS(cn.qp, cn.rtsAttrLocked())
			cn.mu.Unlock()
			cn.complete(err)
			cn.mu.Lock()
		}
	case mad.AttrREJ:
		if cn.state == StateREQSent || cn.state == StateREPSent {
			r := mad.REJ(m).Fields()
			cn.stopTimerLocked()
			cn.last = nil
			cn.state = StateClosed
			err := &RejectError{Reason: r.Reason, PrivateData: append([]byte(nil), r.PrivateData...)}
			cn.mu.Unlock()
			cn.fail(err)
			cn.mu.Lock()
		}
	case mad.AttrDREQ:
		cn.onDREQLocked(m)
	case mad.AttrDREP:
		if cn.state == StateDREQSent {
			cn.stopTimerLocked()
			cn.last = nil
			cn.mu.Unlock()
			cn.finish(StateTimeWait, unix.ENOTCONN)
			cn.complete(nil)
			cn.mu.Lock()
		}
	case mad.AttrMRA:
		cn.onMRALocked(mad.MRA(m).Fields())
	}
}

// onMRALocked: the peer acknowledged our REQ (or REP) and says its
// answer will take longer. As cm_mra_handler, the pending message then
// waits its service timeout plus the path's ACK timeout (2^(19−8) ms) per
// try, for the tries it has left; an MRA of another message, or a second
// one, changes nothing.
func (cn *Conn) onMRALocked(f mad.MRAFields) {
	want := mad.MsgREQ
	switch cn.state {
	case StateREQSent:
	case StateREPSent:
		want = mad.MsgREP
	default:
		cn.cm.stats.duplicates.Add(1)
		return
	}
	if f.MessageMRAed != want || cn.last == nil {
		return
	}
	if cn.mraRcvd {
		cn.cm.stats.duplicates.Add(1)
		return
	}
	cn.mraRcvd = true
	cn.interval = CMTimeout(f.ServiceTimeout) + CMTimeout(packetLifeTime+1)
	cn.armLocked()
}

// onREPLocked: the active side's REP (or a duplicate of it).
func (cn *Conn) onREPLocked(m mad.MAD) {
	switch cn.state {
	case StateEstablished:
		// Our RTU was lost: send it again (cm_dup_rep_handler).
		cn.cm.stats.duplicates.Add(1)
		cn.cm.send(cn.peerGID, buildRTU(cn.tid, cn.localID, cn.remoteID))
		return
	case StateREQSent:
	default:
		return
	}
	r := mad.REP(m).Fields()
	cn.stopTimerLocked()
	cn.last = nil
	cn.rep = m
	cn.remoteID, cn.remoteQPN = r.LocalCommID, r.LocalQPN
	cn.peerParam = Param{ResponderResources: r.ResponderResources, InitiatorDepth: r.InitiatorDepth, RNRRetryCount: r.RNRRetryCount}
	cn.peerPD = append([]byte(nil), r.PrivateData...)
	req := mad.REQ(cn.req)
	// cm_rep_handler: our initiator depth is what the peer grants as
	// responder, our responder resources what it initiates.
	// Each side's Starting PSN is the one it receives with: rdma_cm
	// sets rq_psn to its own seq_num, the PSN it put in its REQ or REP
	// (rdma_init_qp_attr), and the peer sends from it.
	a := connAttr{mtu: ib.MTU(req.PathMTU()), destQPN: r.LocalQPN, rqPSN: req.StartingPSN(), sqPSN: r.StartingPSN,
		maxDestRdAtomic: min(cn.param.ResponderResources, r.InitiatorDepth), maxRdAtomic: min(cn.param.InitiatorDepth, r.ResponderResources),
		timeout: req.PrimaryLocalACKTimeout(), retry: req.RetryCount(), rnrRetry: r.RNRRetryCount}
	err := cn.cm.toRTR(cn.qp, cn.peerGID, cn.gidIdx, &a)
	if err == nil {
		err = toRTS(cn.qp, &a)
	}
	if err != nil {
		// cma sends a REJ when the consumer cannot use the REP.
		rej := mad.NewCM(mad.AttrREJ, cn.tid)
		mad.REJ(rej).Encode(&mad.REJFields{LocalCommID: cn.localID, RemoteCommID: cn.remoteID, MessageREJected: mad.MsgREP, Reason: mad.RejConsumerDefined})
		cn.cm.send(cn.peerGID, rej)
		cn.mu.Unlock()
		cn.fail(err)
		cn.mu.Lock()
		return
	}
	cn.state = StateEstablished
	cn.cm.send(cn.peerGID, buildRTU(cn.tid, cn.localID, cn.remoteID))
	cn.mu.Unlock()
	cn.complete(nil)
	cn.mu.Lock()
}

// onDREQLocked: the peer disconnects. Answer with a DREP (again for a
// duplicate), move the QP to ERR, end the connection.
func (cn *Conn) onDREQLocked(m mad.MAD) {
	f := mad.DREQ(m).Fields()
	// cm_dreq_handler drops a DREQ from another connection or for
	// another QP (the Remote QPN must be ours).
	if f.LocalCommID != cn.remoteID || cn.qp == nil || f.RemoteQPN != cn.qp.QPNum() {
		return
	}
	cn.cm.send(cn.peerGID, buildDREP(m.TransactionID(), cn.localID, cn.remoteID))
	switch cn.state {
	case StateEstablished, StateREPSent, StateDREQSent:
	default:
		cn.cm.stats.duplicates.Add(1)
		return
	}
	wasDREQSent := cn.state == StateDREQSent
	cn.stopTimerLocked()
	cn.last = nil
	cn.mu.Unlock()
	toErr(cn.qp)
	cn.finish(StateTimeWait, fmt.Errorf("rdmacm: disconnected by the peer: %w", unix.ECONNRESET))
	if wasDREQSent {
		cn.complete(nil) // both sides disconnected at once
	} else {
		cn.complete(fmt.Errorf("rdmacm: disconnected by the peer: %w", unix.ECONNRESET))
	}
	cn.mu.Lock()
}

// Disconnect is rdma_disconnect: the QP goes to ERR (its outstanding
// work completes flushed), a DREQ goes to the peer, and Disconnect
// returns once the DREP came (or the retries ran out, which the kernel
// treats as done too). Disconnecting a connection the peer already
// disconnected returns nil at once.
func (cn *Conn) Disconnect(ctx context.Context) error {
	cn.mu.Lock()
	if cn.state != StateEstablished {
		cn.mu.Unlock()
		return nil
	}
	cn.state = StateDREQSent
	cn.mu.Unlock()
	toErr(cn.qp)
	cn.mu.Lock()
	d := mad.NewCM(mad.AttrDREQ, cn.tid)
	mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: cn.localID, RemoteCommID: cn.remoteID, RemoteQPN: cn.remoteQPN})
	cn.sendLocked(d)
	cn.mu.Unlock()
	err := cn.wait(ctx)
	cn.finish(StateTimeWait, unix.ENOTCONN)
	cn.cm.forget(cn)
	if errors.Is(err, unix.ECONNRESET) {
		err = nil
	}
	return err
}

func buildRTU(tid uint64, local, remote uint32) mad.MAD {
	m := mad.NewCM(mad.AttrRTU, tid)
	mad.RTU(m).Encode(&mad.CommIDs{LocalCommID: local, RemoteCommID: remote})
	return m
}

func buildDREP(tid uint64, local, remote uint32) mad.MAD {
	m := mad.NewCM(mad.AttrDREP, tid)
	mad.DREP(m).Encode(&mad.CommIDs{LocalCommID: local, RemoteCommID: remote})
	return m
}

// connAttr is what the CM gives the QP at RTR and RTS
// (cm_init_qp_rtr_attr, cm_init_qp_rts_attr).
type connAttr struct {
	mtu                          ib.MTU
	destQPN, rqPSN, sqPSN        uint32
	maxDestRdAtomic, maxRdAtomic uint8
	timeout, retry, rnrRetry     uint8
}

func (cn *Conn) rtsAttrLocked() *connAttr {
	req := mad.REQ(cn.req)
	rep := mad.REP(cn.rep)
	return &connAttr{sqPSN: req.StartingPSN(), maxRdAtomic: rep.Fields().InitiatorDepth, timeout: req.PrimaryLocalACKTimeout(),
		retry: req.RetryCount(), rnrRetry: req.RNRRetryCount()}
}

// InitQP moves an RC QP from RESET to INIT as rdma_create_qp does for a
// connected rdma_cm ID, so that receives can be posted before Connect or
// Accept (which leave a QP already in INIT there). p's responder
// resources decide whether remote reads and atomics are allowed.
func InitQP(qp *emu.QP, p Param) error {
	if err := toInit(qp, p.ResponderResources); err != nil {
		return fmt.Errorf("rdmacm: init QP %#x: %w", qp.QPNum(), err)
	}
	return nil
}

// toInit is rdma_create_qp's move to INIT (cma_init_conn_qp): P_Key
// index 0, port 1, and remote write plus, with responder resources,
// remote read and atomics.
func toInit(qp *emu.QP, responderResources uint8) error {
	attr, _, err := qp.Query(qpstate.AttrState)
	if err != nil {
		return err
	}
	if attr.QPState != qpstate.StateReset {
		return nil
	}
	acc := ib.AccessLocalWrite | ib.AccessRemoteWrite
	if responderResources > 0 {
		acc |= ib.AccessRemoteRead | ib.AccessRemoteAtomic
	}
	a := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: acc}
	return qp.Modify(&a, qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags)
}

// toRTR moves qp to RTR towards dgid.
func (c *CM) toRTR(qp *emu.QP, dgid emu.GID, gidIdx int, a *connAttr) error {
	av, err := c.av(context.Background(), dgid)
	if err != nil {
		return err
	}
	av.GRH.SGIDIndex = uint8(gidIdx)
	r := qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: min(a.mtu, c.ports.activeMTU), DestQPNum: a.destQPN, RQPSN: a.rqPSN,
		MaxDestRdAtomic: a.maxDestRdAtomic, MinRNRTimer: 0, AHAttr: av}
	return qp.Modify(&r, qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|
		qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer)
}

func toRTS(qp *emu.QP, a *connAttr) error {
	r := qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: a.sqPSN, Timeout: a.timeout, RetryCnt: a.retry,
		RNRRetry: a.rnrRetry, MaxRdAtomic: a.maxRdAtomic}
	return qp.Modify(&r, qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|
		qpstate.AttrRNRRetry|qpstate.AttrMaxQPRdAtomic)
}

func toErr(qp *emu.QP) {
	a := qpstate.Attr{QPState: qpstate.StateErr}
	qp.Modify(&a, qpstate.AttrState)
}
