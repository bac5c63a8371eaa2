package link

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestTryReadRefNeverWaits: TryReadRef returns 0 and no error on an empty
// queue, the frames in order when some are queued, and ErrClosed once the
// end is closed.
func TestTryReadRefNeverWaits(t *testing.T) {
	a, b := NewPipe(nil)
	bufs, sizes, noICRC, refs := [][]byte{make([]byte, 1600), make([]byte, 1600)}, make([]int, 2), make([]bool, 2), make([]PayloadRef, 2)
	if n, err := b.TryReadRef(bufs, sizes, noICRC, refs); n != 0 || err != nil {
		t.Fatalf("empty queue: %d, %v; want 0, nil", n, err)
	}
	f1, f2 := make([]byte, 60), make([]byte, 61)
	if _, err := a.WriteRef([][]byte{f1, f2}, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := b.TryReadRef(bufs, sizes, noICRC, refs); n != 2 || err != nil || sizes[0] != 60 || sizes[1] != 61 {
		t.Fatalf("read %d (sizes %v), %v; want the two frames in order", n, sizes, err)
	}
	if a.Peer() != b || b.Peer() != a {
		t.Fatal("Peer does not return the other end")
	}
	b.Close()
	if _, err := b.TryReadRef(bufs, sizes, noICRC, refs); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed end: %v; want ErrClosed", err)
	}
}

// TestHoldWakeupsDefersTheReader: a reader waiting in WaitReadable is not
// woken by frames written while its end's wake-ups are held, and is woken
// by ReleaseWakeups when frames remain; when the holder read them all, the
// reader sleeps on.
func TestHoldWakeupsDefersTheReader(t *testing.T) {
	a, b := NewPipe(nil)
	woke := make(chan error, 1)
	go func() { woke <- b.WaitReadable() }()
	time.Sleep(50 * time.Millisecond) // most likely the reader waits already; one that comes later waits too while the hold is in force
	b.HoldWakeups()
	if _, err := a.WriteRef([][]byte{make([]byte, 60)}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
		t.Fatal("the reader woke while its wake-ups were held")
	case <-time.After(20 * time.Millisecond):
	}
	// The holder reads the frame itself: the release wakes nobody.
	bufs, sizes, noICRC, refs := [][]byte{make([]byte, 1600)}, make([]int, 1), make([]bool, 1), make([]PayloadRef, 1)
	if n, _ := b.TryReadRef(bufs, sizes, noICRC, refs); n != 1 {
		t.Fatalf("holder read %d frames, want 1", n)
	}
	b.ReleaseWakeups()
	select {
	case <-woke:
		t.Fatal("the reader woke with nothing queued")
	case <-time.After(20 * time.Millisecond):
	}
	// A frame left when the hold ends wakes the reader.
	b.HoldWakeups()
	if _, err := a.WriteRef([][]byte{make([]byte, 60)}, nil); err != nil {
		t.Fatal(err)
	}
	b.ReleaseWakeups()
	wantWoken(t, woke, "the reader was not woken for the frame left after the hold")
}

// TestWaitReadableWaitsOutAHold: a reader that comes to WaitReadable
// while a hold is in force and a frame is queued waits for the release,
// as one that was already waiting does.
func TestWaitReadableWaitsOutAHold(t *testing.T) {
	a, b := NewPipe(nil)
	b.HoldWakeups()
	if _, err := a.WriteRef([][]byte{make([]byte, 60)}, nil); err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- b.WaitReadable() }()
	select {
	case <-woke:
		t.Fatal("a late reader returned while the hold was in force")
	case <-time.After(20 * time.Millisecond):
	}
	b.ReleaseWakeups()
	wantWoken(t, woke, "the release did not wake the reader")
}

// wantWoken fails the test unless woke delivers a nil error within 5 s.
func wantWoken(t *testing.T, woke <-chan error, why string) {
	t.Helper()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// TestTryReadRefSeesFramesOfAWaitingWriter: a writer that filled the
// queue and waits for room has made its frames visible to a read that
// does not wait (which looks at the queue without its lock first).
func TestTryReadRefSeesFramesOfAWaitingWriter(t *testing.T) {
	a, b := NewPipe(&PipeConfig{QueueLen: 2})
	done := make(chan error, 1)
	go func() {
		_, err := a.WritePackets([][]byte{make([]byte, 60), make([]byte, 61), make([]byte, 62)})
		done <- err
	}()
	bufs, sizes, noICRC, refs := [][]byte{make([]byte, 1600), make([]byte, 1600)}, make([]int, 2), make([]bool, 2), make([]PayloadRef, 2)
	got := 0
	for deadline := time.Now().Add(5 * time.Second); got < 3; {
		n, err := b.TryReadRef(bufs, sizes, noICRC, refs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if sizes[i] != 60+got {
				t.Fatalf("frame %d has %d bytes, want %d", got, sizes[i], 60+got)
			}
			got++
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d of the 3 frames", got)
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
