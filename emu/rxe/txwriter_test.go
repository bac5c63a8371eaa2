package rxe_test

import (
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// syscallLink stands for a link whose every write is a system call (a
// TAP: rxe.NonBlockingWriter). It records the PSN of each request frame
// written, and its first write, once gate is set, waits until release is
// closed after telling entered: a write still in the kernel.
type syscallLink struct {
	link.Link
	gate     bool
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	opened   sync.Once
	mu       sync.Mutex
	psns     []uint32
	requests int
}

func newSyscallLink(l link.Link, gate bool) *syscallLink {
	return &syscallLink{Link: l, gate: gate, entered: make(chan struct{}), release: make(chan struct{})}
}

func (l *syscallLink) NonBlockingWrites() bool { return true }

func (l *syscallLink) WritePackets(bufs [][]byte) (int, error) {
	if l.gate {
		l.once.Do(func() {
			close(l.entered)
			<-l.release
		})
	}
	n, err := l.Link.WritePackets(bufs)
	l.mu.Lock()
	for _, b := range bufs[:n] {
		var p wire.Packet
		if p.Decode(b) == nil && p.Opcode() != wire.RCAcknowledge {
			l.psns = append(l.psns, p.BTH().PSN())
			l.requests++
		}
	}
	l.mu.Unlock()
	return n, err
}

// open releases the gated write, if it has not been released yet.
func (l *syscallLink) open() { l.opened.Do(func() { close(l.release) }) }

// written returns the request PSNs written so far.
func (l *syscallLink) written() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint32(nil), l.psns...)
}

// writerPair connects an RC pair whose A writes through a syscallLink
// (gated or not); the MTU is 1024, so a 16 KiB WRITE is 16 packets.
func writerPair(t *testing.T, gate bool) (*rxetest.Link, *syscallLink, *rxetest.QP, *rxetest.QP) {
	return writerPairOf(t, gate, qpstate.TypeRC)
}

