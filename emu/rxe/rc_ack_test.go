package rxe_test

import (
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// TestOneResponsePerAckReqPacket: by default the responder answers every
// RC request packet that asks for an ACK with a response of its own, as
// rxe's acknowledge (rxe_resp.c): a SEND or WRITE message gets one ACK
// (AckReq on its last packet), a WRITE longer than RXE_MAX_PKT_PER_ACK
// packets one more for every 66th packet (rxe_req.c init_req_packet), a
// READ its response packets (they are its acknowledgement) and an atomic
// one atomic ACK. Nothing is held or merged (Config.CoalesceACKs is
// off), on a bare in-memory pipe, whose reading goroutine processes
// batches of frames, and on a link whose writes never wait (a TAP's
// kind), where the device used to hold the ACKs of a batch that woke a
// completion handler. The requests are all posted at once, so that B
// reads them in batches. The devices' clock never moves: no retry adds
// a response.
func TestOneResponsePerAckReqPacket(t *testing.T) {
	const mtu = 1024 // rxetest's path MTU
	ops := []struct {
		name string
		op   emu.WROpcode
		size int // bytes per message
		msgs int
		want int // responses B writes for all of them
	}{
		{"SEND of 4 packets", emu.WRSend, 4 * mtu, 32, 32},
		{"SEND of 1 packet", emu.WRSend, 64, 32, 32},
		{"WRITE of 4 packets", emu.WRRDMAWrite, 4 * mtu, 32, 32},
		// Packets 66, 132 and 198 ask for an ACK, then the last.
		{"WRITE of 200 packets", emu.WRRDMAWrite, 200 * mtu, 4, 4 * 4},
		{"READ of 4 packets", emu.WRRDMARead, 4 * mtu, 16, 16 * 4},
		{"FETCH_AND_ADD", emu.WRAtomicFetchAndAdd, 8, 16, 16},
	}
	links := []struct {
		name        string
		nonBlocking bool
	}{{"pipe", false}, {"non-blocking link", true}}
	for _, lk := range links {
		for _, o := range ops {
			t.Run(lk.name+"/"+o.name, func(t *testing.T) {
				clk := clock.NewManual(time.Unix(0, 0))
				l, err := rxetest.NewLink(rxetest.Options{MTU: 1500,
					Rxe: func(i int, c *rxe.Config) { c.Device.Clock = clk },
					Wrap: func(i int, l link.Link) link.Link {
						if lk.nonBlocking {
							return &nonBlocking{Link: l}
						}
						return l
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				// B's CQ wakes a handler that re-arms it, as a waiting
				// application's does.
				cq, err := l.B.Dev.CreateCQ(emu.CQInitAttr{CQE: 256, CompHandler: func(cq *emu.CQ) {
					cq.ReqNotify(emu.CQNextComp)
				}})
				if err != nil {
					t.Fatal(err)
				}
				l.B.CQ = cq
				cq.ReqNotify(emu.CQNextComp)
				a, b, err := l.Pair(qpstate.TypeRC, o.msgs*o.size)
				if err != nil {
					t.Fatal(err)
				}
				if err := rxetest.Connect(a, b); err != nil {
					t.Fatal(err)
				}
				if o.op == emu.WRSend {
					for i := range o.msgs {
						if _, err := b.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{b.SGE(i*o.size, o.size)}}}); err != nil {
							t.Fatal(err)
						}
					}
				}
				wrs := make([]emu.SendWR, o.msgs)
				for i := range wrs {
					wrs[i] = emu.SendWR{WRID: uint64(i), Opcode: o.op, SendFlags: emu.SendSignaled,
						SGList: []emu.SGE{a.SGE(i*o.size, o.size)}, RemoteAddr: b.Addr + uint64(i*o.size), RKey: b.MR.RKey()}
					if o.op == emu.WRAtomicFetchAndAdd {
						wrs[i].RemoteAddr, wrs[i].CompareAdd = b.Addr, 1
					}
				}
				if _, err := a.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				wcs, err := rxetest.Wait(l.A.CQ, o.msgs, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				for _, wc := range wcs {
					if wc.Status != emu.WCSuccess {
						t.Fatalf("completion %+v", wc)
					}
				}
				if o.op == emu.WRSend {
					if _, err := rxetest.Wait(cq, o.msgs, 10*time.Second); err != nil {
						t.Fatal(err)
					}
				}
				sent, rcvd := counter(t, l.B, "sent_pkts"), counter(t, l.A, "rcvd_pkts")
				if sent != uint64(o.want) || rcvd != uint64(o.want) {
					t.Errorf("B sent %d responses and A received %d for %d messages, want %d", sent, rcvd, o.msgs, o.want)
				}
			})
		}
	}
}

// counter returns the port counter called name of e's device.
func counter(t *testing.T, e *rxetest.End, name string) uint64 {
	t.Helper()
	st, err := e.Dev.AllocHWPortStats(1)
	if err != nil {
		t.Fatal(err)
	}
	e.Dev.GetHWStats(st, 1)
	v, ok := st.Counter(name)
	if !ok {
		t.Fatalf("no counter %s", name)
	}
	return v
}
