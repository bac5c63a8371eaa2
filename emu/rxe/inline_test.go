package rxe_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// asyncLink is an rxetest.Link of two asynchronous devices with a
// connected RC pair; o's Rxe and Wrap apply.
func asyncLink(t *testing.T, o rxetest.Options, n int) (l *rxetest.Link, a, b *rxetest.QP) {
	t.Helper()
	l, err := rxetest.NewLink(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if a, b, err = l.Pair(qpstate.TypeRC, n); err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	return l, a, b
}

func fillSeq(buf []byte, seed byte) {
	for i := range buf {
		buf[i] = byte(i*7) + seed
	}
}

// TestPostSendRunsTheChainInline: between two asynchronous devices on a
// bare pipe, the RDMA WRITE's packets, the peer's ACK and the completion
// are all processed in the goroutine of PostSend: when it returns, the
// bytes are in B's memory and the CQE is on A's CQ, and both devices
// count the frames they processed that way.
func TestPostSendRunsTheChainInline(t *testing.T) {
	l, a, b := asyncLink(t, rxetest.Options{}, 1<<16)
	const n = 16 << 10 // 16 packets at path MTU 1024
	fillSeq(a.Buf[:n], 5)
	if _, err := a.PostSend([]emu.SendWR{{WRID: 7, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]emu.WC, 2)
	if k := l.A.CQ.Poll(wc); k != 1 || wc[0].WRID != 7 || wc[0].Status != emu.WCSuccess {
		t.Fatalf("after PostSend returned: polled %d %+v, want WR 7's success", k, wc[:k])
	}
	if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Fatal("B's memory does not hold the bytes written")
	}
	if got := l.B.Dev.InlineFrames(); got != 16 {
		t.Errorf("B processed %d frames inline, want the 16 packets", got)
	}
	if got := l.A.Dev.InlineFrames(); got != 1 {
		t.Errorf("A processed %d frames inline, want the one ACK", got)
	}
}

// TestNoInlineLeavesFramesToTheReaders: with Config.NoInline the same
// WRITE completes through the reading goroutines, none inline.
func TestNoInlineLeavesFramesToTheReaders(t *testing.T) {
	l, a, b := asyncLink(t, rxetest.Options{Rxe: func(_ int, c *rxe.Config) { c.NoInline = true }}, 1<<16)
	const n = 16 << 10
	fillSeq(a.Buf[:n], 9)
	if _, err := a.PostSend([]emu.SendWR{{WRID: 7, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rxetest.Wait(l.A.CQ, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Fatal("B's memory does not hold the bytes written")
	}
	if x, y := l.A.Dev.InlineFrames(), l.B.Dev.InlineFrames(); x != 0 || y != 0 {
		t.Errorf("frames processed inline: A %d, B %d; want none", x, y)
	}
}

// wrapped is a link that is not a bare pipe end: a capture or a fault
// injector in a real program, which must see every frame.
type wrapped struct{ link.Link }

// TestObservableLinkIsNeverInline: when either end's link is wrapped, the
// frames go through the link and the reading goroutines, never inline, in
// both directions.
func TestObservableLinkIsNeverInline(t *testing.T) {
	for _, w := range []int{0, 1} {
		l, a, b := asyncLink(t, rxetest.Options{Wrap: func(i int, lk link.Link) link.Link {
			if i == w {
				return wrapped{lk}
			}
			return lk
		}}, 1<<16)
		const n = 8 << 10
		for _, p := range [][2]*rxetest.QP{{a, b}, {b, a}} {
			src, dst := p[0], p[1]
			fillSeq(src.Buf[:n], byte(w))
			if _, err := src.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr, RKey: dst.MR.RKey()}}); err != nil {
				t.Fatal(err)
			}
			if _, err := rxetest.Wait(src.End.CQ, 1, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Buf[:n], src.Buf[:n]) {
				t.Fatalf("wrapped end %d: the WRITE placed other bytes", w)
			}
		}
		if x, y := l.A.Dev.InlineFrames(), l.B.Dev.InlineFrames(); x != 0 || y != 0 {
			t.Errorf("wrapped end %d: frames processed inline: A %d, B %d; want none", w, x, y)
		}
	}
}

// TestInlineBothSidesPostingAtOnce: A and B post WRITEs to each other from
// two goroutines at once, each waiting for its completions; every WRITE
// completes in order (no deadlock between the two inline chains, which
// only try each other's processing lock) and the bytes arrive.
func TestInlineBothSidesPostingAtOnce(t *testing.T) {
	_, a, b := asyncLink(t, rxetest.Options{}, 1<<16)
	const n, rounds = 4 << 10, 300
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, p := range [][2]*rxetest.QP{{a, b}, {b, a}} {
		src, dst := p[0], p[1]
		fillSeq(src.Buf[:n], src.Buf[0]+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				wr := emu.SendWR{WRID: uint64(i), Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
					SGList: []emu.SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr + n, RKey: dst.MR.RKey()}
				if _, err := src.PostSend([]emu.SendWR{wr, wr}); err != nil {
					errs <- err
					return
				}
				wcs, err := rxetest.Wait(src.End.CQ, 2, 10*time.Second)
				if err != nil {
					errs <- err
					return
				}
				for _, wc := range wcs {
					if wc.Status != emu.WCSuccess || wc.WRID != uint64(i) {
						t.Errorf("round %d: completion %+v", i, wc)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Buf[n:2*n], a.Buf[:n]) || !bytes.Equal(a.Buf[n:2*n], b.Buf[:n]) {
		t.Fatal("the WRITEs placed other bytes")
	}
}

// TestInlineCompletionHandlerPosts: a completion handler that posts the
// next SEND (and re-arms its CQ) runs inside the inline chain of the post
// before it; the nested post leaves its frames to the reading goroutines
// or to the chain already running, never recursing without bound nor
// waiting for a lock its own goroutine holds. All the SENDs arrive, in
// order, and B's handler, posting the receives back, runs the same way.
func TestInlineCompletionHandlerPosts(t *testing.T) {
	const total = 500
	var (
		mu     sync.Mutex
		sent   int
		done   = make(chan struct{})
		aq, bq *rxetest.QP
	)
	handlerA := func(cq *emu.CQ) {
		wc := make([]emu.WC, 8)
		for {
			k := cq.Poll(wc)
			if k == 0 {
				break
			}
			mu.Lock()
			for _, c := range wc[:k] {
				if c.Status != emu.WCSuccess {
					t.Errorf("A: completion %+v", c)
				}
				if sent < total {
					sent++
					if _, err := aq.PostSend([]emu.SendWR{{WRID: uint64(sent), Opcode: emu.WRSend,
						SendFlags: emu.SendSignaled, SGList: []emu.SGE{aq.SGE(0, 2048)}}}); err != nil {
						t.Errorf("A: post from the handler: %v", err)
					}
				} else if sent == total {
					sent++
					close(done)
				}
			}
			mu.Unlock()
		}
		cq.ReqNotify(emu.CQNextComp)
	}
	var (
		rmu      sync.Mutex
		received []uint64
	)
	handlerB := func(cq *emu.CQ) {
		rmu.Lock()
		defer rmu.Unlock()
		wc := make([]emu.WC, 8)
		for {
			k := cq.Poll(wc)
			if k == 0 {
				break
			}
			for _, c := range wc[:k] {
				if c.Status != emu.WCSuccess {
					t.Errorf("B: completion %+v", c)
				}
				received = append(received, c.WRID)
				if _, err := bq.PostRecv([]emu.RecvWR{{WRID: c.WRID + 64, SGList: []emu.SGE{bq.SGE(0, 4096)}}}); err != nil {
					t.Errorf("B: post recv from the handler: %v", err)
				}
			}
		}
		cq.ReqNotify(emu.CQNextComp)
	}
	l, err := rxetest.NewLink(rxetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for _, x := range []struct {
		e *rxetest.End
		h func(*emu.CQ)
	}{{l.A, handlerA}, {l.B, handlerB}} {
		if x.e.CQ, err = x.e.Dev.CreateCQ(emu.CQInitAttr{CQE: 256, CompHandler: x.h}); err != nil {
			t.Fatal(err)
		}
		x.e.CQ.ReqNotify(emu.CQNextComp)
	}
	if aq, bq, err = l.Pair(qpstate.TypeRC, 1<<14); err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(aq, bq); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if _, err := bq.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{bq.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	sent = 1
	mu.Unlock()
	// Not under mu: A's handler runs inside this post's inline chain.
	if _, err = aq.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{aq.SGE(0, 2048)}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		mu.Lock()
		t.Fatalf("%d of %d SENDs completed in 20 s", sent, total)
	}
	rmu.Lock()
	if len(received) < total {
		t.Errorf("B received %d SENDs, want %d", len(received), total)
	}
	for i, id := range received {
		if id != uint64(i) {
			t.Fatalf("B's receive %d completed WR %d: out of order", i, id)
		}
	}
	rmu.Unlock()
	if l.A.Dev.InlineFrames() == 0 || l.B.Dev.InlineFrames() == 0 {
		t.Errorf("frames processed inline: A %d, B %d; want some on both", l.A.Dev.InlineFrames(), l.B.Dev.InlineFrames())
	}
}
