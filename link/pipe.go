package link

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/softroce/softroce/wire"
)

// Frame size limits shared by every Link implementation.
const (
	// EthernetHeaderSize is the destination MAC, source MAC and EtherType.
	EthernetHeaderSize = 14
	// VLANTagSize is one 802.1Q tag, which a frame may carry on top of MTU.
	VLANTagSize = 4
	// DefaultMTU is the MTU of a link whose configuration leaves it zero,
	// as an Ethernet netdev's default.
	DefaultMTU = 1500
	// MinMTU is the smallest MTU a link accepts (IPv4's minimum, as the
	// kernel's ETH_MIN_MTU).
	MinMTU = 68
	// MaxMTU is the largest MTU a link accepts (the kernel's ETH_MAX_MTU).
	MaxMTU = 65535
)

// MaxFrameSize returns the largest frame a link of the given MTU carries:
// the Ethernet header, one VLAN tag and mtu bytes of payload.
func MaxFrameSize(mtu int) int { return EthernetHeaderSize + VLANTagSize + mtu }

// CheckFrame reports whether frame fits a link of the given MTU, as a
// netdev's transmit path checks it: a frame shorter than an Ethernet
// header fails with EINVAL, and one longer than MTU plus the header (plus
// 4 for an 802.1Q-tagged frame) fails with EMSGSIZE — it is refused, not
// truncated.
func CheckFrame(frame []byte, mtu int) error {
	if len(frame) < EthernetHeaderSize {
		return fmt.Errorf("frame of %d bytes is shorter than an Ethernet header: %w", len(frame), syscall.EINVAL)
	}
	limit := EthernetHeaderSize + mtu
	if frame[12] == 0x81 && frame[13] == 0x00 { // ETH_P_8021Q
		limit += VLANTagSize
	}
	if len(frame) > limit {
		return fmt.Errorf("frame of %d bytes exceeds MTU %d (at most %d bytes with its header): %w", len(frame), mtu, limit, syscall.EMSGSIZE)
	}
	return nil
}

// PipeConfig configures NewPipe. The zero value (or a nil *PipeConfig)
// gives the defaults.
type PipeConfig struct {
	// MTU is each end's MTU; zero means DefaultMTU. Written frames larger
	// than MTU plus the Ethernet header (and a VLAN tag, if present) are
	// refused with an error wrapping EMSGSIZE.
	MTU int
	// QueueLen is how many frames each direction buffers; zero means 256.
	QueueLen int
	// BatchSize is what BatchSize reports; zero means 64.
	BatchSize int
	// DropWhenFull makes WritePackets drop (and count in Stats.Dropped)
	// frames that find the peer's queue full. When false, the default,
	// WritePackets blocks until the peer reads or either end closes:
	// back-pressure, so a lossless test never loses a frame by accident
	// (WriteRef makes the queue longer instead).
	DropWhenFull bool
}

// PipeStats counts what one end of a pipe did.
type PipeStats struct {
	// TxFrames and TxBytes count frames this end queued for its peer.
	TxFrames, TxBytes uint64
	// RxFrames and RxBytes count frames this end read.
	RxFrames, RxBytes uint64
	// Dropped counts frames this end wrote that were discarded: the peer
	// queue was full with DropWhenFull set, or the peer end was closed.
	Dropped uint64
	// Rejected counts frames WritePackets refused as too short or too
	// long for the MTU.
	Rejected uint64
}

// PipeEnd is one end of an in-memory Ethernet link made by Pipe or
// NewPipe (after wireguard-go's tuntest.ChannelTUN and gVisor's
// link/channel). Frames written to one end are copied into the other
// end's queue, so the writer may reuse its buffers at once. Buffers are
// reused, so steady-state traffic does not allocate.
//
// Closing an end makes its own reads and writes fail with an error
// wrapping net.ErrClosed and unblocks them; frames the peer writes to a
// closed end are dropped and counted, like frames sent on a cable nobody
// listens to, and the peer can still read what was queued for it.
type PipeEnd struct {
	rx, tx    *frameQueue
	peer      *PipeEnd
	mtu       int
	batchSize int
	drop      bool
	closed    atomic.Bool

	txFrames, txBytes, rxFrames, rxBytes, dropped, rejected atomic.Uint64
}

