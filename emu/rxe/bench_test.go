package rxe

import (
	"fmt"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
)

// benchPair is a connected RC pair with a source and destination buffer of
// size bytes.
type benchPair struct {
	p        *pair
	c        conn
	src, dst uint64
	mra, mrb *emu.MR
}

func newBenchPair(b *testing.B, mtu ib.MTU, size int) *benchPair {
	p := newPair(b, pairOpts{mtu: 9000})
	c := p.connect(qpOpts{mtu: mtu, maxSend: 1024, maxRecv: 1024})
	src, _, mra := p.a.buf(size, 1)
	dst, _, mrb := p.b.buf(size, 0)
	p.a.rec.off, p.b.rec.off = true, true
	return &benchPair{p: p, c: c, src: src, dst: dst, mra: mra, mrb: mrb}
}

// benchDepth is how many WRs are in flight per round.
const benchDepth = 16

var benchSizes = []int{64, 1 << 10, 4 << 10, 64 << 10, 1 << 20}

// BenchmarkRCWrite measures RC RDMA WRITE throughput between two
// synchronous devices over link.Pipe (one goroutine drives both).
func BenchmarkRCWrite(b *testing.B) {
	for _, mtu := range []ib.MTU{ib.MTU1024, ib.MTU4096} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("mtu=%d/size=%d", mtu.Bytes(), size), func(b *testing.B) {
				bp := newBenchPair(b, mtu, size)
				wrs := make([]emu.SendWR, benchDepth)
				for i := range wrs {
					wrs[i] = emu.SendWR{Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{{Addr: bp.src, Length: uint32(size), LKey: bp.mra.LKey()}},
						RemoteAddr: bp.dst, RKey: bp.mrb.RKey()}
				}
				wrs[benchDepth-1].SendFlags = emu.SendSignaled
				wc := make([]emu.WC, 16)
				b.SetBytes(int64(size) * benchDepth)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := bp.c.qa.PostSend(wrs); err != nil {
						b.Fatal(err)
					}
					bp.p.settle()
					if n := bp.p.a.scq.Poll(wc); n != 1 || wc[0].Status != emu.WCSuccess {
						b.Fatalf("%d completions %+v", n, wc[0])
					}
				}
			})
		}
	}
}

// BenchmarkRCSend measures RC SEND throughput (receives reposted each
// round).
func BenchmarkRCSend(b *testing.B) {
	for _, mtu := range []ib.MTU{ib.MTU1024, ib.MTU4096} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("mtu=%d/size=%d", mtu.Bytes(), size), func(b *testing.B) {
				bp := newBenchPair(b, mtu, size)
				wrs := make([]emu.SendWR, benchDepth)
				rwrs := make([]emu.RecvWR, benchDepth)
				for i := range wrs {
					wrs[i] = emu.SendWR{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: bp.src, Length: uint32(size), LKey: bp.mra.LKey()}}}
					rwrs[i] = emu.RecvWR{SGList: []emu.SGE{{Addr: bp.dst, Length: uint32(size), LKey: bp.mrb.LKey()}}}
				}
				wrs[benchDepth-1].SendFlags = emu.SendSignaled
				wc := make([]emu.WC, benchDepth)
				b.SetBytes(int64(size) * benchDepth)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := bp.c.qb.PostRecv(rwrs); err != nil {
						b.Fatal(err)
					}
					if _, err := bp.c.qa.PostSend(wrs); err != nil {
						b.Fatal(err)
					}
					bp.p.settle()
					if n := bp.p.a.scq.Poll(wc); n != 1 || wc[0].Status != emu.WCSuccess {
						b.Fatalf("%d completions", n)
					}
					if n := bp.p.b.rcq.Poll(wc); n != benchDepth {
						b.Fatalf("%d receive completions", n)
					}
				}
			})
		}
	}
}

