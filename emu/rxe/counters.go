package rxe

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
)

// Counter indexes (enum rxe_counters) followed by softroce's
// extras.
const (
	cntSentPkts = iota
	cntRcvdPkts
	cntDuplicateRequest
	cntOutOfSeqRequest
	cntRcvdRNRErr
	cntSendRNRErr
	cntRcvdSeqErr
	cntAckDeferred
	cntRetryExceededErr
	cntRetryRNRExceededErr
	cntCompleterRetryErr
	cntSendErr
	cntLinkDowned
	cntRDMASends
	cntRDMARecvs
	cntSentBytes
	cntRcvdBytes
	cntICRCErr
	cntDroppedPkts
	numCounters
)

// statDescs are the counter names: rxe's fifteen (Linux 6.1 to 7.3), the
// two byte counters of Linux 7.2, and softroce's extras (prefixed "softroce_"
// and flagged optional so no one mistakes them for rxe's).
var statDescs = [numCounters]emu.StatDesc{
	{Name: "sent_pkts"}, {Name: "rcvd_pkts"}, {Name: "duplicate_request"}, {Name: "out_of_seq_request"},
	{Name: "rcvd_rnr_err"}, {Name: "send_rnr_err"}, {Name: "rcvd_seq_err"}, {Name: "ack_deferred"},
	{Name: "retry_exceeded_err"}, {Name: "retry_rnr_exceeded_err"}, {Name: "completer_retry_err"},
	{Name: "send_err"}, {Name: "link_downed"}, {Name: "rdma_sends"}, {Name: "rdma_recvs"},
	{Name: "sent_bytes"}, {Name: "rcvd_bytes"},
	{Name: "softroce_icrc_err", Flags: emu.StatFlagOptional},
	{Name: "softroce_dropped_pkts", Flags: emu.StatFlagOptional},
}

// kernelStats are the counters a kernel's rxe shows: their descriptors
// and, for each, its index in the device's counters.
type kernelStats struct {
	descs []emu.StatDesc
	idx   []int
}

// statsOf returns the counters of kernel k's rxe: all of statDescs from
// Linux 7.2 on, all but sent_bytes and rcvd_bytes before.
func statsOf(k Kernel) kernelStats {
	var s kernelStats
	for i, d := range statDescs {
		if (i == cntSentBytes || i == cntRcvdBytes) && !k.HasByteCounters() {
			continue
		}
		s.descs, s.idx = append(s.descs, d), append(s.idx, i)
	}
	return s
}

// StatDescs returns the port counter descriptors (rxe_ib_alloc_hw_port_stats).
func (r *device) StatDescs(port uint32) []emu.StatDesc { return r.stats.descs }

// HWStats copies the counters into values (rxe_ib_get_hw_stats).
func (r *device) HWStats(port uint32, values []uint64) int {
	r.lock()
	defer r.unlock()
	n := min(len(values), len(r.stats.idx))
	for i, c := range r.stats.idx[:n] {
		values[i] = r.counters[c]
	}
	return n
}

// ProcessMAD is rxe's process_mad (Linux 7.2 and later): the performance
// management agent answers PortCounters, PortCountersExtended and
// ClassPortInfo from the port's counters (mad.PMAAnswer). Earlier kernels
// have no such op: every MAD goes on to the MAD layer.
func (r *device) ProcessMAD(port uint32, in mad.MAD) (mad.MAD, bool) {
	if !r.cfg.Kernel.HasPMA() {
		return nil, false
	}
	r.lock()
	c := mad.PMACounters{
		LinkDowned: r.counters[cntLinkDowned],
		SentBytes:  r.counters[cntSentBytes],
		RcvdBytes:  r.counters[cntRcvdBytes],
		SentPkts:   r.counters[cntSentPkts],
		RcvdPkts:   r.counters[cntRcvdPkts],
	}
	r.unlock()
	return mad.PMAAnswer(in, uint8(port), c)
}
