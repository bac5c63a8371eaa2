// Package tap connects softroce to a real Ethernet segment on Linux.
//
// Open creates (or attaches to) a TAP device through /dev/net/tun: frames
// softroce writes come out of the kernel-side interface as if received
// from a wire, and frames the kernel sends on it are read by softroce.
// Attach the interface to a bridge (Config.Bridge) and softroce is one
// more host on that bridge, next to the kernel's own stack and to other
// machines (a kernel rxe peer, another softroce). OpenPacket instead uses
// an AF_PACKET socket bound to an existing interface — a veth end or a
// physical NIC — and sees everything on it.
//
// Both return a *Device, a link.Link. The file descriptors are
// non-blocking and served by the Go runtime's poller, so Close unblocks a
// pending read. softroce's own addresses live in package host on top of
// the link: the kernel-side interface keeps whatever MAC and addresses the
// kernel gives it.
//
// The TAP path is one read or write system call per frame: GSO/GRO offloads
// cannot batch RoCE, whose every packet carries its own BTH and ICRC.
// IFF_MULTI_QUEUE (Config.Queues) gives one descriptor per queue for
// parallel readers.
//
// Only Linux is supported; elsewhere Open and OpenPacket fail with an error
// wrapping errors.ErrUnsupported.
package tap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/softroce/softroce/link"
)

// Config configures Open and OpenPacket. A nil *Config means the zero
// value, and every zero value is a documented default.
type Config struct {
	// MTU sets the interface's MTU through netlink; zero leaves it as it
	// is (1500 for a new TAP).
	MTU int
	// MAC sets the hardware address of the kernel-side interface; nil
	// leaves the kernel's (random, for a new TAP). softroce's own MAC is
	// host.Config.MAC, and should differ from it.
	MAC net.HardwareAddr
	// Bridge, if not empty, names an existing bridge the interface is
	// attached to (`ip link set NAME master BRIDGE`).
	Bridge string
	// Queues is the number of TAP queues, each with its own descriptor;
	// zero or one opens a single-queue TAP, more sets IFF_MULTI_QUEUE.
	// Ignored by OpenPacket.
	Queues int
	// NoUp leaves the interface's administrative state alone; by default
	// Open and OpenPacket bring it up.
	NoUp bool
	// NoPromisc (OpenPacket only) leaves the interface out of promiscuous
	// mode. By default the socket joins PACKET_MR_PROMISC, since frames
	// for softroce's own MAC must get past the NIC's address filter.
	NoPromisc bool
}

// Device is a TAP device or an AF_PACKET socket as a link.Link. Its Link
// methods use queue 0; with several queues, read every queue (Queue) from
// its own goroutine, since the kernel spreads frames across them by flow.
type Device struct {
	name   string
	kind   string // "tap" or "packet", the Net of its errors
	mtu    int
	vlan   uint16 // the VLAN ID of a packet socket's VLAN interface
	queues []*Queue
}

// Queue is one queue (one file descriptor) of a Device, as a link.Link.
// Closing a Queue closes only its descriptor.
type Queue struct {
	f      *os.File
	kind   string
	mtu    int
	closed atomic.Bool
}

var (
	_ link.Link = (*Device)(nil)
	_ link.Link = (*Queue)(nil)
)

// Name returns the interface's name (the kernel's choice if Open was
// given an empty name or a pattern such as "tap%d").
func (d *Device) Name() string { return d.name }

// VLANID returns the 802.1Q VLAN ID of the interface when it is a VLAN
// device (an AF_PACKET socket on `ip link add … type vlan id ID`: the
// kernel tags what it sends and untags what it reads), 0 otherwise.
func (d *Device) VLANID() uint16 { return d.vlan }

// Queues returns the number of queues.
func (d *Device) Queues() int { return len(d.queues) }

// Queue returns queue i.
func (d *Device) Queue(i int) *Queue { return d.queues[i] }

// ReadPackets reads from queue 0.
func (d *Device) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	return d.queues[0].ReadPackets(bufs, sizes)
}

// WritePackets writes to queue 0.
func (d *Device) WritePackets(bufs [][]byte) (int, error) { return d.queues[0].WritePackets(bufs) }

// BatchSize is 1: each frame is one system call.
func (d *Device) BatchSize() int { return 1 }

// NonBlockingWrites reports true: a write hands the frame to the kernel,
// which queues or drops it, and never waits for a reader on the other
// side (emu/rxe.NonBlockingWriter: the device then processes frames in
// the goroutine that reads them).
func (d *Device) NonBlockingWrites() bool { return true }

// MTU returns the interface's MTU when the Device was opened.
func (d *Device) MTU() int { return d.mtu }

// Close closes every queue. A non-persistent TAP disappears with its
// last descriptor.
func (d *Device) Close() error {
	var errs []error
	for _, q := range d.queues {
		if err := q.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReadPackets reads one frame into bufs[0]; a frame longer than the
// buffer is truncated. It blocks until a frame arrives or the queue is
// closed (an error wrapping net.ErrClosed).
func (q *Queue) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	if len(bufs) == 0 || len(sizes) == 0 {
		return 0, nil
	}
	n, err := q.f.Read(bufs[0])
	if err != nil {
		return 0, q.opError("read", err)
	}
	sizes[0] = n
	return 1, nil
}

// WritePackets writes each frame with one system call. A frame the MTU
// does not allow is refused with EMSGSIZE (EINVAL for a runt), as
// link.CheckFrame, before it reaches the kernel.
func (q *Queue) WritePackets(bufs [][]byte) (int, error) {
	for i, b := range bufs {
		if err := link.CheckFrame(b, q.mtu); err != nil {
			return i, &net.OpError{Op: "write", Net: q.kind, Err: err}
		}
		if _, err := q.f.Write(b); err != nil {
			return i, q.opError("write", err)
		}
	}
	return len(bufs), nil
}

// BatchSize is 1.
func (q *Queue) BatchSize() int { return 1 }

// NonBlockingWrites reports true, as Device.NonBlockingWrites.
func (q *Queue) NonBlockingWrites() bool { return true }

// MTU returns the interface's MTU when the Device was opened.
func (q *Queue) MTU() int { return q.mtu }

// Close closes the queue's descriptor, unblocking its reads.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: q.kind, Err: net.ErrClosed}
	}
	if err := q.f.Close(); err != nil {
		return q.opError("close", err)
	}
	return nil
}

// opError wraps an I/O error as a *net.OpError, turning the closed-file
// error into one wrapping net.ErrClosed as the Link contract asks.
func (q *Queue) opError(op string, err error) error {
	if errors.Is(err, os.ErrClosed) || q.closed.Load() {
		err = net.ErrClosed
	} else {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the errno
		}
	}
	return &net.OpError{Op: op, Net: q.kind, Err: err}
}

func unsupported(what string) error {
	return fmt.Errorf("tap: %s: %w", what, errors.ErrUnsupported)
}