var _ Link = (*PipeEnd)(nil)

// Pipe returns the two ends of an in-memory link with the default
// configuration (MTU 1500, 256 frames queued each way, writes block when
// the queue is full).
func Pipe() (a, b *PipeEnd) { return NewPipe(nil) }

// NewPipe returns the two ends of an in-memory link configured by cfg (nil
// means defaults). It panics if cfg holds a negative QueueLen or
// BatchSize or an MTU outside [MinMTU, MaxMTU]: a programming error.
func NewPipe(cfg *PipeConfig) (a, b *PipeEnd) {
	var c PipeConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.QueueLen == 0 {
		c.QueueLen = 256
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU || c.QueueLen < 0 || c.BatchSize < 0 {
		panic(fmt.Sprintf("link.NewPipe: invalid config %+v", c))
	}
	qa, qb := newFrameQueue(c.QueueLen, MaxFrameSize(c.MTU)), newFrameQueue(c.QueueLen, MaxFrameSize(c.MTU))
	a = &PipeEnd{rx: qa, tx: qb, mtu: c.MTU, batchSize: c.BatchSize, drop: c.DropWhenFull}
	b = &PipeEnd{rx: qb, tx: qa, mtu: c.MTU, batchSize: c.BatchSize, drop: c.DropWhenFull}
	a.peer, b.peer = b, a
	return a, b
}

// ReadPackets implements Link.ReadPackets. A frame written with
// WriteNoICRC gets its ICRC here: every frame read this way carries the
// exact ICRC, as on a real link.
func (p *PipeEnd) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	var flags [64]bool
	if len(bufs) > len(flags) {
		bufs = bufs[:len(flags)]
	}
	n, err := p.read(bufs, sizes, flags[:], nil, false)
	for i := range n {
		if flags[i] {
			sealFrame(bufs[i][:sizes[i]])
		}
	}
	return n, err
}

// sealFrame computes the ICRC of a RoCEv2 frame written with WriteNoICRC
// (IP header after the Ethernet header and an optional 802.1Q tag).
func sealFrame(frame []byte) {
	l3 := EthernetHeaderSize
	if len(frame) >= l3 && frame[12] == 0x81 && frame[13] == 0x00 {
		l3 += VLANTagSize
	}
	_ = wire.SealICRC(frame, l3) // the writer built it: it is RoCEv2
}

// ReadNoICRC is ReadPackets for a reader that takes frames whose ICRC was
// not computed (an emulated device on the other end that wrote them with
// WriteNoICRC, and that trusts the in-memory link): noICRC[i] reports that
// frame i carries no ICRC. It reads at most len(noICRC) frames.
//
// Unlike ReadPackets it may hand over the queue's buffer instead of
// copying: bufs[i] is then replaced by a buffer of at least its capacity
// holding the frame, and the pipe keeps the one the caller passed. The
// caller must not keep other references to the buffers it passes.
func (p *PipeEnd) ReadNoICRC(bufs [][]byte, sizes []int, noICRC []bool) (int, error) {
	return p.read(bufs, sizes, noICRC, nil, true)
}

// ReadRef is ReadNoICRC for a reader that also takes payloads by
// reference (WriteRef): for a frame written with a PayloadRef, refs[i]
// holds it and the frame's bytes [refs[i].Off, refs[i].Off+len(refs[i].B))
// in bufs[i] are not its payload (refs[i].B is); for any other frame
// refs[i] is the zero PayloadRef. It reads at most len(refs) frames. The
// reader must treat refs[i].B as read-only and drop it once it has copied
// what it needs.
func (p *PipeEnd) ReadRef(bufs [][]byte, sizes []int, noICRC []bool, refs []PayloadRef) (int, error) {
	return p.read(bufs, sizes, noICRC[:min(len(noICRC), len(refs))], refs, true)
}

