package rdmacm

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Listener receives the connection requests for one port of the
// RDMA_PS_TCP space (rdma_listen).
type Listener struct {
	cm     *CM
	port   uint16
	reqs   chan *Request
	closed chan struct{}
}

// Request is a received REQ waiting for the consumer's Accept or Reject
// (an RDMA_CM_EVENT_CONNECT_REQUEST).
type Request struct {
	// Src is the active side's address and port from the rdma_cm header.
	Src netip.AddrPort
	// Param holds the active side's depths, retry counts and private
	// data (after the rdma_cm header).
	Param Param
	cn    *Conn
}

// Listen starts taking REQs for port (rdma_bind_addr + rdma_listen on
// any address). A port already listened on is EADDRINUSE.
func (c *CM) Listen(port uint16) (*Listener, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("rdmacm: listen: %w", unix.ECONNABORTED)
	}
	if c.listeners[port] != nil {
		return nil, fmt.Errorf("rdmacm: listen on port %d: %w", port, unix.EADDRINUSE)
	}
	l := &Listener{cm: c, port: port, reqs: make(chan *Request, 16), closed: make(chan struct{})}
	c.listeners[port] = l
	return l, nil
}

// Port returns the port listened on.
func (l *Listener) Port() uint16 { return l.port }

// Accept returns the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, fmt.Errorf("rdmacm: accept on port %d: %w", l.port, unix.ECONNABORTED)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; REQs for the port are then rejected with
// "invalid service ID". Requests received but not yet taken by Accept are
// rejected with "consumer defined", as the kernel does for the
// connection IDs a closing listener leaves unaccepted (cm_destroy_id in
// REQ_RCVD), and forgotten.
func (l *Listener) Close() error {
	l.cm.mu.Lock()
	l.closeLocked()
	l.cm.mu.Unlock()
	for {
		select {
		case r := <-l.reqs:
			r.Reject(nil)
		default:
			return nil
		}
	}
}

func (l *Listener) closeLocked() {
	if l.cm.listeners[l.port] == l {
		delete(l.cm.listeners, l.port)
		close(l.closed)
	}
}

// reject sends a REJ of a REQ that has no connection (yet).
func (c *CM) reject(sgid emu.GID, m mad.MAD, local uint32, reason mad.RejReason, pd []byte) {
	rej := mad.NewCM(mad.AttrREJ, m.TransactionID())
	mad.REJ(rej).Encode(&mad.REJFields{LocalCommID: local, RemoteCommID: m.LocalCommID(), MessageREJected: mad.MsgREQ,
		Reason: reason, PrivateData: pd})
	c.reply(sgid, rej)
}

// onREQ: a connection request from sgid, matched as the kernel's cm and
// rdma_cm match it (cm_req_handler, cma_ib_req_handler): a duplicate of a
// REQ being handled is answered with an MRA while the consumer has not
// accepted it and dropped afterwards; a service ID nobody listens on
// gets REJ "invalid service ID"; a REQ the listener cannot take (not RC,
// a bad rdma_cm header, a destination address that is not ours) gets
// REJ "consumer defined"; a full backlog drops it silently, for the
// peer's retransmission to try again.
func (c *CM) onREQ(sgid emu.GID, m mad.MAD) {
	req := mad.REQ(m)
	key := remoteKey{req.LocalCAGUID(), req.LocalCommID()}
	c.mu.Lock()
	dup := c.remote[key]
	c.mu.Unlock()
	if dup != nil {
		c.stats.duplicates.Add(1)
		// The lock order is cn.mu before c.mu (a Conn sends under its
		// own lock): look at the connection without holding c.mu.
		dup.mu.Lock()
		if dup.state == StateREQRcvd {
			// cm_dup_req_handler in MRA_REQ_SENT: rdma_cm marked the
			// request "MRA with delay" when it gave it to the
			// consumer; the duplicate gets the MRA.
			mra := mad.NewCM(mad.AttrMRA, dup.tid)
			mad.MRA(mra).Encode(&mad.MRAFields{LocalCommID: dup.localID, RemoteCommID: dup.remoteID,
				MessageMRAed: mad.MsgREQ, ServiceTimeout: MRAServiceTimeout})
			dup.mraSent = true
			c.reply(sgid, mra)
		}
		dup.mu.Unlock()
		return
	}
	c.mu.Lock()
	ps, port, ok := mad.ServicePort(req.ServiceID())
	l := c.listeners[port]
	if !ok || ps != mad.PortSpaceTCP || l == nil {
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejInvalidServiceID, nil)
		return
	}
	c.mu.Unlock()
	h, err := mad.ParseCMAHeader(req.PrivateData())
	if err != nil || req.TransportServiceType() != mad.TransportRC || !c.hasGID(h.Dst()) {
		c.reject(sgid, m, 0, mad.RejConsumerDefined, nil)
		return
	}
	gidIdx, err := c.localGIDIndex(sgid)
	if err != nil {
		c.reject(sgid, m, 0, mad.RejInvalidGID, nil)
		return
	}
	f := req.Fields()
	c.mu.Lock()
	if c.closed || c.listeners[port] != l { // closed meanwhile
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejInvalidServiceID, nil)
		return
	}
	maxTries := c.cfg.MaxRetries
	if n := int(f.MaxCMRetries); n != 0 && n < maxTries {
		maxTries = n
	}
	cn := &Conn{cm: c, tid: m.TransactionID(), localID: c.newIDLocked(), peerGID: sgid, gidIdx: gidIdx,
		state: StateREQRcvd, remoteID: f.LocalCommID, remoteGUID: f.LocalCAGUID, remoteQPN: f.LocalQPN, req: m,
		timeout: c.timeoutOr(CMTimeout(f.LocalCMResponseTimeout)), maxTries: maxTries,
		peerParam: Param{ResponderResources: f.ResponderResources, InitiatorDepth: f.InitiatorDepth, RetryCount: f.RetryCount, RNRRetryCount: f.RNRRetryCount},
		peerPD:    append([]byte(nil), f.PrivateData[mad.CMAHeaderSize:]...),
		result:    make(chan error, 1), done: make(chan struct{})}
	r := &Request{Src: netip.AddrPortFrom(h.Src(), h.SrcPort()), Param: cn.peerParam, cn: cn}
	r.Param.PrivateData = cn.peerPD
	select {
	case l.reqs <- r:
		c.conns[cn.localID] = cn
		c.remote[key] = cn
	default:
		c.stats.backlog.Add(1)
	}
	c.mu.Unlock()
}

