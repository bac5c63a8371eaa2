package rxe

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// soakN is the number of RC scenarios of TestSoak. CI runs 200; the
// goal's scale is -soak.n=1000 (go test ./emu/rxe -run '^TestSoak$'
// -soak.n=1000), which takes about 20 s on a shared 2-vCPU machine
// (virtual time: the scenarios run on a clock.Manual).
var soakN = flag.Int("soak.n", 200, "number of randomized transport soak scenarios")

// soakOp is one work request of a scenario with what it must produce.
type soakOp struct {
	op      emu.WROpcode
	size    int
	sgl     []emu.SGE
	src     []byte // data sent (SEND/WRITE) or expected (READ)
	dst     []byte // where it must land
	add     uint64
	cmp     uint64 // CMP_SWP: the value the target holds, swapped for add
	want    uint64 // FETCH_ADD, CMP_SWP: the original value it must return
	imm     uint32
	recvIdx int // SEND / WRITE_WITH_IMM: index of the receive it consumes
}

// TestSoak runs seeded random RC scenarios (SEND, SEND_WITH_IMM, WRITE,
// WRITE_WITH_IMM, READ, CMP_SWP and FETCH_ADD of mixed sizes, path MTU 256
// to 4096) under 5% drop, duplicate, reorder and corruption in both
// directions, checking memory contents, that every atomic ran exactly once
// (the originals it returned), and exactly-once, in-order completions:
// each work request completes once, and nothing more completes after. Each scenario prints the seed that
// replays it (-seed=S -soak.n=1).
func TestSoak(t *testing.T) {
	base := testenv.Seed(t)
	n := *soakN
	if testing.Short() {
		n = min(n, 20)
	}
	for i := range n {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if !soakScenario(t, seed) {
				t.Errorf("replay: go test ./emu/rxe -run 'TestSoak' -seed=%d -soak.n=1", seed)
			}
		})
	}
}

