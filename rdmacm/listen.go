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

// Close stops listening; REQs for the port are then rejected.
func (l *Listener) Close() error {
	l.cm.mu.Lock()
	defer l.cm.mu.Unlock()
	l.closeLocked()
	return nil
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
	c.send(sgid, rej)
}

// onREQ: a connection request from sgid.
func (c *CM) onREQ(sgid emu.GID, m mad.MAD) {
	req := mad.REQ(m)
	// A duplicate of a REQ we have a connection for: the lock order is
	// cn.mu before c.mu (a Conn sends under its own lock), so look at the
	// connections without holding c.mu.
	c.mu.Lock()
	passive := make([]*Conn, 0, len(c.conns))
	for _, cn := range c.conns {
		if !cn.active && cn.peerGID == sgid {
			passive = append(passive, cn)
		}
	}
	c.mu.Unlock()
	for _, cn := range passive {
		cn.mu.Lock()
		dup := cn.remoteID == req.LocalCommID()
		var rep mad.MAD
		if dup && cn.state == StateREPSent {
			rep = cn.rep
		}
		cn.mu.Unlock()
		if dup {
			if rep != nil { // our REP was lost (cm_dup_req_handler)
				c.send(sgid, rep)
			}
			return
		}
	}
	c.mu.Lock()
	ps, port, ok := mad.ServicePort(req.ServiceID())
	l := c.listeners[port]
	if !ok || ps != mad.PortSpaceTCP || l == nil || req.TransportServiceType() != mad.TransportRC {
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejInvalidServiceID, nil)
		return
	}
	h, err := mad.ParseCMAHeader(req.PrivateData())
	if err != nil {
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejConsumerDefined, nil)
		return
	}
	gidIdx, err := c.localGIDIndex(sgid)
	if err != nil {
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejInvalidGID, nil)
		return
	}
	f := req.Fields()
	cn := &Conn{cm: c, tid: m.TransactionID(), localID: c.newIDLocked(), peerGID: sgid, gidIdx: gidIdx,
		state: StateREQRcvd, remoteID: f.LocalCommID, remoteQPN: f.LocalQPN, req: m,
		peerParam: Param{ResponderResources: f.ResponderResources, InitiatorDepth: f.InitiatorDepth, RetryCount: f.RetryCount, RNRRetryCount: f.RNRRetryCount},
		peerPD:    append([]byte(nil), f.PrivateData[mad.CMAHeaderSize:]...),
		result:    make(chan error, 1), done: make(chan struct{})}
	r := &Request{Src: netip.AddrPortFrom(h.Src(), h.SrcPort()), Param: cn.peerParam, cn: cn}
	r.Param.PrivateData = cn.peerPD
	select {
	case l.reqs <- r:
		c.conns[cn.localID] = cn
		c.mu.Unlock()
	default:
		c.mu.Unlock()
		c.reject(sgid, m, 0, mad.RejNoResources, nil)
	}
}

// Accept is rdma_accept: qp (an RC QP in RESET or INIT) moves to RTR
// with the REQ's attributes, the REP goes out, and Accept returns the
// Conn once the RTU came and the QP is in RTS. p's depths are cut to what
// the REQ offers.
func (r *Request) Accept(ctx context.Context, qp *emu.QP, p Param) (*Conn, error) {
	cn, c := r.cn, r.cn.cm
	if qp.QPType != qpstate.TypeRC {
		return nil, fmt.Errorf("rdmacm: accept: QP type %v, want RC: %w", qp.QPType, unix.EINVAL)
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
// its private data.
func (r *Request) Reject(pd []byte) error {
	cn, c := r.cn, r.cn.cm
	c.reject(cn.peerGID, cn.req, cn.localID, mad.RejConsumerDefined, pd)
	cn.finish(StateClosed, unix.ECONNREFUSED)
	c.forget(cn)
	return nil
}
