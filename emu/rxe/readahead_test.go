package rxe

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
)

// foreignSpace is another process's address space as a daemon reaches it:
// every read is counted (each would be a system call), and reads at or
// past faultAt fail with EFAULT.
type foreignSpace struct {
	*dma.Memory
	reads   int
	faultAt uint64 // 0: none
}

func (s *foreignSpace) ReadAt(p []byte, addr uint64) (int, error) {
	s.reads++
	if s.faultAt != 0 && addr+uint64(len(p)) > s.faultAt {
		return 0, fmt.Errorf("read %#x+%d: %w", addr, len(p), unix.EFAULT)
	}
	return s.Memory.ReadAt(p, addr)
}

// foreignWriter is a pair whose requester (a) sends from a user MR in a
// foreignSpace to an MR of b, on an RC QP of path MTU 1024.
type foreignWriter struct {
	p      *pair
	space  *foreignSpace
	qa, qb *emu.QP
	src    []byte // the space's buffer
	lkey   uint32
	addr   uint64 // of src in the space
	dst    []byte
	raddr  uint64
	rkey   uint32
}

func newForeignWriter(t testing.TB, size int) *foreignWriter {
	p := newPair(t, pairOpts{})
	space := &foreignSpace{Memory: dma.NewMemory(0)}
	pd, err := p.a.dev.AllocUserPD(space)
	if err != nil {
		t.Fatal(err)
	}
	addr, src := space.Alloc(size)
	for i := range src {
		src[i] = byte(i * 13)
	}
	mr, err := pd.RegUserMR(addr, uint64(size), addr, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	init := &emu.QPInitAttr{SendCQ: p.a.scq, RecvCQ: p.a.rcq, QPType: qpstate.TypeRC, SQSigType: emu.SignalAllWR, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}}
	qa, err := pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	o := qpOpts{typ: qpstate.TypeRC, mtu: ib.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 16, destAtom: 16}
	qb := p.b.newQP(qpstate.TypeRC, nil, o)
	p.a.connect(qa, p.b, qb.QPNum(), 0, 0, o, allAccess)
	p.b.connect(qb, p.a, qa.QPNum(), 0, 0, o, allAccess)
	raddr, dst, rmr := p.b.buf(size, 0)
	space.reads = 0 // registration probed the pages
	return &foreignWriter{p: p, space: space, qa: qa, qb: qb, src: src, lkey: mr.LKey(), addr: addr,
		dst: dst, raddr: raddr, rkey: rmr.RKey()}
}

// write sends the whole buffer as one RDMA WRITE and returns its status.
func (w *foreignWriter) write(t testing.TB) emu.WCStatus {
	t.Helper()
	w.p.a.postSend(w.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: w.addr, Length: uint32(len(w.src)), LKey: w.lkey}}, RemoteAddr: w.raddr, RKey: w.rkey})
	w.p.settle()
	wcs := poll(w.p.a.scq)
	if len(wcs) != 1 {
		t.Fatalf("completions %+v, want one", wcs)
	}
	return wcs[0].Status
}

// TestRequesterReadsAheadFromAnotherAddressSpace checks that a WRITE from
// a user MR in another address space reads it once per readAheadSize, not
// once per packet, that a later WQE on the same buffer carries the bytes
// the buffer holds then, and that a fault further on fails the WQE.
func TestRequesterReadsAheadFromAnotherAddressSpace(t *testing.T) {
	t.Run("one read per readAheadSize", func(t *testing.T) {
		const size = 3 * readAheadSize / 2 // 96 packets of 1 KiB: two reads
		w := newForeignWriter(t, size)
		if st := w.write(t); st != emu.WCSuccess {
			t.Fatalf("WRITE: %v", st)
		}
		if !bytes.Equal(w.dst, w.src) {
			t.Fatal("the WRITE's data differ from the source buffer")
		}
		if w.space.reads != 2 {
			t.Errorf("%d reads of the source space for %d bytes, want 2", w.space.reads, size)
		}
	})
	t.Run("rewritten buffer", func(t *testing.T) {
		// The WQE completed: the program may rewrite its buffer and send
		// it again; the bytes read ahead for the first WQE (the whole
		// buffer) are not reused, though the next WQE may get the same
		// WQE slot.
		w := newForeignWriter(t, readAheadSize/2)
		for round := range 4 {
			for i := range w.src {
				w.src[i] = byte(round*31 + i)
			}
			if st := w.write(t); st != emu.WCSuccess {
				t.Fatalf("WRITE %d: %v", round, st)
			}
			if !bytes.Equal(w.dst, w.src) {
				t.Fatalf("WRITE %d carried stale data", round)
			}
		}
	})
	t.Run("fault further on", func(t *testing.T) {
		// The read ahead fails, the packets before the fault are read
		// one by one, the packet that reaches it fails the WQE.
		const size = readAheadSize
		w := newForeignWriter(t, size)
		w.space.faultAt = w.addr + size*3/4
		if st := w.write(t); st != emu.WCLocProtErr {
			t.Fatalf("WRITE over a fault: %v, want %v", st, emu.WCLocProtErr)
		}
		if want := 1 + size*3/4/1024 + 1; w.space.reads != want {
			t.Errorf("%d reads over the fault, want %d: the failed read ahead, then each packet's own", w.space.reads, want)
		}
	})
}

