package rxe

import (
	"runtime"
	"sync"

	"github.com/softroce/softroce/link"
)

// Two asynchronous devices on the two ends of one bare link.PipeEnd pair
// in one process reach each other inline: after PostSend has written a
// request, the caller's goroutine processes it as the peer device (its
// responder places the payload and writes the ACK) and then the ACK as
// this device (its completer completes the WR and queues the CQE), as the
// kernel's rxe runs the requester in the caller's context (rxe_post_send)
// and hands a packet for a local destination straight to the receive path
// (rxe_loopback, rxe_rcv), its tasks running inline when idle
// (rxe_run_task). No goroutine hand-off where nothing blocks: the frames
// still cross the pipe, in order, and each device's reading goroutine
// processes whatever the caller leaves.
//
// Ordering: a device's frames are read and processed under its procMu,
// by its reading goroutine (which waits for a frame without reading it,
// link.PipeEnd.WaitReadable, then reads under procMu) or by a caller that
// only tries the lock (drainInline): frames are processed in pipe order
// whoever processes them, and a caller never waits for a device's procMu.
//
// Locks: runInline runs with no device lock held (after PostSend's
// unlock); each device processes under its own r.mu, released before it
// writes (flushTx), so no device calls into its peer holding its own
// lock. Recursion is bounded: a completion handler run inline that posts
// again finds its device's inlining flag set (or the procMu held) and
// leaves the frames to the reading goroutine, so a goroutine nests at most
// one runInline per device.

// pipeDevices maps a bare link.PipeEnd to the asynchronous device that
// reads it, for its peer's runInline.
var pipeDevices sync.Map // *link.PipeEnd → *device

// inlineRounds bounds how many request/response rounds one runInline
// carries: a stream of packets that never ends (a window refilled by each
// ACK) goes back to the reading goroutines after that.
const inlineRounds = 8

// inlineCapable reports whether t's frames may be processed inline by
// another goroutine: an asynchronous device on a bare pipe end.
func (t *transport) inlineCapable() bool { return t != nil && t.pipe != nil && t.inline && !t.sync }

// postInline is PostSend with the chain run inline (runInline) when the
// device and its peer may: the reading goroutines' wake-ups are held
// from before the requests are written until the chain is done.
func (r *device) postInline(post func() (int, error)) (int, error) {
	peer := r.inlinePeer()
	if peer == nil || !r.inlining.CompareAndSwap(false, true) {
		return post()
	}
	defer r.inlining.Store(false)
	// The two reading goroutines would wake for frames this goroutine
	// processes: hold their wake-ups until it is done (the release
	// wakes a reader whose frames remain).
	t := r.tp
	peerEnd := t.pipe.Peer()
	peerEnd.HoldWakeups()
	t.pipe.HoldWakeups()
	defer t.pipe.ReleaseWakeups()
	defer peerEnd.ReleaseWakeups()
	n, err := post()
	r.runInline(peer)
	return n, err
}

// inlinePeer returns the device on the other end of r's bare pipe end
// when the two may run each other's receive path inline, else nil.
func (r *device) inlinePeer() *device {
	t := r.tp
	if !t.inlineCapable() || r.cfg.NoInline {
		return nil
	}
	v, ok := pipeDevices.Load(t.pipe.Peer())
	if !ok {
		return nil
	}
	return v.(*device)
}

// runInline processes, in the caller's goroutine, what peer, the device
// on the other end of the pipe, has received and then what r has, round
// by round until nothing moves; no device lock held. It returns how many
// frames it processed.
func (r *device) runInline(peer *device) int {
	total := 0
	for range inlineRounds {
		n := peer.drainInline()
		n += r.drainInline()
		if n == 0 {
			break
		}
		total += n
	}
	return total
}

// drainInline processes the frames waiting on r's pipe end if nobody else
// is (procMu only tried) and returns how many.
func (r *device) drainInline() int {
	t := r.tp
	if !t.procMu.TryLock() {
		return 0
	}
	k, _, _ := r.readPipeLocked()
	t.procMu.Unlock()
	r.inlineFrames.Add(uint64(k))
	return k
}

// readPipeLocked reads what waits on the pipe without waiting and
// processes it; t.procMu held. It returns how many frames, whether the
// batch woke a completion handler (processBatch), and the read's error.
func (r *device) readPipeLocked() (int, bool, error) {
	t := r.tp
	bufs, sizes, noICRC, refs := t.pbufs, t.psizes, t.pnoICRC, t.prefs
	if t.pempty > 0 {
		t.fill(bufs[:t.pempty])
		t.pempty = 0
	}
	k, err := t.pipe.TryReadRef(bufs, sizes, noICRC, refs)
	if k == 0 {
		return 0, false, err
	}
	t.rxRead.Add(uint64(k))
	// The frames are processed in the buffers they were read into,
	// which stay in bufs for the next read to trade (a buffer the pipe
	// takes goes back to the peer's writer): nothing kept from them
	// outlives the processing, as with processBatch.
	r.lock()
	r.hold.reading = true
	for i := range k {
		r.rxNoICRC, r.rxRef = noICRC[i], refs[i]
		refs[i] = link.PayloadRef{}
		r.receive(bufs[i][:sizes[i]])
	}
	woke := r.endRx(k, true)
	if r.readsPending.Load() > 0 {
		t.inMu.Lock()
		t.inCond.Broadcast()
		t.inMu.Unlock()
	}
	return k, woke, err
}

// pipeReadLoop is readLoop on a bare pipe end: it waits for a frame, then
// reads and processes under procMu what a caller's runInline has not.
func (r *device) pipeReadLoop() {
	t := r.tp
	defer t.wg.Done()
	for {
		err := t.pipe.WaitReadable()
		if err == nil {
			var woke bool
			t.procMu.Lock()
			_, woke, err = r.readPipeLocked()
			t.procMu.Unlock()
			if woke {
				// A request was received and its completion woke a
				// handler: let the goroutine it woke run before this
				// one reads again. It is ready to run on this
				// processor, and the next frame is the peer's answer
				// to what it will post.
				runtime.Gosched()
			}
		}
		if err != nil {
			t.readerDone()
			return
		}
	}
}
