package cma

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Service ID resolution (SIDR): how a UD ID "connects" (rdma_connect on
// RDMA_PS_UDP or RDMA_PS_IPOIB): a SIDR_REQ to the service, answered by a
// SIDR_REP with the listener's QPN and Q_Key, or a status.

// sidrKey names a service request being answered: its sender and request
// ID (the kernel's (request ID, LID) with the GID in the LID's place).
type sidrKey struct {
	gid emu.GID
	id  uint32
}

// sidrTimeout is how long a SIDR_REQ waits for its SIDR_REP:
// 2^(CM response timeout 20 − 8) ms.
var sidrTimeout = cmTimeout(cmResponseTimeout)

// resolveServiceLocked sends the SIDR_REQ of a route-resolved UD ID.
func (id *ID) resolveServiceLocked(p *ConnParam) error {
	c := id.cm
	max := mad.SIDRREQPrivateDataSize - mad.CMAHeaderSize
	if len(p.PrivateData) > max {
		return fmt.Errorf("cma: connect: %d bytes of private data, at most %d: %w", len(p.PrivateData), max, unix.EINVAL)
	}
	id.state = StateConnect
	id.localID = c.newCommIDLocked()
	id.tid = formTID(id.localID)
	pd := make([]byte, mad.SIDRREQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: id.src.Port(),
		Src: id.src.Addr(), Dst: id.dst.Addr()})
	copy(pd[mad.CMAHeaderSize:], p.PrivateData)
	m := mad.NewCM(mad.AttrSIDRREQ, id.tid)
	mad.SIDRREQ(m).Encode(&mad.SIDRREQFields{RequestID: id.localID, PartitionKey: 0xffff,
		ServiceID: serviceID(id.ps, id.dst.Port()), PrivateData: pd})
	id.cm_ = cmSIDRReqSent
	c.conns[id.localID] = id
	timeout := sidrTimeout
	if c.cfg.REPTimeout != DefaultREPTimeout {
		timeout = c.cfg.REPTimeout
	}
	id.sendTimedLocked(m, timeout, c.cfg.MaxRetries)
	return nil
}

// sidrReplyLocked answers the service request a passive UD ID holds.
func (id *ID) sidrReplyLocked(st mad.SIDRStatus, qpn, qkey uint32, pd []byte) {
	c := id.cm
	m := mad.NewCM(mad.AttrSIDRREP, id.tid)
	f := mad.SIDRREPFields{RequestID: id.remoteID, Status: st, ServiceID: serviceID(id.ps, id.src.Port()), PrivateData: pd}
	if st == mad.SIDRSuccess {
		f.QPN, f.QKey = qpn, qkey
	}
	mad.SIDRREP(m).Encode(&f)
	c.send(id.dgid, m)
	id.cm_ = cmIdle
	k := sidrKey{id.dgid, id.remoteID}
	if c.sidrs[k] == id {
		delete(c.sidrs, k)
	}
}

// sidrStatusLocked answers a SIDR_REQ that found no ID.
func (c *CM) sidrStatusLocked(sgid emu.GID, m mad.MAD, st mad.SIDRStatus) {
	r := mad.SIDRREQ(m)
	rep := mad.NewCM(mad.AttrSIDRREP, m.TransactionID())
	mad.SIDRREP(rep).Encode(&mad.SIDRREPFields{RequestID: r.RequestID(), Status: st, ServiceID: r.ServiceID()})
	c.send(sgid, rep)
}

// onSIDRREQ: a service request from sgid (cm_sidr_req_handler,
// cma_ib_req_handler).
func (c *CM) onSIDRREQ(sgid emu.GID, m mad.MAD) {
	r := mad.SIDRREQ(m)
	k := sidrKey{sgid, r.RequestID()}
	if c.sidrs[k] != nil {
		c.stats.Duplicates++
		c.count(CounterRecvDuplicates, m)
		return
	}
	ps, port, ok := splitServiceID(r.ServiceID())
	if !ok || len(c.ports[portKey{ps, port}]) == 0 {
		c.sidrStatusLocked(sgid, m, mad.SIDRUnsupported)
		return
	}
	h, err := mad.ParseCMAHeader(r.PrivateData())
	if err != nil {
		c.sidrStatusLocked(sgid, m, mad.SIDRReject)
		return
	}
	dst := h.Dst()
	l, any := c.listenerFor(ps, port, dst)
	if !any {
		c.sidrStatusLocked(sgid, m, mad.SIDRUnsupported)
		return
	}
	idx, err := c.localGIDIndex(dst)
	if l == nil || err != nil || l.qpType != qpstate.TypeUD || h.Src().IsUnspecified() || h.Src().IsMulticast() {
		c.sidrStatusLocked(sgid, m, mad.SIDRReject)
		return
	}
	id := c.newIDLocked(l.ps, l.qpType, l.handler)
	id.ctx.Store(l.ctx.Load())
	id.listener = l
	id.state = StateConnect
	id.src = netip.AddrPortFrom(dst, l.src.Port())
	id.dst = netip.AddrPortFrom(h.Src(), h.SrcPort())
	id.hasDev, id.netdev, id.gidIdx = true, true, idx
	id.dgid = sgid
	id.numPaths = 1
	id.remoteID = r.RequestID()
	id.tid = m.TransactionID()
	id.cm_ = cmSIDRReqRcvd
	c.sidrs[k] = id
	ev := Event{Type: EventConnectRequest, ID: id, UD: UDParam{PrivateData: r.PrivateData()[mad.CMAHeaderSize:]}}
	if l.handler == nil || l.handler(&ev) != nil {
		// cm_destroy_id of a SIDR_REQ_RCVD id rejects it.
		id.destroyLocked()
	}
}

// onSIDRREP: the answer to our service request (cma_sidr_rep_handler).
func (c *CM) onSIDRREP(m mad.MAD) {
	f := mad.SIDRREP(m).Fields()
	id := c.conns[f.RequestID]
	if id == nil || id.cm_ != cmSIDRReqSent {
		c.stats.Unmatched++
		return
	}
	id.stopTimerLocked()
	id.cm_ = cmIdle
	id.forgetConnLocked()
	pd := f.PrivateData
	switch {
	case f.Status != mad.SIDRSuccess:
		id.event(Event{Type: EventUnreachable, Status: int32(f.Status), UD: UDParam{PrivateData: pd}})
	case (id.ps == PSUDP || id.ps == PSIB) && f.QKey != UDPQKey:
		// cma_set_qkey: the port space fixes the Q_Key.
		id.event(Event{Type: EventAddrError, Status: -int32(unix.EINVAL), UD: UDParam{PrivateData: pd}})
	default:
		id.remoteQPN = f.QPN
		av := id.avLocked()
		av.DMAC = [6]byte{}
		id.event(Event{Type: EventEstablished, UD: UDParam{PrivateData: pd, AH: av, QPNum: f.QPN, QKey: f.QKey}})
	}
}
