package rxe

import (
	"time"

	"github.com/softroce/softroce/emu"
)

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

// CQFault is what a fault injector decides for one completion bound for a
// CQ: Overflow treats the CQ as full (the completion is lost and
// IB_EVENT_CQ_ERR raised, as rxe_cq_post on a full queue), Delay queues it
// that much later on the device's clock. The zero value changes nothing.
type CQFault struct {
	Overflow bool
	Delay    time.Duration
}

// SetCQFault installs f, asked about every completion wc before it is
// queued on c (nil removes it). f is called with the device's lock held:
// it must not block or call into the device, nor keep wc.
func (d *Device) SetCQFault(f func(c *emu.CQ, wc *emu.WC) CQFault) {
	r := d.r
	r.mu.Lock()
	r.cqFault = f
	r.mu.Unlock()
}

// postLater queues a completion d later, unless its CQ is destroyed
// meanwhile; r.mu held.
func (r *device) postLater(q *cq, wc emu.WC, solicited bool, d time.Duration) {
	r.dev.Clock().AfterFunc(d, func() {
		r.lock()
		defer r.unlock()
		if !q.gone {
			r.postNow(q, wc, solicited)
		}
	})
}
