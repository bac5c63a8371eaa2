package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/wire"
)

// ackPSNs returns, from a loopback capture, the PSNs of the RC request
// packets that ask for an ACK (AckReq) and those of the plain ACKs
// (ACKNOWLEDGE, syndrome ACK), in capture order.
func ackPSNs(t *testing.T, file string) (ackReqs, acks []uint32) {
	t.Helper()
	for i, b := range testutil.ReadPcapFile(t, file) {
		p, err := wire.Parse(b)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		switch op := p.Opcode(); {
		case op == wire.RCAcknowledge && p.AETH().Syndrome().IsACK():
			acks = append(acks, p.BTH().PSN())
		case op.IsRequest() && p.BTH().AckReq():
			ackReqs = append(ackReqs, p.BTH().PSN())
		}
	}
	return ackReqs, acks
}

// TestLoopbackOneAckPerMessage: in the capture of ib_send_bw -s 4096 -m
// 1024 -n 100 and ib_write_bw likewise, each message's last packet asks
// for an ACK and gets exactly one, as between two kernel rxe devices
// (rxe_req.c sets AckReq on the last packet, rxe_resp.c acknowledge
// answers it at once): 100 ACKs, the n-th for the n-th request that
// asked. With --coalesce-acks (hfi1-style
// deferred ACKs) the responder merges the ACKs of a batch it reads: fewer,
// and the run still completes every message.
func TestLoopbackOneAckPerMessage(t *testing.T) {
	dir := t.TempDir()
	for _, test := range []string{"send_bw", "write_bw"} {
		for _, coalesce := range []bool{false, true} {
			name := test
			args := []string{"loopback", "--test", test, "-s", "4096", "-m", "1024", "-n", "100", "--seed", "3",
				"--qp-timeout", "20"} // 4.3 s: no retransmission on a loaded machine adds requests or ACKs
			if coalesce {
				name += "/coalesce-acks"
				args = append(args, "--coalesce-acks")
			}
			t.Run(name, func(t *testing.T) {
				file := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".pcap")
				code, out, errs := runCmd(t, append(args, "--pcap", file)...)
				if code != 0 {
					t.Fatalf("exit %d\n%s\n%s", code, out, errs)
				}
				ackReqs, acks := ackPSNs(t, file)
				if len(ackReqs) != 100 {
					t.Errorf("%d requests ask for an ACK, want 100 (one per message)", len(ackReqs))
				}
				switch {
				case !coalesce && !slices.Equal(acks, ackReqs):
					t.Errorf("%d ACKs for 100 messages, want one for each request that asked, with its PSN:\nACKs %x\nAckReq %x",
						len(acks), acks, ackReqs)
				case coalesce && (len(acks) == 0 || len(acks) >= 100):
					t.Errorf("%d ACKs for 100 messages with --coalesce-acks, want between 1 and 99 (merged)", len(acks))
				}
				t.Logf("%d ACKs", len(acks))
			})
		}
	}
}