// TryReadRef is ReadRef that never waits: it returns 0 and no error when
// no frame is queued.
func (p *PipeEnd) TryReadRef(bufs [][]byte, sizes []int, noICRC []bool, refs []PayloadRef) (int, error) {
	return p.readMode(bufs, sizes, noICRC[:min(len(noICRC), len(refs))], refs, true, false)
}

// WaitReadable waits until a frame is queued for this end and no
// HoldWakeups is in force, without reading it, or the end closes (an
// error wrapping net.ErrClosed). With
// TryReadRef it lets a reader take a lock between the wait and the read,
// so that whoever holds the lock reads and processes the frames in order.
func (p *PipeEnd) WaitReadable() error {
	if !p.rx.waitReadable() {
		return &net.OpError{Op: "read", Net: "pipe", Err: net.ErrClosed}
	}
	return nil
}

// HoldWakeups keeps writes to this end from waking a reader waiting in
// WaitReadable or a read, until the matching ReleaseWakeups: for a caller
// that reads the frames itself meanwhile (TryReadRef), so that the
// reader it would wake for nothing sleeps on. Holds nest. ReleaseWakeups
// wakes the reader if frames are queued, so none is left unread.
func (p *PipeEnd) HoldWakeups() {
	q := p.rx
	q.mu.Lock()
	q.hush++
	q.mu.Unlock()
}

// ReleaseWakeups ends a HoldWakeups.
func (p *PipeEnd) ReleaseWakeups() {
	q := p.rx
	q.mu.Lock()
	q.hush--
	if q.hush == 0 && q.n > 0 {
		q.notEmpty.Broadcast()
	}
	q.mu.Unlock()
}

// Peer returns the other end of the pipe.
func (p *PipeEnd) Peer() *PipeEnd { return p.peer }

func (p *PipeEnd) read(bufs [][]byte, sizes []int, noICRC []bool, refs []PayloadRef, swap bool) (int, error) {
	return p.readMode(bufs, sizes, noICRC, refs, swap, true)
}

func (p *PipeEnd) readMode(bufs [][]byte, sizes []int, noICRC []bool, refs []PayloadRef, swap, block bool) (int, error) {
	if len(bufs) == 0 || len(sizes) == 0 || len(noICRC) == 0 {
		if p.closed.Load() {
			return 0, &net.OpError{Op: "read", Net: "pipe", Err: net.ErrClosed}
		}
		return 0, nil
	}
	if !block && p.rx.queued.Load() == 0 && !p.closed.Load() {
		// Nothing to read: no lock taken (a caller that tries often,
		// such as an inline chain looking for more frames, finds most
		// tries empty).
		return 0, nil
	}
	n, ok := p.rx.pop(bufs, sizes, noICRC, refs, swap, block)
	if !ok {
		return 0, &net.OpError{Op: "read", Net: "pipe", Err: net.ErrClosed}
	}
	var bytes int
	for _, s := range sizes[:n] {
		bytes += s
	}
	p.rxFrames.Add(uint64(n))
	p.rxBytes.Add(uint64(bytes))
	return n, nil
}

// WritePackets implements Link.WritePackets. It checks every frame with
// CheckFrame and stops at the first it refuses, returning how many it
// wrote before it and the error.
func (p *PipeEnd) WritePackets(bufs [][]byte) (int, error) { return p.write(bufs, nil, false, false) }

// WriteNoICRC is WritePackets for RoCEv2 frames built without their ICRC
// (wire.Frame.NoICRC): the pipe carries them marked, a ReadNoICRC reader
// takes them as they are, and ReadPackets computes the ICRC before it
// hands them out, so a frame is never seen without its exact ICRC.
//
// Unlike WritePackets it may keep the caller's buffer instead of copying
// it, as ReadNoICRC hands over the queue's: the frame must start its
// buffer (bufs[i][:cap(bufs[i])] is the caller's whole buffer), and
// bufs[i] of a frame the pipe took is then replaced by a buffer of at
// least its capacity (of length 0), which the caller owns. The caller
// must not keep other references to the buffers it passes.
func (p *PipeEnd) WriteNoICRC(bufs [][]byte) (int, error) { return p.write(bufs, nil, true, false) }