func soakScenario(t *testing.T, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fc := &link.FaultConfig{Seed: seed, Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05}
	mtus := []ib.MTU{ib.MTU256, ib.MTU512, ib.MTU1024, ib.MTU2048, ib.MTU4096}
	p := newPair(t, pairOpts{faults: fc})
	pmtu := mtus[rng.IntN(len(mtus))]
	c := p.connect(qpOpts{mtu: pmtu, timeout: 8, retry: 7, rnr: 7, minRNR: 1,
		sqpsnA: uint32(rng.IntN(1 << 24)), sqpsnB: uint32(rng.IntN(1 << 24)), rdAtomic: uint8(1 + rng.IntN(8))})
	nops := 1 + rng.IntN(24)
	var sops []*soakOp
	var recvs []*soakOp
	ctr, ctrB, ctrMR := p.b.buf(8, 0)
	binary.LittleEndian.PutUint64(ctrB, 0)
	var sum uint64
	sizeOf := func() int {
		switch rng.IntN(4) {
		case 0:
			return rng.IntN(64)
		case 1:
			return rng.IntN(4096)
		default:
			return rng.IntN(64 << 10)
		}
	}
	// split cuts a registered buffer into 1..4 SGEs.
	split := func(addr uint64, n int, lkey uint32) []emu.SGE {
		k := 1 + rng.IntN(4)
		var sgl []emu.SGE
		off := 0
		for i := range k {
			l := (n - off) / (k - i)
			if i < k-1 && l > 0 {
				l = rng.IntN(l + 1)
			} else {
				l = n - off
			}
			sgl = append(sgl, emu.SGE{Addr: addr + uint64(off), Length: uint32(l), LKey: lkey})
			off += l
		}
		return sgl
	}
	var wrs []emu.SendWR
	for i := range nops {
		o := &soakOp{size: sizeOf()}
		wr := emu.SendWR{WRID: uint64(i), SendFlags: emu.SendSignaled}
		switch rng.IntN(8) {
		case 0, 1:
			o.op = emu.WRSend
		case 2:
			o.op = emu.WRSendWithImm
		case 3:
			o.op = emu.WRRDMAWrite
		case 4:
			o.op = emu.WRRDMAWriteWithImm
		case 5:
			o.op = emu.WRRDMARead
		case 6:
			o.op = emu.WRAtomicCmpAndSwp
			o.size = 8
		default:
			o.op = emu.WRAtomicFetchAndAdd
			o.size = 8
		}
		wr.Opcode = o.op
		o.imm = rng.Uint32()
		wr.ImmData = o.imm
		switch o.op {
		case emu.WRSend, emu.WRSendWithImm:
			a, data, mr := p.a.buf(o.size, byte(rng.Uint32()))
			o.src = data
			wr.SGList = split(a, o.size, mr.LKey())
			ra, rb, rmr := p.b.buf(o.size+rng.IntN(64), 0)
			o.dst = rb
			o.recvIdx = len(recvs)
			recvs = append(recvs, o)
			p.b.postRecv(c.qb, emu.RecvWR{WRID: uint64(i), SGList: split(ra, len(rb), rmr.LKey())})
		case emu.WRRDMAWrite, emu.WRRDMAWriteWithImm:
			a, data, mr := p.a.buf(o.size, byte(rng.Uint32()))
			o.src = data
			wr.SGList = split(a, o.size, mr.LKey())
			ra, rb, rmr := p.b.buf(o.size, 0)
			o.dst = rb
			wr.RemoteAddr, wr.RKey = ra, rmr.RKey()
			if o.op == emu.WRRDMAWriteWithImm {
				o.recvIdx = len(recvs)
				recvs = append(recvs, o)
				p.b.postRecv(c.qb, emu.RecvWR{WRID: uint64(i)})
			}
		case emu.WRRDMARead:
			ra, rdata, rmr := p.b.buf(o.size, byte(rng.Uint32()))
			o.src = rdata
			a, b, mr := p.a.buf(o.size, 0)
			o.dst = b
			wr.SGList = split(a, o.size, mr.LKey())
			wr.RemoteAddr, wr.RKey = ra, rmr.RKey()
		case emu.WRAtomicFetchAndAdd:
			a, b, mr := p.a.buf(8, 0)
			o.dst = b
			o.add = uint64(rng.IntN(1000) + 1)
			sum += o.add
			wr.SGList = []emu.SGE{{Addr: a, Length: 8, LKey: mr.LKey()}}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = ctr, ctrMR.RKey(), o.add
			o.want = sum - o.add // RC executes in order: the sum of the adds before
		case emu.WRAtomicCmpAndSwp:
			// A cell of its own holding cmp: the swap succeeds once; run
			// twice, the second would return the swapped value.
			a, b, mr := p.a.buf(8, 0)
			o.dst = b
			ra, rb, rmr := p.b.buf(8, 0)
			o.cmp, o.add = rng.Uint64(), rng.Uint64()
			binary.LittleEndian.PutUint64(rb, o.cmp)
			o.src, o.want = rb, o.cmp
			wr.SGList = []emu.SGE{{Addr: a, Length: 8, LKey: mr.LKey()}}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap = ra, rmr.RKey(), o.cmp, o.add
		}
		o.sgl = wr.SGList
		sops = append(sops, o)
		wrs = append(wrs, wr)
	}
	p.a.postSend(c.qa, wrs...)
	var swc, rwc []emu.WC
	deadline := p.clk.Now().Add(120 * time.Second)
	for (len(swc) < len(sops) || len(rwc) < len(recvs)) && p.clk.Now().Before(deadline) {
		p.run(5 * time.Millisecond)
		swc = append(swc, poll(p.a.scq)...)
		rwc = append(rwc, poll(p.b.rcq)...)
	}
	t.Logf("%d ops, path MTU %v; faults a->b %+v b->a %+v; retries %d, dup requests %d, seq NAKs %d",
		len(sops), pmtu, p.a.flt.Stats(), p.b.flt.Stats(), p.a.counter("completer_retry_err"),
		p.b.counter("duplicate_request"), p.b.counter("out_of_seq_request"))
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	// Exactly once: nothing more completes, however long the pair runs on.
	p.run(10 * time.Second)
	if extra := append(poll(p.a.scq), poll(p.b.rcq)...); len(extra) > 0 {
		fail("%d completions after all had completed: %+v", len(extra), extra)
	}
	seen := map[uint64]int{}
	for _, w := range rwc {
		if seen[w.WRID]++; seen[w.WRID] > 1 {
			fail("receive wr_id %d completed twice", w.WRID)
		}
	}
	if len(swc) != len(sops) || len(rwc) != len(recvs) {
		fail("%d/%d send and %d/%d receive completions after %v virtual (states %v %v)", len(swc), len(sops),
			len(rwc), len(recvs), 120*time.Second, p.a.state(c.qa), p.b.state(c.qb))
	}
	for i, w := range swc {
		if w.WRID != uint64(i) || w.Status != emu.WCSuccess {
			fail("send completion %d: wr_id %d status %v", i, w.WRID, w.Status)
			return ok
		}
	}
	origs := map[uint64]bool{}
	for i, o := range sops {
		switch o.op {
		case emu.WRSend, emu.WRSendWithImm, emu.WRRDMAWrite, emu.WRRDMAWriteWithImm, emu.WRRDMARead:
			if !bytes.Equal(o.dst[:o.size], o.src) {
				fail("op %d (%v, %d bytes): data differs", i, o.op, o.size)
			}
		case emu.WRAtomicFetchAndAdd:
			v := binary.LittleEndian.Uint64(o.dst)
			if origs[v] {
				fail("op %d: fetch-add original %d seen twice", i, v)
			}
			origs[v] = true
			if v != o.want {
				fail("op %d: fetch-add returned %d, want %d (the adds before it, once each)", i, v, o.want)
			}
		case emu.WRAtomicCmpAndSwp:
			if v := binary.LittleEndian.Uint64(o.dst); v != o.want {
				fail("op %d: cmp-swap returned %#x, want %#x (run twice?)", i, v, o.want)
			}
			if v := binary.LittleEndian.Uint64(o.src); v != o.add {
				fail("op %d: cmp-swap target %#x, want the swapped %#x", i, v, o.add)
			}
		}
	}
	if v := binary.LittleEndian.Uint64(ctrB); v != sum {
		fail("counter %d, want %d (an atomic ran twice or not at all)", v, sum)
	}
	for i, w := range rwc {
		if i >= len(recvs) {
			break
		}
		o := recvs[i]
		want := uint32(o.size)
		if w.Status != emu.WCSuccess || w.ByteLen != want {
			fail("recv completion %d: status %v byte_len %d, want %d", i, w.Status, w.ByteLen, want)
		}
		if (o.op == emu.WRSendWithImm || o.op == emu.WRRDMAWriteWithImm) && w.ImmData != o.imm {
			fail("recv completion %d: imm %#x, want %#x", i, w.ImmData, o.imm)
		}
	}
	return ok
}

