package rxe

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestMiddlePacketsAsBuilt: a message's middle packets, whose headers the
// requester copies from the packet before (sendNext, wire.BuildNext),
// are the frames Build writes from their own fields, byte for byte (the
// IPv4 header checksum and the ICRC included); each sender's IPv4
// identifications run on by one from frame to frame, each message's PSNs
// too, AckReq is set where rxe sets it (the last packet, and after every
// AckReqInterval packets without it) and SE where it does (only the last
// packet of a solicited SEND or of a WR with immediate data). Over IPv4
// and IPv6 with a traffic class and flow label, MTU 1024 and 4096, RC and
// UC, SEND and RDMA WRITE with and without immediate data, solicited or
// not, rxe's interval and a short one, and messages of 1 to 40 packets.
// It fails if sendNext leaves the identification, the checksum, the PSN
// or the AckReq bit of the packet it copies.
func TestMiddlePacketsAsBuilt(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		for _, interval := range []int{0, 3} {
			for _, mtu := range []ib.MTU{ib.MTU1024, ib.MTU4096} {
				t.Run(fmt.Sprintf("ipv6=%v/interval=%d/mtu=%d", ipv6, interval, mtu.Bytes()), func(t *testing.T) {
					middlePacketsAsBuilt(t, ipv6, interval, mtu)
				})
			}
		}
	}
}

func middlePacketsAsBuilt(t *testing.T, ipv6 bool, interval int, mtu ib.MTU) {
	p := newPair(t, pairOpts{ipv6: ipv6, flowLabel: 0x12345, trafficClass: 0x68,
		quirksA: Quirks{AckReqInterval: interval}})
	rc := p.connect(qpOpts{mtu: mtu})
	uc := p.connect(qpOpts{typ: qpstate.TypeUC, mtu: mtu})
	const size = 40 << 10
	src, data, mra := p.a.buf(size, 9)
	dst, got, mrb := p.b.buf(size, 0)
	sge := func(n int) []emu.SGE { return []emu.SGE{{Addr: src, Length: uint32(n), LKey: mra.LKey()}} }
	recv := emu.RecvWR{WRID: 7, SGList: []emu.SGE{{Addr: dst, Length: size, LKey: mrb.LKey()}}}
	m := mtu.Bytes()
	var solicited []bool // each WR's, in posting order
	for k, n := range []int{1, m, 2 * m, 3*m - 5, 5 * m, size} {
		for _, c := range []conn{rc, uc} {
			for j, op := range []emu.WROpcode{emu.WRRDMAWrite, emu.WRRDMAWriteWithImm, emu.WRSend, emu.WRSendWithImm} {
				clear(got)
				if op != emu.WRRDMAWrite {
					p.b.postRecv(c.qb, recv)
				}
				flags := emu.SendSignaled
				if (k+j)%2 == 1 {
					flags |= emu.SendSolicited
				}
				solicited = append(solicited, flags&emu.SendSolicited != 0)
				p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: op, SendFlags: flags, SGList: sge(n),
					RemoteAddr: dst, RKey: mrb.RKey(), ImmData: 0x1234})
				p.settle()
				wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
				if op != emu.WRRDMAWrite {
					wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
				}
				if !bytes.Equal(got[:n], data[:n]) {
					t.Fatalf("%v of %d bytes: data differs", op, n)
				}
			}
		}
	}
	p.a.rec.mu.Lock()
	frames := p.a.rec.frames
	p.a.rec.mu.Unlock()
	var buf [9000]byte
	var f wire.Frame
	middles, noack, msg := 0, 0, -1
	limit := interval // rxe's RXE_MAX_PKT_PER_ACK + 1 without a quirk
	if limit == 0 {
		limit = 65
	}
	var prev wire.Packet
	for i, fr := range frames {
		pk, err := wire.Parse(fr)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		pk.Fields(&f)
		n, err := wire.Build(buf[:], &f)
		if err != nil || !bytes.Equal(buf[:n], fr) {
			t.Fatalf("frame %d (%v, PSN %d) differs from the frame Build writes from its fields (%v):\n got % x\nwant % x",
				i, pk.Opcode(), pk.BTH().PSN(), err, fr, buf[:n])
		}
		if i > 0 && !ipv6 && pk.IPID() != prev.IPID()+1 {
			t.Fatalf("frame %d: IP identification %#x after %#x", i, pk.IPID(), prev.IPID())
		}
		op := pk.Opcode()
		fl := op.Flags()
		middle := fl&(wire.FlagFirst|wire.FlagLast) == 0
		if middle || fl&wire.FlagLast != 0 && fl&wire.FlagFirst == 0 {
			if pp := prev.BTH().PSN(); pk.BTH().PSN() != (pp+1)&0xffffff || prev.BTH().DestQP() != pk.BTH().DestQP() {
				t.Fatalf("frame %d (%v): PSN %d after %d", i, op, pk.BTH().PSN(), pp)
			}
		}
		if middle {
			middles++
		}
		if fl&wire.FlagFirst != 0 {
			msg++
		}
		wantSE := fl&wire.FlagLast != 0 && solicited[msg] && (fl&wire.FlagSend != 0 || op.Headers().Has(wire.HdrImmDt))
		if pk.BTH().SE() != wantSE {
			t.Fatalf("frame %d (%v, PSN %d): SE %v, want %v", i, op, pk.BTH().PSN(), pk.BTH().SE(), wantSE)
		}
		if op.Transport() == wire.TransportRC {
			noack++
			want := fl&wire.FlagLast != 0 || noack > limit
			if want {
				noack = 0
			}
			if pk.BTH().AckReq() != want {
				t.Fatalf("frame %d (%v, PSN %d): AckReq %v, want %v", i, op, pk.BTH().PSN(), pk.BTH().AckReq(), want)
			}
		} else if pk.BTH().AckReq() {
			t.Fatalf("frame %d (%v): AckReq on UC", i, op)
		}
		prev = pk
	}
	if middles < 90 {
		t.Fatalf("%d middle packets in %d frames", middles, len(frames))
	}
}