// PayloadRef is a frame's payload that the in-memory link carries by
// reference instead of in the frame (WriteRef): the frame's bytes [Off,
// Off+len(B)) are B's. The zero value means none.
type PayloadRef struct {
	// Off is where the payload starts in the frame.
	Off int
	// B is the payload, read-only to the pipe and its reader.
	B []byte
}

// WriteRef is WriteNoICRC for frames whose payload may stay where it is:
// for each refs[i] with a non-nil B, bufs[i] holds the frame's headers
// and trailer and leaves bytes [refs[i].Off, refs[i].Off+len(refs[i].B))
// unset, and the pipe carries refs[i].B with the frame. A ReadRef reader
// gets the reference as it is (one copy of the payload instead of two:
// from the sender's memory straight into the receiver's); ReadNoICRC and
// ReadPackets copy the payload into the frame first (and ReadPackets
// computes the ICRC over it), so a frame is never seen without its
// payload. refs may be shorter than bufs (the rest carry none).
//
// The writer must keep refs[i].B unchanged until the reader is done with
// it: an emulated HCA's send buffer, which belongs to the HCA until the
// peer's acknowledgement of the copy completes the send. A reference that
// does not fit its frame is refused with an error wrapping EINVAL, as a
// frame too long is.
//
// Unlike WritePackets and WriteNoICRC, WriteRef never waits for the peer
// to read: on a full queue (without DropWhenFull) it makes the queue
// longer. Its writers are emulated devices whose reading goroutine also
// processes what it reads and writes the answers: two of them, each
// waiting for room in the other's queue, would wait forever. The queue
// keeps its longest length, so a steady stream allocates nothing.
func (p *PipeEnd) WriteRef(bufs [][]byte, refs []PayloadRef) (int, error) {
	return p.write(bufs, refs, true, true)
}

func (p *PipeEnd) write(bufs [][]byte, refs []PayloadRef, noICRC, grow bool) (int, error) {
	if p.closed.Load() {
		return 0, &net.OpError{Op: "write", Net: "pipe", Err: net.ErrClosed}
	}
	n := 0
	var err error
	for i, b := range bufs {
		e := CheckFrame(b, p.mtu)
		if e == nil && i < len(refs) && refs[i].B != nil && (refs[i].Off < 0 || refs[i].Off > len(b) || len(refs[i].B) > len(b)-refs[i].Off) {
			e = fmt.Errorf("payload of %d bytes at %d does not fit a frame of %d bytes: %w", len(refs[i].B), refs[i].Off, len(b), syscall.EINVAL)
		}
		if e != nil {
			p.rejected.Add(1)
			bufs, err = bufs[:i], &net.OpError{Op: "write", Net: "pipe", Err: e}
			break
		}
	}
	queued, dropped, bytes, selfClosed := p.tx.push(bufs, refs, noICRC, grow && !p.drop, p.drop, &p.closed)
	n = queued + dropped
	p.txFrames.Add(uint64(queued))
	p.txBytes.Add(uint64(bytes))
	p.dropped.Add(uint64(dropped))
	if selfClosed {
		return n, &net.OpError{Op: "write", Net: "pipe", Err: net.ErrClosed}
	}
	return n, err
}

// BatchSize implements Link.BatchSize.
func (p *PipeEnd) BatchSize() int { return p.batchSize }

// MTU implements Link.MTU.
func (p *PipeEnd) MTU() int { return p.mtu }

// Close implements Link.Close. Closing an end twice returns an error
// wrapping net.ErrClosed.
func (p *PipeEnd) Close() error {
	if p.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: "pipe", Err: net.ErrClosed}
	}
	p.rx.close()
	p.tx.wake() // writers blocked on the peer's full queue see p closed
	return nil
}