// writerPairOf is writerPair with QPs of type typ. The test's end opens
// the gate before the devices close, so that a test that fails with the
// gate shut does not wait for the held write.
func writerPairOf(t *testing.T, gate bool, typ qpstate.Type) (*rxetest.Link, *syscallLink, *rxetest.QP, *rxetest.QP) {
	t.Helper()
	var la *syscallLink
	l, err := rxetest.NewLink(rxetest.Options{Wrap: func(i int, lk link.Link) link.Link {
		if i == 0 {
			la = newSyscallLink(lk, gate)
			return la
		}
		return lk
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Cleanup(la.open)
	a, b, err := l.Pair(typ, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	return l, la, a, b
}

func write16K(a, b *rxetest.QP, id uint64) emu.SendWR {
	return emu.SendWR{WRID: id, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, 16<<10)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}
}

// postWithin posts wrs on qp and fails the test if PostSend has not
// returned within d; it then releases the link and waits for it.
func postWithin(t *testing.T, l *syscallLink, qp *rxetest.QP, wrs []emu.SendWR, d time.Duration) {
	t.Helper()
	posted := make(chan error, 1)
	go func() {
		_, err := qp.PostSend(wrs)
		posted <- err
	}()
	select {
	case err := <-posted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Errorf("PostSend still writing after %v: the burst was not handed to the stream's writer", d)
		l.open()
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBurstIsWrittenByTheStreamWriter: PostSend of a 16-packet WRITE
// returns while the link's first write is still in the kernel: the burst
// went to the stream's writer goroutine, and the poster is free to build
// the next. Every packet then reaches the wire, in PSN order, and the
// WRITE completes.
func TestBurstIsWrittenByTheStreamWriter(t *testing.T) {
	l, la, a, b := writerPair(t, true)
	postWithin(t, la, a, []emu.SendWR{write16K(a, b, 1)}, 5*time.Second)
	<-la.entered
	la.open()
	wcs, err := rxetest.Wait(l.A.CQ, 1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if wcs[0].Status != emu.WCSuccess {
		t.Fatalf("WRITE completed with %v", wcs[0].Status)
	}
	checkInOrder(t, la.written(), a.PSN, 16)
}

// TestBatchQueuesBehindTheWriter: while the writer goroutine is still
// writing a burst, one-packet SENDs posted after it queue behind it
// rather than go out first: the wire carries the requests in PSN order.
func TestBatchQueuesBehindTheWriter(t *testing.T) {
	l, la, a, b := writerPair(t, true)
	for i := range 3 {
		if _, err := b.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{b.SGE(32<<10+64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	postWithin(t, la, a, []emu.SendWR{write16K(a, b, 1)}, 5*time.Second)
	<-la.entered
	for i := range 3 {
		wr := emu.SendWR{WRID: uint64(10 + i), Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{a.SGE(32<<10+64*i, 64)}}
		postWithin(t, la, a, []emu.SendWR{wr}, 5*time.Second)
	}
	la.open()
	// A's 4 send completions and B's 3 receive completions share the CQ
	// of each end.
	if _, err := rxetest.Wait(l.A.CQ, 4, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	checkInOrder(t, la.written(), a.PSN, 19)
}

// TestSmallBatchIsWrittenByItsPoster: a one-packet SEND is on the link
// when PostSend returns, with no wake-up of another goroutine between.
func TestSmallBatchIsWrittenByItsPoster(t *testing.T) {
	l, la, a, b := writerPair(t, false)
	if _, err := b.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{b.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if got := la.written(); len(got) != 1 {
		t.Errorf("%d request frames written when PostSend returned, want the SEND's 1", len(got))
	}
	if _, err := rxetest.Wait(l.A.CQ, 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWritesWhatTheWriterHolds: Close while the writer goroutine
// holds a burst waits until it is written, then closes the link: all 16
// packets reach the wire.
func TestCloseWritesWhatTheWriterHolds(t *testing.T) {
	l, la, a, b := writerPair(t, true)
	postWithin(t, la, a, []emu.SendWR{write16K(a, b, 1)}, 5*time.Second)
	<-la.entered
	closed := make(chan error, 1)
	go func() { closed <- l.A.Dev.Close() }()
	early := false
	select {
	case err := <-closed:
		t.Errorf("Close returned (%v) while the writer held frames", err)
		early = true
	case <-time.After(20 * time.Millisecond):
	}
	la.open()
	if !early {
		<-closed
	}
	if got := la.written(); len(got) != 16 {
		t.Errorf("%d of the WRITE's 16 packets written before the link closed", len(got))
	}
}

// checkInOrder fails unless psns are the n PSNs from first on, in order.
func checkInOrder(t *testing.T, psns []uint32, first uint32, n int) {
	t.Helper()
	if len(psns) != n {
		t.Fatalf("%d request frames on the wire, want %d: PSNs %v", len(psns), n, psns)
	}
	for i, p := range psns {
		if p != (first+uint32(i))&0xFFFFFF {
			t.Fatalf("request %d has PSN %#x, want %#x: the wire order is %v", i, p, first+uint32(i), psns)
		}
	}
}

// TestWriterQueueIsBounded: UD sends complete as their packets are
// queued, so a program that posts faster than the link writes would grow
// the writer's queue without end. While the link's first write is held,
// a program posting 2,000 sends in batches of 16 (polling its completions
// to free the send queue) is held back once the writer holds a bounded
// number of frames; released, every send reaches the link.
func TestWriterQueueIsBounded(t *testing.T) {
	const total, batch = 2000, 16
	l, la, a, b := writerPairOf(t, true, qpstate.TypeUD)
	ah, err := a.AH(b)
	if err != nil {
		t.Fatal(err)
	}
	wrs := make([]emu.SendWR, batch)
	for i := range wrs {
		wrs[i] = emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend, SendFlags: emu.SendSignaled, AH: ah,
			RemoteQPN: b.QPNum(), RemoteQKey: rxetest.QKey, SGList: []emu.SGE{a.SGE(0, 64)}}
	}
	var mu sync.Mutex
	posted := 0
	done := make(chan error, 1)
	go func() {
		for range total / batch {
			if _, err := a.PostSend(wrs); err != nil {
				done <- err
				return
			}
			if _, err := rxetest.Wait(l.A.CQ, batch, 10*time.Second); err != nil {
				done <- err
				return
			}
			mu.Lock()
			posted += batch
			mu.Unlock()
		}
		done <- nil
	}()
	<-la.entered
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	held := posted
	mu.Unlock()
	if held >= total/2 {
		t.Errorf("%d of %d sends posted while the link wrote nothing: the writer's queue is not bounded", held, total)
	}
	la.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(la.written()) < total && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := len(la.written()); n != total {
		t.Errorf("%d of the %d sends reached the link", n, total)
	}
}
