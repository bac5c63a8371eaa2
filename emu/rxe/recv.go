package rxe

import (
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// receive runs one frame through rxe's receive pipeline (rxe_udp_encap_recv,
// rxe_rcv, hdr_check, rxe_icrc_check): any failed check drops
// the frame silently, counting what rxe counts; a frame that passes goes to
// the responder (requests) or the completer (responses). r.mu held.
func (r *device) receive(frame []byte) {
	var p wire.Packet
	if err := p.Decode(frame); err != nil {
		r.counters[cntDroppedPkts]++
		return
	}
	bth := p.BTH()
	var dst netip.Addr
	mcast := false
	if !r.lastLocal.is(p.DstBytes()) {
		dst = p.Dst()
		mcast = dst.IsMulticast()
		if !mcast {
			if !r.localAddr(dst) {
				r.counters[cntDroppedPkts]++
				return
			}
			r.lastLocal = addrBytesOf(dst)
		}
	}
	op := p.Opcode()
	if bth.TVer() != 0 || bth.DestQP() == 0 || op.Transport() == wire.TransportCNP ||
		op.Transport() == wire.TransportXRC || op.Transport() == wire.TransportRD {
		r.counters[cntDroppedPkts]++
		return
	}
	if !pkeyOK(bth.PKey()) {
		r.badPKey = satInc(r.badPKey)
		r.counters[cntDroppedPkts]++
		return
	}
	if bth.DestQP() == emu.MulticastQPN {
		if !mcast || op.Transport() != wire.TransportUD {
			r.counters[cntDroppedPkts]++
			return
		}
		if !r.verified(&p) {
			return
		}
		for _, q := range r.members(emu.GIDFromAddr(dst)) {
			if r.qpAccepts(q, &p) {
				r.responder(q, &p)
			}
		}
		return
	}
	q, ok := r.qpByNum(bth.DestQP())
	if !ok || !r.qpAccepts(q, &p) {
		r.counters[cntDroppedPkts]++
		return
	}
	if !r.verified(&p) {
		return
	}
	if op.IsRequest() {
		if !r.deferRequest(q, frame) {
			r.responder(q, &p)
		}
	} else {
		// ack_deferred is RXE_CNT_COMPLETER_SCHED: rxe_comp_queue_pkt
		// counts a response that finds another still queued for the
		// completer task (skb_queue_len(&qp->resp_pkts) > 1), which then
		// runs deferred. Here the completer takes each response as it is
		// received, so none waits and the counter stays 0, as rxe 6.1's
		// did in every interop run (it counted one per response before).
		r.completer(q, &p)
	}
}

// qpByNum returns the QP numbered qpn, trying the one it found last
// before the map: a stream of packets goes to one QP. r.mu held.
func (r *device) qpByNum(qpn uint32) (*qp, bool) {
	if q := r.lastQP; q != nil && q.qpn == qpn {
		return q, true
	}
	q, ok := r.qps[qpn]
	if ok {
		r.lastQP = q
	}
	return q, ok
}

// qpAccepts is check_type_state, check_addr and check_keys: the QP is
// valid, of the packet's transport, in a state that takes it, addressed
// from its peer, and the Q_Key matches (UD). r.mu held.
func (r *device) qpAccepts(q *qp, p *wire.Packet) bool {
	op := p.Opcode()
	if !q.valid {
		return false
	}
	switch op.Transport() {
	case wire.TransportRC:
		if q.typ != qpstate.TypeRC {
			return false
		}
	case wire.TransportUC:
		if q.typ != qpstate.TypeUC {
			return false
		}
	case wire.TransportUD:
		if !q.isUD() {
			return false
		}
	default:
		return false
	}
	if op.IsRequest() {
		if q.state < qpstate.StateRTR || q.state == qpstate.StateErr {
			return false
		}
	} else if q.state < qpstate.StateRTS || q.state == qpstate.StateErr {
		return false
	}
	if !q.isUD() {
		path := r.connPath(q)
		if !path.ok || !path.srcB.is(p.DstBytes()) || !path.dstB.is(p.SrcBytes()) {
			return false
		}
		return true
	}
	want := q.attr.QKey
	if q.typ == qpstate.TypeGSI {
		want = gsiQKey
	}
	if p.DETH().QKey() != want {
		r.badQKey = satInc(r.badQKey)
		return false
	}
	return true
}

// pkeyOK is rxe's P_Key check against its one-entry table (0xFFFF): the
// low 15 bits must match and a limited key matches the full member.
func pkeyOK(k uint16) bool { return k&0x7FFF == 0x7FFF }

// satInc increments a 16-bit port counter, saturating at 0xFFFF.
func satInc(v uint32) uint32 { return min(v+1, 0xFFFF) }

// localAddr reports whether ip is one of the device's addresses (a RoCEv2
// GID of the port).
// The addresses are cached; a miss refreshes the cache from the netdev
// once, so an address added later is found on its first packet.
func (r *device) localAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, a := range r.addrs {
		if a == ip {
			return true
		}
	}
	r.addrs = r.addrs[:0]
	r.lastLocal = addrBytes{}
	for _, a := range r.dev.NetDev().Addrs {
		r.addrs = append(r.addrs, a.Unmap())
	}
	for _, a := range r.addrs {
		if a == ip {
			return true
		}
	}
	return false
}

// verified checks p's ICRC last, as rxe does after every other drop rule,
// and counts p as received (rcvd_pkts, rcvd_bytes) or as an ICRC error.
func (r *device) verified(p *wire.Packet) bool {
	if !r.rxNoICRC && p.VerifyICRC() != nil {
		r.counters[cntICRCErr]++
		return false
	}
	r.counters[cntRcvdPkts]++
	r.counters[cntRcvdBytes] += uint64(p.Len() - p.L3Offset())
	return true
}