// Stats returns this end's counters.
func (p *PipeEnd) Stats() PipeStats {
	return PipeStats{
		TxFrames: p.txFrames.Load(), TxBytes: p.txBytes.Load(),
		RxFrames: p.rxFrames.Load(), RxBytes: p.rxBytes.Load(),
		Dropped: p.dropped.Load(), Rejected: p.rejected.Load(),
	}
}

// smallFrame is the largest frame a slot holds in a buffer its own size;
// a larger one gets a buffer for the link's largest frame.
const smallFrame = 256

// frameQueue is a bounded ring of frame buffers. Slots keep their backing
// arrays between uses, so after warm-up pushing and popping allocate
// nothing.
type frameQueue struct {
	mu       sync.Mutex
	notEmpty sync.Cond
	notFull  sync.Cond
	slots    []slot
	// free holds the buffers readers traded in (pop), most recent last:
	// a writer trading its buffer (push) gets the one a reader released
	// last, still in a cache, rather than the slot's.
	free     [][]byte
	maxFrame int // a slot's first buffer holds the largest frame, so that it can be traded (pop)
	head, n  int
	queued   atomic.Int32 // n, for a look without the lock
	closed   bool         // the reading end closed
	hush     int          // HoldWakeups in force: push wakes no reader
}

// slot is one frame of a frameQueue.
type slot struct {
	b      []byte
	ref    PayloadRef // the payload, carried by reference (WriteRef)
	noICRC bool       // the frame was written without its ICRC
}

func newFrameQueue(n, maxFrame int) *frameQueue {
	q := &frameQueue{slots: make([]slot, n), maxFrame: maxFrame}
	q.notEmpty.L = &q.mu
	q.notFull.L = &q.mu
	return q
}

// push copies frames into the queue; with trade (frames written without
// their ICRC, WriteNoICRC) it takes a large frame's buffer instead and
// gives the writer in frames[i] one of at least the same capacity: the
// last a reader traded in (free), else the slot's, else a new one. It returns how many it queued and how many it
// dropped (queue full in drop mode, or the reader closed; the frames after
// a close are all counted dropped) and their bytes, and whether it stopped
// because the writer itself closed (writerClosed), in which case the rest
// were neither. refs[j], if any, is frame j's payload by reference. With
// grow, a full queue grows instead of making the writer wait.
func (q *frameQueue) push(frames [][]byte, refs []PayloadRef, trade, grow, drop bool, writerClosed *atomic.Bool) (queued, dropped, bytes int, selfClosed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for j, f := range frames {
		if grow && q.n == len(q.slots) && !q.closed {
			q.grow()
		}
		for q.n == len(q.slots) && !q.closed && !drop && !writerClosed.Load() {
			q.queued.Store(int32(q.n))
			q.notEmpty.Broadcast() // let the reader drain what is queued
			q.notFull.Wait()
		}
		if writerClosed.Load() {
			selfClosed = true
			break
		}
		bytes += len(f)
		if q.closed || q.n == len(q.slots) {
			dropped++
			continue
		}
		s := &q.slots[q.slot(q.n)]
		switch b := s.b; {
		case trade && len(f) > smallFrame:
			if cap(b) < cap(f) {
				b = q.takeFree(cap(f))
			}
			s.b, frames[j] = f, b[:0]
		case cap(b) < len(f) && (len(f) > smallFrame || trade || len(q.free) > 0):
			// A trading writer's small frame (an ACK among WRITEs) gets a
			// large buffer, as the reader trades one back for it: a slot
			// its own size would be thrown away by the next large frame.
			s.b = append(q.takeFree(max(q.maxFrame, len(f))), f...)
		default:
			s.b = append(b[:0], f...)
		}
		s.noICRC = trade
		if j < len(refs) {
			s.ref = refs[j]
		}
		q.n++
		queued++
	}
	q.queued.Store(int32(q.n))
	if queued > 0 && q.hush == 0 {
		q.notEmpty.Broadcast()
	}
	return queued, dropped, bytes, selfClosed
}

