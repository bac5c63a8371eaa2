package rxe

import (
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
)

// TestPollOfAnEmptyCQTakesNoDeviceLock: polling an empty CQ returns at
// once while another goroutine holds the device's lock (a busy-polling
// consumer does not contend with frame processing, as rxe_poll_cq takes
// only the CQ's lock), and a completion posted under the lock is found by
// the next poll once the lock is released.
func TestPollOfAnEmptyCQTakesNoDeviceLock(t *testing.T) {
	e := newEnv(t)
	wc := make([]emu.WC, 4)
	e.r.lock()
	done := make(chan int)
	go func() { done <- e.scq.Poll(wc) }()
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("poll of an empty CQ returned %d", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("poll of an empty CQ waited for the device's lock")
	}
	e.r.post(cqOf(e.scq), emu.WC{WRID: 7, Status: emu.WCSuccess}, false)
	go func() { done <- e.scq.Poll(wc) }()
	select {
	case <-done:
		t.Fatal("poll of a CQ holding a completion did not wait for the device's lock")
	case <-time.After(10 * time.Millisecond):
	}
	e.r.unlock()
	if n := <-done; n != 1 || wc[0].WRID != 7 {
		t.Fatalf("poll returned %d completions %+v, want the one posted", n, wc[:n])
	}
	if n := e.scq.Poll(wc); n != 0 {
		t.Fatalf("second poll returned %d", n)
	}
}
