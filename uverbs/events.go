//go:build linux

package uverbs

import (
	"encoding/binary"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// eventFile is an event file of the kernel (struct ib_uverbs_event_file):
// the async event fd of a context or a completion channel. It is a
// SOCK_SEQPACKET socket pair: the daemon writes one record per event on its
// end, the client reads them from the other with read(), and poll and
// epoll work on it natively.
type eventFile struct {
	mu     sync.Mutex
	ours   *os.File // the daemon's end: events are written here
	theirs *os.File // the client's end, passed with SCM_RIGHTS
	async  bool
	closed bool
	at     uint64 // client address of the fd field of the response that handed it out
	fd     int32  // the client's fd number for it, fdPending or fdUnknown
}

// Values of eventFile.fd before the client's number is known.
const (
	fdPending = -2 // handed out; the client stores its number at at
	fdUnknown = -3 // the number could not be read back
)

// newEventFile makes the socket pair of an event file.
func newEventFile(async bool) (*eventFile, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, errorf(unix.ENOMEM, "event file: %v", err)
	}
	// Events must never block the device: the daemon's end does not wait.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, errorf(unix.ENOMEM, "event file: %v", err)
	}
	// Enough room for the events of many objects before the client reads.
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	return &eventFile{ours: os.NewFile(uintptr(fds[0]), "uverbs-event"),
		theirs: os.NewFile(uintptr(fds[1]), "[infinibandevent]"), async: async}, nil
}

// send writes one event record. The kernel's event list is unbounded; a
// client that never reads its events fills the socket's buffer and later
// events are dropped, never blocking the device.
func (e *eventFile) send(rec []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	fd := int(e.ours.Fd())
	return unix.Send(fd, rec, unix.MSG_DONTWAIT) == nil
}

// sendComp writes an ib_uverbs_comp_event_desc for the CQ with the
// client's cq_handle cookie.
func (e *eventFile) sendComp(cookie uint64) bool {
	d := CompEventDesc{Handle: cookie}
	return e.send(bytesOf(&d))
}

// sendAsync writes an ib_uverbs_async_event_desc: element is the object's
// user handle, or the port number for a port event.
func (e *eventFile) sendAsync(element uint64, typ uint32) bool {
	d := AsyncEventDesc{Element: element, Type: typ}
	return e.send(bytesOf(&d))
}

// unread takes back the records the client has not read yet that match
// drop (the kernel removes a destroyed object's pending events from the
// list) and returns how many it took; the others are written again in
// their order.
func (e *eventFile) unread(drop func(rec []byte) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0
	}
	theirs := int(e.theirs.Fd())
	var keep [][]byte
	n := 0
	for {
		var b [32]byte
		m, _, err := unix.Recvfrom(theirs, b[:], unix.MSG_DONTWAIT)
		if err != nil || m <= 0 {
			break
		}
		if drop(b[:m]) {
			n++
			continue
		}
		keep = append(keep, append([]byte(nil), b[:m]...))
	}
	for _, rec := range keep {
		_ = unix.Send(int(e.ours.Fd()), rec, unix.MSG_DONTWAIT)
	}
	return n
}

// close closes both ends held by the device; the client keeps its copy.
func (e *eventFile) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.ours.Close()
	e.theirs.Close()
}

// cookieOf returns the cq_handle of a completion event record.
func cookieOf(rec []byte) uint64 {
	if len(rec) < 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(rec)
}
