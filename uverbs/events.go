//go:build linux

package uverbs

import (
	"encoding/binary"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// evCounter counts the events of one object on one event file: those the
// client has read once the object is destroyed (events_reported). gone is
// set, under the event file's lock, when the object is destroyed, after
// which no event of it is written.
type evCounter struct {
	n    atomic.Uint32
	gone bool
}

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

// send writes one event record and counts it in counter (if not nil)
// under the same lock unread takes, so a destroy sees records and counts
// agree. The kernel's event list is unbounded; a client that never reads
// its events fills the socket's buffer and later events are dropped, never
// blocking the device.
func (e *eventFile) send(rec []byte, counter *evCounter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if counter != nil && counter.gone {
		return false // the object is destroyed: its events go with it
	}
	fd := int(e.ours.Fd())
	if unix.Send(fd, rec, unix.MSG_DONTWAIT) != nil {
		return false
	}
	if counter != nil {
		counter.n.Add(1)
	}
	return true
}

// sendComp writes an ib_uverbs_comp_event_desc for the CQ with the
// client's cq_handle cookie.
func (e *eventFile) sendComp(cookie uint64, counter *evCounter) bool {
	d := CompEventDesc{Handle: cookie}
	return e.send(bytesOf(&d), counter)
}

// sendAsync writes an ib_uverbs_async_event_desc: element is the object's
// user handle, or the port number for a port event.
func (e *eventFile) sendAsync(element uint64, typ uint32, counter *evCounter) bool {
	d := AsyncEventDesc{Element: element, Type: typ}
	return e.send(bytesOf(&d), counter)
}

// unread takes back the records the client has not read yet that match
// drop (the kernel removes a destroyed object's pending events from the
// list) and returns how many it took; the others are written again in
// their order.
func (e *eventFile) unread(drop func(rec []byte) bool, counter *evCounter) int {
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
	if counter != nil {
		counter.n.Add(-uint32(n))
		counter.gone = true
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

// takeBackAsync removes from the async event file the events of one object
// the client has not read, those for cookie whose type is in types, and
// takes them off counter (the kernel keeps each object's events on its own
// list and drops them when the object goes, and the destroy response counts
// only the events the client read).
func (f *File) takeBackAsync(counter *evCounter, cookie uint64, types ...emu.EventType) {
	if async := f.async.Load(); async != nil {
		async.unread(func(rec []byte) bool {
			d := load[AsyncEventDesc](rec)
			return d.Element == cookie && slices.Contains(types, emu.EventType(d.Type))
		}, counter)
	}
}

// Async event types by the object they concern.
var (
	qpEvents  = []emu.EventType{emu.EventQPFatal, emu.EventQPReqErr, emu.EventQPAccessErr, emu.EventCommEst, emu.EventSQDrained, emu.EventPathMig, emu.EventPathMigErr, emu.EventQPLastWQEReached}
	srqEvents = []emu.EventType{emu.EventSRQErr, emu.EventSRQLimitReached}
	cqEvents  = []emu.EventType{emu.EventCQErr}
)

// cookieOf returns the cq_handle of a completion event record.
func cookieOf(rec []byte) uint64 {
	if len(rec) < 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(rec)
}