// TestSoakUnreliable runs seeded UC and UD scenarios under 5% drop,
// duplicate and corruption (no reordering: UC and UD deliver reordered
// message starts out of order, legitimately). Unreliable transports may
// lose messages, and a duplicated UC or UD message start is accepted
// again, as in rxe; so the checks are: every send completes once, in
// order, successfully; every receive completion holds exactly one sent
// message, whole; messages arrive in send order (repeats allowed).
func TestSoakUnreliable(t *testing.T) {
	base := testenv.Seed(t)
	n := max(1, *soakN/4)
	for i := range n {
		seed := base + uint64(i)
		for _, typ := range []qpstate.Type{qpstate.TypeUC, qpstate.TypeUD} {
			t.Run(fmt.Sprintf("%v/%d", typ.Name(), seed), func(t *testing.T) {
				if !soakUnreliable(t, seed, typ) {
					t.Errorf("replay: go test ./emu/rxe -run 'TestSoakUnreliable' -seed=%d -soak.n=4", seed)
				}
			})
		}
	}
}

func soakUnreliable(t *testing.T, seed uint64, typ qpstate.Type) bool {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545F4914F6CDD1D))
	fc := &link.FaultConfig{Seed: seed, Drop: 0.05, Duplicate: 0.05, Corrupt: 0.05}
	p := newPair(t, pairOpts{faults: fc, mtu: 1500})
	var qa, qb *emu.QP
	var ah *emu.AH
	hdr := 0
	maxSize := 16 << 10
	if typ == qpstate.TypeUD {
		qa, qb = p.a.udQP(typ, nil), p.b.udQP(typ, nil)
		ah = p.a.ah(p.b.ip, p.b.mac)
		hdr, maxSize = emu.GRHSize, 1024
	} else {
		c := p.connect(qpOpts{typ: typ, mtu: ib.MTU1024})
		qa, qb = c.qa, c.qb
	}
	nmsg := 1 + rng.IntN(40)
	msgs := make([][]byte, nmsg)
	var wrs []emu.SendWR
	for i := range nmsg {
		size := 8 + rng.IntN(maxSize-8)
		a, data, mr := p.a.buf(size, byte(rng.Uint32()))
		binary.BigEndian.PutUint64(data, uint64(i))
		msgs[i] = data
		wrs = append(wrs, emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend, SendFlags: emu.SendSignaled, AH: ah,
			RemoteQPN: qb.QPNum(), RemoteQKey: 0x11111111, SGList: []emu.SGE{{Addr: a, Length: uint32(size), LKey: mr.LKey()}}})
	}
	bufs := map[uint64][]byte{}
	for i := range 2 * nmsg {
		a, b, mr := p.b.buf(maxSize+hdr, 0)
		bufs[uint64(i)] = b
		p.b.postRecv(qb, emu.RecvWR{WRID: uint64(i), SGList: []emu.SGE{{Addr: a, Length: uint32(len(b)), LKey: mr.LKey()}}})
	}
	for _, wr := range wrs {
		p.a.postSend(qa, wr)
	}
	p.run(100 * time.Millisecond)
	ok := true
	swc := poll(p.a.scq)
	if len(swc) != nmsg {
		t.Errorf("%d send completions, want %d", len(swc), nmsg)
		ok = false
	}
	for i, w := range swc {
		if w.WRID != uint64(i) || w.Status != emu.WCSuccess {
			t.Errorf("send completion %d: %+v", i, w)
			return false
		}
	}
	last := -1
	rwc := poll(p.b.rcq)
	t.Logf("%s: %d messages sent, %d received; faults %+v", typ.Name(), nmsg, len(rwc), p.a.flt.Stats())
	for _, w := range rwc {
		if w.Status != emu.WCSuccess {
			t.Errorf("receive %d: %v", w.WRID, w.Status)
			ok = false
			continue
		}
		b := bufs[w.WRID][hdr:w.ByteLen]
		if len(b) < 8 {
			t.Errorf("receive %d: %d bytes", w.WRID, len(b))
			ok = false
			continue
		}
		seq := int(binary.BigEndian.Uint64(b))
		if seq >= nmsg || !bytes.Equal(b, msgs[seq]) {
			t.Errorf("receive %d: not a sent message (seq %d, %d bytes)", w.WRID, seq, len(b))
			ok = false
			continue
		}
		if seq < last {
			t.Errorf("message %d after %d", seq, last)
			ok = false
		}
		last = seq
	}
	return ok
}
