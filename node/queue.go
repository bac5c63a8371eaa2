package node

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/link"
)

// roceQueueLen is how many RoCE frames the adapter holds for the device
// before it drops (a full receive ring).
const roceQueueLen = 4096

// roceLink is the link the rxe device is given: the Host owns reading the
// real link, hands the device's frames (UDP 4791 to one of its addresses)
// to push, and ReadPackets yields them; WritePackets goes to the real link,
// except frames to the node's own MAC, which come straight back (rxe's
// rxe_loopback for a destination MAC equal to the netdev's); frames to a
// multicast group the node receives go to the link and come back too. It is the Go
// counterpart of rxe's UDP tunnel socket sitting on the kernel's IP stack.
type roceLink struct {
	out  link.Link // the real link (maybe wrapped in a Capture)
	self [6]byte   // the node's MAC
	// member, if set, reports whether the node receives a multicast
	// group: frames to such a group also loop back, as the kernel's
	// ip_mc_output and ip6_finish_output2 loop a multicast packet back to
	// the sending host when it is a member of the group. Nil loops back
	// every frame to an IP multicast MAC.
	member func(netip.Addr) bool

	mu     sync.Mutex
	cond   *sync.Cond
	q      [][]byte // frames waiting for ReadPackets, oldest first
	free   [][]byte // recycled buffers
	closed bool

	dropped atomic.Uint64
}

func newRoCELink(out link.Link, self [6]byte) *roceLink {
	r := &roceLink{out: out, self: self}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// push queues a copy of frame (the Host reuses its buffer); a full queue or
// a closed link drops it and counts it.
func (r *roceLink) push(frame []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.q) >= roceQueueLen {
		r.dropped.Add(1)
		return
	}
	var b []byte
	if n := len(r.free); n > 0 {
		b = r.free[n-1][:0]
		r.free = r.free[:n-1]
	}
	r.q = append(r.q, append(b, frame...))
	r.cond.Signal()
}

// ReadPackets implements link.Link: it blocks until a frame was pushed or
// the link is closed.
func (r *roceLink) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.q) == 0 && !r.closed {
		r.cond.Wait()
	}
	if len(r.q) == 0 {
		return 0, fmt.Errorf("node: read RoCE frames: %w", net.ErrClosed)
	}
	n := 0
	for n < len(bufs) && n < len(r.q) {
		sizes[n] = copy(bufs[n], r.q[n])
		r.free = append(r.free, r.q[n])
		n++
	}
	k := copy(r.q, r.q[n:])
	clear(r.q[k:])
	r.q = r.q[:k]
	return n, nil
}

// WritePackets implements link.Link: frames to the node's own MAC are
// looped back (checked against the MTU like any other), the rest are
// written to the real link in runs.
func (r *roceLink) WritePackets(bufs [][]byte) (int, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("node: write RoCE frames: %w", net.ErrClosed)
	}
	done := 0
	for done < len(bufs) {
		j := done
		for j < len(bufs) && !r.toSelf(bufs[j]) {
			j++
		}
		if j > done {
			n, err := r.out.WritePackets(bufs[done:j])
			// A multicast frame also comes back to the node when it
			// receives the group, as the kernel's ip_mc_output loops a
			// copy to local members: QPs of this device attached to
			// the group receive it.
			for _, f := range bufs[done : done+n] {
				if r.loopsBack(f) {
					r.push(f)
				}
			}
			done += n
			if err != nil {
				return done, err
			}
			continue
		}
		if err := link.CheckFrame(bufs[done], r.out.MTU()); err != nil {
			return done, fmt.Errorf("node: loop back a RoCE frame: %w", err)
		}
		r.push(bufs[done])
		done++
	}
	return done, nil
}

// loopsBack reports whether frame goes to an IP multicast group the node
// receives.
func (r *roceLink) loopsBack(frame []byte) bool {
	if !ipMulticastMAC(frame) {
		return false
	}
	if r.member == nil {
		return true
	}
	if len(frame) < 14 {
		return false
	}
	var dst netip.Addr
	switch {
	case frame[12] == 0x08 && frame[13] == 0x00 && len(frame) >= 34:
		dst = netip.AddrFrom4([4]byte(frame[30:34]))
	case frame[12] == 0x86 && frame[13] == 0xdd && len(frame) >= 54:
		dst = netip.AddrFrom16([16]byte(frame[38:54]))
	default:
		return false
	}
	return dst.IsMulticast() && r.member(dst)
}

// ipMulticastMAC reports whether frame goes to an IP multicast MAC
// (01:00:5e for IPv4 groups, 33:33 for IPv6 ones).
func ipMulticastMAC(frame []byte) bool {
	return len(frame) >= 6 && (frame[0] == 0x01 && frame[1] == 0x00 && frame[2] == 0x5e || frame[0] == 0x33 && frame[1] == 0x33)
}

// toSelf reports whether frame is addressed to the node's own MAC.
func (r *roceLink) toSelf(frame []byte) bool {
	return len(frame) >= 6 && [6]byte(frame[:6]) == r.self
}

// NonBlockingWrites reports whether the real link's writes never wait for
// a reader (rxe.NonBlockingWriter: a TAP or AF_PACKET socket, not a pcap
// capture around one); frames looped back are queued or dropped, never
// waited for. The device then processes frames in the goroutine that
// reads them from this queue.
func (r *roceLink) NonBlockingWrites() bool {
	nb, ok := r.out.(rxe.NonBlockingWriter)
	return ok && nb.NonBlockingWrites()
}

// ReadReady reports whether a frame is waiting: queued for the device, or
// waiting on the real link for the Host to read and hand over
// (rxe.ReadReadier, asked when a retransmission timeout fires).
func (r *roceLink) ReadReady() bool {
	r.mu.Lock()
	n := len(r.q)
	r.mu.Unlock()
	if n > 0 {
		return true
	}
	rr, ok := r.out.(rxe.ReadReadier)
	return ok && rr.ReadReady()
}

// BatchSize implements link.Link.
func (r *roceLink) BatchSize() int { return max(1, r.out.BatchSize()) }

// MTU implements link.Link: the real link's.
func (r *roceLink) MTU() int { return r.out.MTU() }

// Close implements link.Link: it ends reads and drops queued frames. The
// real link stays open (the Host owns it).
func (r *roceLink) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("node: close RoCE link: %w", net.ErrClosed)
	}
	r.closed = true
	r.q = nil
	r.cond.Broadcast()
	return nil
}

var _ link.Link = (*roceLink)(nil)
