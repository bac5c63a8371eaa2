//go:build linux

package uverbs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQueueFileCannotBeResized: the ring's memfd, whose descriptor the
// client receives to map it, refuses to shrink or grow (a hostile client
// that shrank it would have the daemon's next ring access die of
// SIGBUS), and the daemon's mapping stays whole.
func TestQueueFileCannotBeResized(t *testing.T) {
	q, _, err := newQueue(16, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	fd := int(q.file.Fd())
	for _, size := range []int64{0, int64(len(q.buf)) / 2, int64(len(q.buf)) * 2} {
		if err := unix.Ftruncate(fd, size); !errors.Is(err, unix.EPERM) {
			t.Errorf("ftruncate to %d: %v, want EPERM", size, err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
		t.Errorf("another seal: %v, want EPERM (sealed against new seals)", err)
	}
	q.buf[len(q.buf)-1] = 1 // the whole mapping is still there
}
