package cma

import (
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
)

// remoteKey names a connection by the peer's CA GUID and communication ID
// (the kernel's remote_id_table).
type remoteKey struct {
	guid uint64
	id   uint32
}

// rejectREQLocked answers a REQ that found no ID: local ID 0, the REQ's
// TID, kind REQ (cm_issue_rej).
func (c *CM) rejectREQLocked(sgid emu.GID, m mad.MAD, reason mad.RejReason) {
	rej := mad.NewCM(mad.AttrREJ, m.TransactionID())
	mad.REJ(rej).Encode(&mad.REJFields{RemoteCommID: m.LocalCommID(), MessageREJected: mad.MsgREQ, Reason: reason})
	c.send(sgid, rej)
}

// splitServiceID returns the port space and port of an rdma_cm service ID.
func splitServiceID(sid uint64) (PortSpace, uint16, bool) {
	ps, port, ok := mad.ServicePort(sid)
	return PortSpace(ps), port, ok
}

// listenerFor finds the listener of ps/port whose address takes dst
// (cma_find_listener: a wildcard of the family, an IPv6 wildcard without
// AFONLY for IPv4 too, or dst itself).
func (c *CM) listenerFor(ps PortSpace, port uint16, dst netip.Addr) (l *ID, any bool) {
	if c.removed {
		// The device's removal destroyed the wildcard listeners'
		// listens on it and left the others in DEVICE_REMOVAL.
		return nil, false
	}
	for _, id := range c.ports[portKey{ps, port}] {
		if id.state != StateListen {
			continue
		}
		any = true
		a := id.src.Addr()
		switch {
		case a == dst:
			return id, true
		case anyAddr(a) && a.Is4() == dst.Is4():
			l = id
		case anyAddr(a) && a.Is6() && !id.afOnly && l == nil:
			l = id
		}
	}
	return l, any
}

// onREQ: a connection request from sgid (cm_req_handler, cma_req_handler).
func (c *CM) onREQ(sgid, _ emu.GID, m mad.MAD) {
	req := mad.REQ(m)
	f := req.Fields()
	if dup := c.remotes[remoteKey{f.LocalCAGUID, f.LocalCommID}]; dup != nil {
		c.stats.Duplicates++
		c.count(CounterRecvDuplicates, m)
		if dup.cm_ == cmREQRcvd {
			// rdma_cm delays its MRA: the request waits for the
			// consumer, and the peer should wait too.
			mra := mad.NewCM(mad.AttrMRA, dup.tid)
			mad.MRA(mra).Encode(&mad.MRAFields{LocalCommID: dup.localID, RemoteCommID: dup.remoteID,
				MessageMRAed: mad.MsgREQ, ServiceTimeout: mraServiceTimeout})
			c.send(dup.dgid, mra)
		}
		return
	}
	if old := c.liveConnFromLocked(f.LocalCAGUID, f.LocalQPN); old != nil {
		// cm_match_req: a QP that still has a connection here asks
		// for another: the REQ is stale (REJ 10), and the old
		// connection is torn down with a DREQ.
		c.rejectREQLocked(sgid, m, mad.RejStaleConn)
		if old.cm_ == cmREPSent || old.cm_ == cmEstablished {
			old.sendDREQLocked()
		}
		return
	}
	ps, port, ok := splitServiceID(f.ServiceID)
	if !ok || len(c.ports[portKey{ps, port}]) == 0 {
		c.rejectREQLocked(sgid, m, mad.RejInvalidServiceID)
		return
	}
	h, err := mad.ParseCMAHeader(f.PrivateData)
	if err != nil {
		c.rejectREQLocked(sgid, m, mad.RejConsumerDefined)
		return
	}
	dst := h.Dst()
	l, any := c.listenerFor(ps, port, dst)
	if !any {
		c.rejectREQLocked(sgid, m, mad.RejInvalidServiceID)
		return
	}
	idx, err := c.localGIDIndex(dst)
	if l == nil || err != nil || l.qpType != qpstate.TypeRC || f.TransportServiceType != mad.TransportRC ||
		h.Src().IsUnspecified() || h.Src().IsMulticast() || h.Src().IsLoopback() {
		c.rejectREQLocked(sgid, m, mad.RejConsumerDefined)
		return
	}
	id := c.newIDLocked(l.ps, l.qpType, l.handler)
	id.ctx.Store(l.ctx.Load())
	id.listener = l
	id.state = StateConnect
	id.src = netip.AddrPortFrom(dst, l.src.Port())
	id.dst = netip.AddrPortFrom(h.Src(), h.SrcPort())
	id.hasDev, id.netdev, id.gidIdx = true, true, idx
	id.dgid = emu.GID(f.PrimaryLocalGID)
	if id.dgid.IsZero() {
		id.dgid = sgid
	}
	id.numPaths = 1
	id.flowLabel, id.tos = f.PrimaryFlowLabel, f.PrimaryTrafficClass
	id.localID = c.newCommIDLocked()
	id.remoteID, id.remoteGUID, id.remoteQPN = f.LocalCommID, f.LocalCAGUID, f.LocalQPN
	id.tid = m.TransactionID()
	id.req = m
	id.cm_ = cmREQRcvd
	c.conns[id.localID] = id
	c.remotes[remoteKey{id.remoteGUID, id.remoteID}] = id
	ev := Event{Type: EventConnectRequest, ID: id, Conn: ConnParam{
		PrivateData: f.PrivateData[mad.CMAHeaderSize:], ResponderResources: f.InitiatorDepth,
		InitiatorDepth: f.ResponderResources, FlowControl: b2u(f.EndToEndFlowControl), RetryCount: f.RetryCount,
		RNRRetryCount: f.RNRRetryCount, SRQ: b2u(f.SRQ), QPNum: f.LocalQPN}}
	if l.handler == nil || l.handler(&ev) != nil {
		// The backlog is full: drop the request without a word, so
		// that the peer's retransmission may find room.
		c.stats.BacklogDrops++
		id.cm_ = cmIdle
		id.destroyLocked()
	}
}

