package rxe_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// ownFrames is a link that checks the frames written to it that are
// addressed to mac: how many, and how many with a wrong ICRC.
type ownFrames struct {
	link.Link
	mac      [6]byte
	mu       sync.Mutex
	seen     int
	badICRCs int
}

func (l *ownFrames) WritePackets(bufs [][]byte) (int, error) {
	l.mu.Lock()
	for _, b := range bufs {
		if len(b) >= 6 && [6]byte(b[:6]) == l.mac {
			l.seen++
			if wire.VerifyICRC(b, wire.EthernetSize) != nil {
				l.badICRCs++
			}
		}
	}
	l.mu.Unlock()
	return l.Link.WritePackets(bufs)
}

func (l *ownFrames) counts() (seen, bad int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen, l.badICRCs
}

// TestLoopedBackFrameGoingToTheLinkHasItsICRC: a device that loops back
// the frames to its own MAC builds them without the ICRC nobody sees; when
// LoopbackWhile sends them to the link instead (a fault injector with
// rules for them), each reaches the link with its exact ICRC. Two QPs of
// device A connected to each other move a 16 KiB WRITE both ways.
func TestLoopedBackFrameGoingToTheLinkHasItsICRC(t *testing.T) {
	var loop atomic.Bool
	var own *ownFrames
	l, err := rxetest.NewLink(rxetest.Options{
		Rxe: func(i int, c *rxe.Config) {
			if i == 0 {
				c.Loopback, c.LoopbackWhile = true, loop.Load
			}
		},
		Wrap: func(i int, lk link.Link) link.Link {
			if i == 0 {
				own = &ownFrames{Link: lk, mac: [6]byte{2, 0, 0, 0, 0, 1}}
				return own
			}
			return lk
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.A.NewQP(qpstate.TypeRC, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.A.NewQP(qpstate.TypeRC, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	const n = 16 << 10
	write := func(src, dst *rxetest.QP, seed byte) {
		t.Helper()
		for i := range n {
			src.Buf[i] = byte(i) + seed
		}
		if _, err := src.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr, RKey: dst.MR.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}

	loop.Store(true)
	write(a, b, 1)
	if wc, err := rxetest.Wait(l.A.CQ, 1, 5*time.Second); err != nil || wc[0].Status != emu.WCSuccess {
		t.Fatalf("looped-back WRITE: %v %v", wc, err)
	}
	if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Fatal("the looped-back WRITE placed other bytes")
	}
	if seen, _ := own.counts(); seen != 0 {
		t.Fatalf("%d frames to the device's own MAC reached the link while it loops them back", seen)
	}

	loop.Store(false)
	write(b, a, 2)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		seen, bad := own.counts()
		if seen >= n/1024 { // the WRITE's packets at the default MTU of 1024
			if bad != 0 {
				t.Fatalf("%d of %d frames to the device's own MAC reached the link with a wrong ICRC", bad, seen)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames to the device's own MAC reached the link, want the WRITE's %d", seen, n/1024)
		}
	}
}
