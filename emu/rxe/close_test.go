package rxe

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// gatedLink holds its first write until release is closed, after telling
// entered: a transmit flush caught in the middle of writing.
type gatedLink struct {
	*link.PipeEnd
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedLink) WritePackets(bufs [][]byte) (int, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.PipeEnd.WritePackets(bufs)
}

// TestCloseWaitsForFlush: Close while a frame of a posted SEND is being
// written waits for the write, so a frame the device has handed to its
// link is not lost (the kernel's rxe finishes its tasks before the device
// goes). Without the serialization Close closed the link under the writer
// and the frame was dropped (softroce pingpong lingered 50 ms to avoid
// it).
func TestCloseWaitsForFlush(t *testing.T) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 4200, QueueLen: 64})
	defer eb.Close()
	g := &gatedLink{PipeEnd: ea, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig()
	cfg.Link, cfg.Synchronous = g, true
	e := newEnvWith(t, cfg)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toRTS(qp)
	sge, _ := e.buf(64)
	posted := make(chan error, 1)
	go func() {
		_, err := qp.PostSend([]emu.SendWR{send(1, sge, emu.SendSignaled)})
		posted <- err
	}()
	<-g.entered
	closed := make(chan error, 1)
	go func() { closed <- e.r.Close() }()
	early := false
	select {
	case err := <-closed:
		t.Errorf("Close returned (%v) while a frame was being written", err)
		early = true
	case <-time.After(20 * time.Millisecond):
	}
	close(g.release)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if !early {
		<-closed
	}
	if n := ea.Stats().TxFrames; n != 1 {
		t.Fatalf("%d frames reached the peer, want the SEND's 1", n)
	}
	bufs, sizes := [][]byte{make([]byte, 4200)}, []int{0}
	if n, err := eb.ReadPackets(bufs, sizes); n != 1 || err != nil {
		t.Fatalf("read %d frames: %v", n, err)
	}
}

// TestReadRepliesInterleave: large READs on two QPs are answered in
// bursts of readBurst packets per QP in turn, as rxe's per-QP responder
// tasks interleave them, not one whole reply after the other: QP 2's
// first response leaves before QP 1's last, and both READs land intact.
func TestReadRepliesInterleave(t *testing.T) {
	p := newPair(t, pairOpts{})
	const size = 256 << 10 // 256 packets at MTU 1024
	var cs []conn
	var dsts [][]byte
	var srcs [][]byte
	for i := range 2 {
		c := p.connect(qpOpts{})
		src, sb, mrb := p.b.buf(size, byte(i+1))
		dst, db, mra := p.a.buf(size, 0)
		p.a.postSend(c.qa, emu.SendWR{WRID: uint64(i), Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{{Addr: dst, Length: size, LKey: mra.LKey()}}, RemoteAddr: src, RKey: mrb.RKey()})
		cs, dsts, srcs = append(cs, c), append(dsts, db), append(srcs, sb)
	}
	p.settle()
	wcs := poll(p.a.scq)
	if len(wcs) != 2 || wcs[0].Status != emu.WCSuccess || wcs[1].Status != emu.WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	for i := range 2 {
		if !bytes.Equal(dsts[i], srcs[i]) {
			t.Errorf("READ %d: data differs", i)
		}
	}
	first2, last1 := -1, -1
	for k, pk := range p.b.rec.take(t) {
		switch pk.BTH().DestQP() {
		case cs[0].qa.QPNum():
			last1 = k
		case cs[1].qa.QPNum():
			if first2 < 0 {
				first2 = k
			}
		}
	}
	if first2 < 0 || first2 > last1 {
		t.Errorf("QP 2's first response is frame %d, QP 1's last %d: the replies did not interleave", first2, last1)
	}
	if n := p.a.counter("completer_retry_err"); n != 0 {
		t.Errorf("completer_retry_err %d", n)
	}
}