// liveConnFromLocked returns the connection whose peer is the QP qpn of
// the CA guid, if it is not over yet (the kernel's remote_qp_table, whose
// entries leave at the timewait).
func (c *CM) liveConnFromLocked(guid uint64, qpn uint32) *ID {
	for _, id := range c.conns {
		if id.remoteGUID != guid || id.remoteQPN != qpn {
			continue
		}
		switch id.cm_ {
		case cmREQRcvd, cmREPSent, cmREPRcvd, cmEstablished, cmDREQSent, cmDREQRcvd:
			return id
		}
	}
	return nil
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// conn finds the ID a reply names: our ID in its Remote Comm ID, the
// peer's in its Local Comm ID once we know it.
func (c *CM) conn(m mad.MAD) *ID {
	id := c.conns[m.RemoteCommID()]
	if id == nil || (id.remoteID != 0 && id.remoteID != m.LocalCommID()) {
		c.stats.Unmatched++
		return nil
	}
	return id
}

// onREP: the active side's REP (cm_rep_handler, cma_rep_recv).
func (c *CM) onREP(_ emu.GID, m mad.MAD) {
	id := c.conn(m)
	if id == nil || id.listener != nil {
		return
	}
	r := mad.REP(m).Fields()
	switch id.cm_ {
	case cmREQSent:
	case cmEstablished:
		// Our RTU was lost (cm_dup_rep_handler).
		c.stats.Duplicates++
		c.count(CounterRecvDuplicates, m)
		c.send(id.dgid, buildRTU(id.tid, id.localID, id.remoteID))
		return
	case cmREPRcvd:
		c.stats.Duplicates++
		c.count(CounterRecvDuplicates, m)
		mra := mad.NewCM(mad.AttrMRA, id.tid)
		mad.MRA(mra).Encode(&mad.MRAFields{LocalCommID: id.localID, RemoteCommID: id.remoteID,
			MessageMRAed: mad.MsgREP, ServiceTimeout: mraServiceTimeout})
		c.send(id.dgid, mra)
		return
	default:
		return
	}
	id.stopTimerLocked()
	id.remoteID, id.remoteGUID, id.remoteQPN = r.LocalCommID, r.LocalCAGUID, r.LocalQPN
	c.remotes[remoteKey{id.remoteGUID, id.remoteID}] = id
	id.rep = m
	id.cm_ = cmREPRcvd
	id.event(Event{Type: EventConnectResponse, Conn: ConnParam{PrivateData: r.PrivateData,
		ResponderResources: r.ResponderResources, InitiatorDepth: r.InitiatorDepth,
		FlowControl: b2u(r.EndToEndFlowControl), RNRRetryCount: r.RNRRetryCount, SRQ: b2u(r.SRQ), QPNum: r.LocalQPN}})
}

// onRTU: the passive side's connection is established.
func (c *CM) onRTU(m mad.MAD) {
	id := c.conn(m)
	if id == nil || id.cm_ != cmREPSent {
		return
	}
	id.stopTimerLocked()
	id.cm_ = cmEstablished
	id.event(Event{Type: EventEstablished})
}

// onREJ: the peer rejects our REQ or REP, or gives up on its own REQ.
func (c *CM) onREJ(m mad.MAD) {
	r := mad.REJ(m).Fields()
	var id *ID
	if r.Reason == mad.RejTimeout && r.RejectInfoLength >= 8 {
		var guid uint64
		for _, b := range r.ARI[:8] {
			guid = guid<<8 | uint64(b)
		}
		id = c.remotes[remoteKey{guid, r.LocalCommID}]
	} else {
		id = c.conns[r.RemoteCommID]
		if id != nil && id.remoteID != 0 && r.LocalCommID != 0 && id.remoteID != r.LocalCommID {
			id = nil
		}
	}
	if id == nil {
		c.stats.Unmatched++
		return
	}
	switch id.cm_ {
	case cmREQSent, cmREQRcvd, cmREPSent, cmREPRcvd, cmEstablished:
	default:
		return
	}
	was := id.cm_
	id.stopTimerLocked()
	if r.Reason == mad.RejStaleConn || was == cmREPRcvd || was == cmEstablished {
		id.enterTimewaitLocked()
	} else {
		id.cm_ = cmIdle
		id.forgetConnLocked()
	}
	if id.state == StateConnect {
		id.event(Event{Type: EventRejected, Status: int32(r.Reason), Conn: ConnParam{PrivateData: r.PrivateData}})
	}
}

// onMRA: the peer needs longer; wait its service timeout before resending.
func (c *CM) onMRA(m mad.MAD) {
	id := c.conn(m)
	if id == nil || id.last == nil {
		return
	}
	f := mad.MRA(m).Fields()
	if !(f.MessageMRAed == mad.MsgREQ && id.cm_ == cmREQSent) && !(f.MessageMRAed == mad.MsgREP && id.cm_ == cmREPSent) {
		return
	}
	id.tries = 0
	id.lastTimeout = cmTimeout(f.ServiceTimeout) + cmTimeout(id.avTimeoutLocked())
	id.armLocked()
}

// onDREQ: the peer disconnects (cm_dreq_handler). A DREQ naming no
// connection of ours is answered with a DREP anyway.
func (c *CM) onDREQ(sgid emu.GID, m mad.MAD) {
	d := mad.DREQ(m).Fields()
	id := c.conns[d.RemoteCommID]
	if id == nil || id.remoteID != d.LocalCommID {
		c.stats.Unmatched++
		c.send(sgid, buildDREP(m.TransactionID(), d.RemoteCommID, d.LocalCommID))
		return
	}
	if d.RemoteQPN != id.qpNum {
		c.stats.Unmatched++
		return
	}
	switch id.cm_ {
	case cmREPSent, cmEstablished, cmDREQSent:
	case cmTimewait:
		c.send(id.dgid, buildDREP(m.TransactionID(), id.localID, id.remoteID))
		return
	default:
		return
	}
	id.stopTimerLocked()
	id.cm_ = cmDREQRcvd
	id.drepTID = m.TransactionID()
	if id.state == StateConnect {
		id.state = StateDisconnect
		id.event(Event{Type: EventDisconnected})
	}
}

// onDREP: our DREQ is answered.
func (c *CM) onDREP(m mad.MAD) {
	id := c.conn(m)
	if id == nil || id.cm_ != cmDREQSent {
		return
	}
	id.enterTimewaitLocked()
	if id.state == StateConnect {
		id.state = StateDisconnect
		id.event(Event{Type: EventDisconnected})
	}
}
