package rxe_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// nonBlocking is a link whose writes the device may do from its reading
// goroutine (rxe.NonBlockingWriter), counting the plain ACKs written.
// The pipe under it holds far more frames than the test sends, so its
// writes never wait either.
type nonBlocking struct {
	link.Link
	acks atomic.Int64
}

func (l *nonBlocking) NonBlockingWrites() bool { return true }

func (l *nonBlocking) WritePackets(bufs [][]byte) (int, error) {
	for _, b := range bufs {
		var p wire.Packet
		if p.Decode(b) == nil && p.Opcode() == wire.RCAcknowledge && p.AETH().Syndrome() == 0x1F {
			l.acks.Add(1)
		}
	}
	return l.Link.WritePackets(bufs)
}

// TestHeldAcksCoalesceAndGoOut: with Config.CoalesceACKs (hfi1-style
// deferred ACKs; rxe's default answers each SEND, as
// TestOneResponsePerAckReqPacket shows), B reads a non-blocking link, so
// the ACKs of SENDs whose receive completions woke its CQ handler
// (re-armed each time, as a waiting application does) are held and
// merged: B writes
// fewer ACKs than the SENDs it received, each covering the earlier ones.
// None is lost: once the hold time passes on B's clock, A has every send
// completion, successful, without a retry (A's clock never moves, so no
// retransmission timer fires).
func TestHeldAcksCoalesceAndGoOut(t *testing.T) {
	const sends = 8
	clk := clock.NewManual(time.Unix(0, 0))
	var lb *nonBlocking
	l, err := rxetest.NewLink(rxetest.Options{Rxe: func(i int, c *rxe.Config) {
		c.Device.Clock = clk
		c.CoalesceACKs = true
		if i == 1 {
			lb = &nonBlocking{Link: c.Link}
			c.Link = lb
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var notified atomic.Int64
	cq, err := l.B.Dev.CreateCQ(emu.CQInitAttr{CQE: 64, CompHandler: func(cq *emu.CQ) {
		notified.Add(1)
		cq.ReqNotify(emu.CQNextComp)
	}})
	if err != nil {
		t.Fatal(err)
	}
	l.B.CQ = cq
	cq.ReqNotify(emu.CQNextComp)
	a, b, err := l.Pair(qpstate.TypeRC, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	for i := range sends {
		if _, err := b.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{b.SGE(64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sends {
		if _, err := a.PostSend([]emu.SendWR{{WRID: uint64(i), Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{a.SGE(64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rxetest.Wait(cq, sends, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if notified.Load() == 0 {
		t.Fatal("B's CQ handler never ran")
	}
	// The last ACK is held until B's clock moves; the ones written
	// before were merged.
	time.Sleep(10 * time.Millisecond)
	if n := lb.acks.Load(); n >= sends {
		t.Errorf("B wrote %d ACKs for %d SENDs before the hold time passed, want fewer (merged)", n, sends)
	}
	clk.Advance(time.Millisecond)
	wcs, err := rxetest.Wait(l.A.CQ, sends, 10*time.Second)
	if err != nil {
		t.Fatalf("after the hold time: %v", err)
	}
	for _, wc := range wcs {
		if wc.Status != emu.WCSuccess || wc.Opcode != emu.WCSend {
			t.Errorf("send completion %+v", wc)
		}
	}
	if n := lb.acks.Load(); n == 0 || n >= sends {
		t.Errorf("B wrote %d ACKs for %d SENDs, want between 1 and %d", n, sends, sends-1)
	}
	for _, e := range []*rxetest.End{l.A, l.B} {
		st, err := e.Dev.AllocHWPortStats(1)
		if err != nil {
			t.Fatal(err)
		}
		e.Dev.GetHWStats(st, 1)
		for _, c := range []string{"duplicate_request", "out_of_seq_request", "completer_retry_err"} {
			if v, ok := st.Counter(c); !ok || v != 0 {
				t.Errorf("%s: %s = %d (found %v), want 0", e.Dev.Name(), c, v, ok)
			}
		}
	}
}