// hasGID reports whether ip is one of the port's RoCEv2 GIDs.
func (c *CM) hasGID(ip netip.Addr) bool {
	_, err := c.dev.FindGID(emu.GIDFromAddr(ip), ib.GIDTypeRoCEv2, 1)
	return err == nil
}

// Accept is rdma_accept: qp (an RC QP in RESET or INIT) moves to RTR
// with the REQ's attributes, the REP goes out, and Accept returns the
// Conn once the RTU came and the QP is in RTS. p's depths are cut to what
// the REQ offers; private data beyond a REP's 196 bytes is EINVAL.
func (r *Request) Accept(ctx context.Context, qp *emu.QP, p Param) (*Conn, error) {
	cn, c := r.cn, r.cn.cm
	if qp.QPType != qpstate.TypeRC {
		return nil, fmt.Errorf("rdmacm: accept: QP type %v, want RC: %w", qp.QPType, unix.EINVAL)
	}
	if err := mad.CheckPrivateData(mad.AttrREP, len(p.PrivateData), true); err != nil {
		return nil, fmt.Errorf("rdmacm: accept: %w", err)
	}
	req := mad.REQ(cn.req)
	resp := min(p.ResponderResources, req.InitiatorDepth())
	init := min(p.InitiatorDepth, req.ResponderResources())
	if err := toInit(qp, resp); err != nil {
		return nil, fmt.Errorf("rdmacm: accept: %w", err)
	}
	c.mu.Lock()
	psn := c.psnLocked()
	c.mu.Unlock()
	// We receive from the PSN our REP announces and send from the
	// REQ's (see Connect).
	a := connAttr{mtu: ib.MTU(req.PathMTU()), destQPN: req.LocalQPN(), rqPSN: psn, maxDestRdAtomic: resp}
	if err := c.toRTR(qp, cn.peerGID, cn.gidIdx, &a); err != nil {
		c.reject(cn.peerGID, cn.req, cn.localID, mad.RejConsumerDefined, nil)
		cn.fail(err)
		c.forget(cn)
		return nil, fmt.Errorf("rdmacm: accept: %w", err)
	}
	rep := mad.NewCM(mad.AttrREP, cn.tid)
	mad.REP(rep).Encode(&mad.REPFields{LocalCommID: cn.localID, RemoteCommID: cn.remoteID, LocalQPN: qp.QPNum(),
		StartingPSN: psn, ResponderResources: resp, InitiatorDepth: init, TargetACKDelay: targetACKDelay,
		RNRRetryCount: p.RNRRetryCount, LocalCAGUID: c.guid, PrivateData: p.PrivateData})
	cn.mu.Lock()
	cn.qp, cn.param, cn.rep, cn.state = qp, p, rep, StateREPSent
	cn.sendLocked(rep)
	cn.mu.Unlock()
	if err := cn.wait(ctx); err != nil {
		c.forget(cn)
		return nil, fmt.Errorf("rdmacm: accept: %w", err)
	}
	return cn, nil
}

// Reject is rdma_reject: a REJ with reason "consumer defined" and pd as
// its private data. More private data than a REJ holds (148 bytes) is
// EINVAL, and the request stays pending.
func (r *Request) Reject(pd []byte) error {
	if err := mad.CheckPrivateData(mad.AttrREJ, len(pd), true); err != nil {
		return fmt.Errorf("rdmacm: reject: %w", err)
	}
	cn, c := r.cn, r.cn.cm
	c.reject(cn.peerGID, cn.req, cn.localID, mad.RejConsumerDefined, pd)
	cn.finish(StateClosed, unix.ECONNREFUSED)
	c.forget(cn)
	return nil
}