// pop moves up to len(bufs) frames into bufs, and their marks into
// noICRC, blocking while the queue is empty. With swap, a slot whose
// buffer is at least as large as bufs[i] trades buffers with it instead
// of copying. A payload carried by reference goes to refs[i] when refs is
// not nil, else it is copied into the frame. It reports false once the
// queue is closed. Without block it returns at once when the queue is
// empty.
func (q *frameQueue) pop(bufs [][]byte, sizes []int, noICRC []bool, refs []PayloadRef, swap, block bool) (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for block && q.n == 0 && !q.closed {
		q.notEmpty.Wait()
	}
	if q.closed {
		return 0, false
	}
	k := min(len(bufs), len(sizes), len(noICRC), q.n)
	if refs != nil {
		k = min(k, len(refs))
	}
	for i := range k {
		s := &q.slots[q.head]
		b := s.b
		if swap && cap(b) >= cap(bufs[i]) && len(b) <= len(bufs[i]) {
			sizes[i] = len(b)
			if s.noICRC && len(q.free) < len(q.slots) {
				// A writer trades for it next (push).
				q.free = append(q.free, bufs[i][:0])
				bufs[i], s.b = b[:cap(b)], nil
			} else {
				bufs[i], s.b = b[:cap(b)], bufs[i][:0]
			}
		} else {
			sizes[i] = copy(bufs[i], b)
		}
		noICRC[i] = s.noICRC
		if refs != nil {
			refs[i] = s.ref
		} else if ref := s.ref; ref.B != nil && ref.Off < sizes[i] {
			copy(bufs[i][ref.Off:sizes[i]], ref.B)
		}
		s.ref = PayloadRef{}
		q.head = q.slot(1)
		q.n--
	}
	q.queued.Store(int32(q.n))
	if q.n == 0 {
		// Start again at the first slot: a queue that empties often
		// keeps using the same few slots, in a cache.
		q.head = 0
	}
	if k > 0 {
		q.notFull.Broadcast()
	}
	return k, true
}

// slot returns the index of the slot i after the head (i at most the
// ring's length): a subtraction, not a division.
func (q *frameQueue) slot(i int) int {
	k := q.head + i
	if k >= len(q.slots) {
		k -= len(q.slots)
	}
	return k
}

// waitReadable waits until the queue holds a frame (true) or is closed
// (false).
func (q *frameQueue) waitReadable() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (q.n == 0 || q.hush > 0) && !q.closed {
		q.notEmpty.Wait()
	}
	return !q.closed
}

// grow doubles the ring, its frames in order from slot 0; q.mu held.
func (q *frameQueue) grow() {
	n := max(2*len(q.slots), 16)
	slots := make([]slot, n)
	for i := range q.n {
		slots[i] = q.slots[q.slot(i)]
	}
	q.slots, q.head = slots, 0
}

// freeChunk is how many buffers takeFree allocates at once: the queue's
// buffers grow with the most frames it has held, which a burst of load may
// raise long after warm-up, and one allocation per chunk keeps that rare.
const freeChunk = 16

// takeFree returns the buffer a reader traded in last if it holds n
// bytes, or a new one; q.mu held.
func (q *frameQueue) takeFree(n int) []byte {
	if k := len(q.free) - 1; k >= 0 && cap(q.free[k]) >= n {
		b := q.free[k]
		q.free[k] = nil
		q.free = q.free[:k]
		return b[:0]
	}
	if n <= smallFrame || len(q.free) > 0 {
		return make([]byte, 0, n)
	}
	arr := make([]byte, freeChunk*n)
	for i := 1; i < freeChunk; i++ {
		q.free = append(q.free, arr[i*n:i*n:(i+1)*n])
	}
	return arr[:0:n]
}

func (q *frameQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.notEmpty.Broadcast()
	q.notFull.Broadcast()
}

// wake unblocks writers waiting for room so they re-check their own end.
func (q *frameQueue) wake() {
	q.mu.Lock()
	// Taking the lock orders this wake after any waiter's check of the
	// closed flag: it is either waiting already or will see the flag.
	q.mu.Unlock()
	q.notFull.Broadcast()
}
