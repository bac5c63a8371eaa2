package rxe

import "github.com/softroce/softroce/emu"

// ResponderInfo is what a responder QP would put in an acknowledgement it
// sends: the requester's QP number (its dest_qp_num), its RNR timer code
// (min_rnr_timer) and its MSN.
type ResponderInfo struct {
	DestQPN     uint32
	MinRNRTimer uint8
	MSN         uint32
}

// Responder returns the ResponderInfo of the QP numbered qpn. It takes
// only the device's lock, never the transmit path's, so a link's
// WritePackets (a fault injector answering for the QP) may call it.
func (d *Device) Responder(qpn uint32) (ResponderInfo, bool) {
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.qps[qpn]
	if !ok {
		return ResponderInfo{}, false
	}
	return ResponderInfo{DestQPN: q.attr.DestQPNum, MinRNRTimer: q.attr.MinRNRTimer, MSN: q.msn}, true
}

// QP returns the verbs core's QP numbered qpn on the device, or nil.
func (d *Device) QP(qpn uint32) *emu.QP {
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if q, ok := r.qps[qpn]; ok {
		return q.core
	}
	return nil
}
