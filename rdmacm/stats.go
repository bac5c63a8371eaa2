package rdmacm

import (
	"sync/atomic"

	"github.com/softroce/softroce/mad"
)

// Stats counts what a CM sent and received, as the kernel's cm counts it
// per port (/sys/class/infiniband_cm/DEV/PORT/cm_tx_msgs, cm_rx_msgs,
// cm_tx_retries, cm_rx_duplicates), plus what it dropped.
type Stats struct {
	// Sent counts the CM messages sent per attribute, retransmissions
	// included (cm_tx_msgs).
	Sent map[mad.AttrID]uint64
	// Received counts the CM messages received per attribute
	// (cm_rx_msgs).
	Received map[mad.AttrID]uint64
	// Retries counts retransmissions of REQ, REP and DREQ
	// (cm_tx_retries).
	Retries uint64
	// Duplicates counts duplicate REQs, REPs, DREQs and MRAs received
	// (cm_rx_duplicates).
	Duplicates uint64
	// Malformed counts MADs QP1 received that are not CM messages this
	// CM handles, dropped without an answer: a bad base version,
	// another class or class version, a method other than Send, an
	// unknown attribute, LAP and APR.
	Malformed uint64
	// BacklogDrops counts REQs dropped silently because the listener's
	// queue of requests not yet accepted was full.
	BacklogDrops uint64
	// Unmatched counts messages naming no connection of this CM.
	Unmatched uint64
}

// cmAttrs are the attributes counted, in order.
var cmAttrs = [...]mad.AttrID{mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ,
	mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP}

// counters are the CM's counters; the per-attribute ones are indexed by
// attrIndex.
type counters struct {
	rx, tx                                  [len(cmAttrs) + 1]atomic.Uint64
	retries, duplicates, malformed, backlog atomic.Uint64
	unmatched                               atomic.Uint64
}

// attrIndex is a's index in cmAttrs, or len(cmAttrs) for any other.
func attrIndex(a mad.AttrID) int {
	if a >= mad.AttrREQ && a <= mad.AttrSIDRREP {
		return int(a - mad.AttrREQ)
	}
	return len(cmAttrs)
}

// Stats returns the CM's counters.
func (c *CM) Stats() Stats {
	s := Stats{Sent: map[mad.AttrID]uint64{}, Received: map[mad.AttrID]uint64{},
		Retries: c.stats.retries.Load(), Duplicates: c.stats.duplicates.Load(), Malformed: c.stats.malformed.Load(),
		BacklogDrops: c.stats.backlog.Load(), Unmatched: c.stats.unmatched.Load()}
	for i, a := range cmAttrs {
		if n := c.stats.tx[i].Load(); n != 0 {
			s.Sent[a] = n
		}
		if n := c.stats.rx[i].Load(); n != 0 {
			s.Received[a] = n
		}
	}
	return s
}