// BenchmarkRCPingPong measures the round trip of a 64-byte RC SEND answered
// by a 64-byte SEND (ib_send_lat's pattern), in one goroutine.
func BenchmarkRCPingPong(b *testing.B) {
	bp := newBenchPair(b, ib.MTU1024, 64)
	srcB, _, mrsb := bp.p.b.buf(64, 2)
	dstA, _, mrda := bp.p.a.buf(64, 0)
	ping := []emu.SendWR{{Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{{Addr: bp.src, Length: 64, LKey: bp.mra.LKey()}}}}
	pong := []emu.SendWR{{Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{{Addr: srcB, Length: 64, LKey: mrsb.LKey()}}}}
	ra := []emu.RecvWR{{SGList: []emu.SGE{{Addr: dstA, Length: 64, LKey: mrda.LKey()}}}}
	rb := []emu.RecvWR{{SGList: []emu.SGE{{Addr: bp.dst, Length: 64, LKey: bp.mrb.LKey()}}}}
	wc := make([]emu.WC, 4)
	b.ReportAllocs()
	for b.Loop() {
		bp.c.qb.PostRecv(rb)
		bp.c.qa.PostRecv(ra)
		bp.c.qa.PostSend(ping)
		bp.p.settle()
		bp.c.qb.PostSend(pong)
		bp.p.settle()
		n := bp.p.a.scq.Poll(wc) + bp.p.a.rcq.Poll(wc) + bp.p.b.scq.Poll(wc) + bp.p.b.rcq.Poll(wc)
		if n != 4 {
			b.Fatalf("%d completions", n)
		}
	}
}

// TestAllocsPerPacket measures the steady-state allocations per packet
// of a 64 KiB RC WRITE at MTU 4096 (16 request packets and 1 ACK) through
// post, both devices' pipelines and poll. Only the WQE itself allocates
// (the WR and its SGE list are copied at post, as rxe copies them into its
// ring): the packet path allocates nothing.
func TestAllocsPerPacket(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 9000, queueLen: 64})
	c := p.connect(qpOpts{mtu: ib.MTU4096})
	const size = 64 << 10
	src, _, mra := p.a.buf(size, 1)
	dst, _, mrb := p.b.buf(size, 0)
	p.a.rec.off, p.b.rec.off = true, true
	wrs := []emu.SendWR{{Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: size, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()}}
	wc := make([]emu.WC, 1)
	round := func() {
		c.qa.PostSend(wrs)
		p.settle()
		if p.a.scq.Poll(wc) != 1 {
			t.Fatal("no completion")
		}
	}
	for range 200 {
		round() // warm the pools and the pipe's buffers
	}
	allocs := testing.AllocsPerRun(200, round)
	perPacket := allocs / 17
	t.Logf("%.1f allocations per 17-packet round: %.2f per packet", allocs, perPacket)
	if allocs > 4 {
		t.Errorf("%.1f allocations per round, want at most the WQE's (4)", allocs)
	}
}

// BenchmarkRCPingPongAsync is the 64-byte ping-pong between two devices
// that each process frames in their own goroutine on the real clock (the
// default mode), the caller spinning on the CQs as ib_send_lat does.
func BenchmarkRCPingPongAsync(b *testing.B) {
	a, z := asyncPair(b)
	o := qpOpts{mtu: ib.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 1, rdAtomic: 1, destAtom: 1}
	qa, qz := a.newQP(qpstate.TypeRC, nil, o), z.newQP(qpstate.TypeRC, nil, o)
	a.connect(qa, z, qz.QPNum(), 0, 0, o, allAccess)
	z.connect(qz, a, qa.QPNum(), 0, 0, o, allAccess)
	sa, _, ma := a.buf(64, 1)
	sz, _, mz := z.buf(64, 2)
	ping := []emu.SendWR{{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: sa, Length: 64, LKey: ma.LKey()}}}}
	pong := []emu.SendWR{{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: sz, Length: 64, LKey: mz.LKey()}}}}
	ra := []emu.RecvWR{{SGList: []emu.SGE{{Addr: sa, Length: 64, LKey: ma.LKey()}}}}
	rz := []emu.RecvWR{{SGList: []emu.SGE{{Addr: sz, Length: 64, LKey: mz.LKey()}}}}
	wc := make([]emu.WC, 1)
	spin := func(cq *emu.CQ) {
		for cq.Poll(wc) == 0 {
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		qz.PostRecv(rz)
		qa.PostRecv(ra)
		qa.PostSend(ping)
		spin(z.rcq)
		qz.PostSend(pong)
		spin(a.rcq)
	}
}
