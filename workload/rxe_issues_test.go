package workload

import (
	"testing"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
)

// TestRxeIssueReadBurstRetransmits: two QPs each with five 8 MiB READs
// outstanding, no faults, the default local ACK timeout (14: 67 ms), and
// not one retransmission timeout. The kernel's rxe sends read responses
// packet by packet from each QP's responder task, so responses of every
// QP flow at once and the completer's timer (re-armed on each response)
// never fires. emu/rxe used to build all responses of a batch under the
// device lock and write them when it released it: QP 2's first response
// waited behind QP 1's 40 MiB, its timer fired and the whole READ was sent
// again (23 retransmissions seen), and a slow run (the race detector)
// never finished. Now each QP's responder sends a bounded burst per round
// (emu/rxe readjob.go) and the replies interleave.
func TestRxeIssueReadBurstRetransmits(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	runPerfPair(t, lb, PerfConfig{Test: oob.PerftestReadBW, MaxSize: 8 << 20, Iters: 5, NumQP: 2,
		MTU: ib.MTU1024, GIDIndex: LoopbackGIDIndex}, 8<<20)
	cs, err := Counters(lb.A.Dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Name == "completer_retry_err" {
			t.Errorf("%d retransmission timeouts without a single lost frame", c.Value)
		}
	}
}