// BenchmarkRCWriteForeignSpace measures a 64 KiB RC WRITE at MTU 1024
// from a user MR in another address space (the daemon's case) and reports
// the reads of that space per WRITE (each a system call in the daemon).
func BenchmarkRCWriteForeignSpace(b *testing.B) {
	w := newForeignWriter(b, 64<<10)
	w.p.a.rec.off, w.p.b.rec.off = true, true
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	w.space.reads = 0
	for b.Loop() {
		if st := w.write(b); st != emu.WCSuccess {
			b.Fatal(st)
		}
	}
	b.ReportMetric(float64(w.space.reads)/float64(b.N), "reads/op")
}

// countWrites counts a foreignSpace's writes (each a system call in a
// daemon).
type countWrites struct {
	*foreignSpace
	writes int
}

func (s *countWrites) WriteAt(p []byte, addr uint64) (int, error) {
	s.writes++
	return s.Memory.WriteAt(p, addr)
}

// writeThenRead has p.a RDMA WRITE size bytes into rmr (at raddr, an MR
// of pd on p.b) and READ them back right behind, on a new RC QP pair whose
// b side is in pd; it returns that QP and the source and read-back bytes.
func writeThenRead(t *testing.T, p *pair, pd *emu.PD, raddr uint64, rmr *emu.MR, size uint32) (*emu.QP, []byte, []byte) {
	t.Helper()
	init := &emu.QPInitAttr{SendCQ: p.b.scq, RecvCQ: p.b.rcq, QPType: qpstate.TypeRC, SQSigType: emu.SignalAllWR, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}}
	qb, err := pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	o := qpOpts{typ: qpstate.TypeRC, mtu: ib.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 16, destAtom: 16}
	qa := p.a.newQP(qpstate.TypeRC, nil, o)
	p.a.connect(qa, p.b, qb.QPNum(), 0, 0, o, allAccess)
	p.b.connect(qb, p.a, qa.QPNum(), 0, 0, o, allAccess)
	src, sbuf, smr := p.a.buf(int(size), 5)
	back, bbuf, bmr := p.a.buf(int(size), 0)
	p.a.postSend(qa,
		emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{{Addr: src, Length: size, LKey: smr.LKey()}},
			RemoteAddr: raddr, RKey: rmr.RKey()},
		emu.SendWR{WRID: 2, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{{Addr: back, Length: size, LKey: bmr.LKey()}}, RemoteAddr: raddr, RKey: rmr.RKey()})
	p.settle()
	if wcs := poll(p.a.scq); len(wcs) != 1 || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	return qb, sbuf, bbuf
}

// TestResponderWritesBehindToAnotherAddressSpace checks that RDMA WRITE
// payload for a user MR in another address space reaches it in one write
// per writeBehindSize of a message, and that a READ of the same bytes
// queued right behind the WRITE returns them.
func TestResponderWritesBehindToAnotherAddressSpace(t *testing.T) {
	const size = 3 * writeBehindSize / 2 // 96 packets of 1 KiB
	p := newPair(t, pairOpts{})
	space := &countWrites{foreignSpace: &foreignSpace{Memory: dma.NewMemory(0)}}
	pd, err := p.b.dev.AllocUserPD(space)
	if err != nil {
		t.Fatal(err)
	}
	raddr, dst := space.Alloc(size)
	rmr, err := pd.RegUserMR(raddr, size, raddr, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	_, sbuf, bbuf := writeThenRead(t, p, pd, raddr, rmr, size)
	if !bytes.Equal(dst, sbuf) {
		t.Fatal("the WRITE's data differ in the destination")
	}
	if !bytes.Equal(bbuf, sbuf) {
		t.Fatal("the READ behind the WRITE returned other bytes")
	}
	if space.writes != 2 {
		t.Errorf("%d writes to the destination space for a %d-byte WRITE, want 2", space.writes, size)
	}
}

// pinnedSpace is another address space that maps its pages for the
// device (dma.Pinner): it counts pins, releases and the transfers that go
// through ReadAt and WriteAt instead.
type pinnedSpace struct {
	*countWrites
	pins, releases int
}

func (s *pinnedSpace) Pin(addr, length uint64) ([]byte, func(), bool) {
	b, err := s.Memory.Slice(addr, int(length))
	if err != nil {
		return nil, nil, false
	}
	s.pins++
	return b, func() { s.releases++ }, true
}

// TestPinnedMRIsReachedDirectly checks that a user MR in a space that
// pins its pages (dma.Pinner, ib_umem_get) is written and read through the
// pinned pages, with no transfer through the space, and that
// deregistration releases the pin once (ib_umem_release).
func TestPinnedMRIsReachedDirectly(t *testing.T) {
	const size = 3 * writeBehindSize / 2
	p := newPair(t, pairOpts{})
	space := &pinnedSpace{countWrites: &countWrites{foreignSpace: &foreignSpace{Memory: dma.NewMemory(0)}}}
	pd, err := p.b.dev.AllocUserPD(space)
	if err != nil {
		t.Fatal(err)
	}
	raddr, dst := space.Alloc(size)
	rmr, err := pd.RegUserMR(raddr, size, raddr, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	if space.pins != 1 {
		t.Fatalf("%d pins for one REG_MR", space.pins)
	}
	space.reads = 0 // the registration probed the pages (pin)
	qb, sbuf, bbuf := writeThenRead(t, p, pd, raddr, rmr, size)
	if !bytes.Equal(dst, sbuf) || !bytes.Equal(bbuf, sbuf) {
		t.Fatal("the WRITE's or the READ's data differ")
	}
	if space.reads != 0 || space.writes != 0 {
		t.Errorf("%d reads and %d writes through the space, want none", space.reads, space.writes)
	}
	if err := qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := rmr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if space.releases != 1 {
		t.Errorf("%d releases after the deregistration, want 1", space.releases)
	}
}
