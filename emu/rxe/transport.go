package rxe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Quirks selects, for each rxe deviation from the IBTA specification that
// touches the transport, the IBTA behaviour instead. The zero
// value is Linux 6.12 rxe in every respect.
type Quirks struct {
	// RetryCnt7Finite makes retry_cnt 7 count down like any other value
	// (IBTA). rxe treats 7 as infinite, like rnr_retry.
	RetryCnt7Finite bool
	// RNRCode25IBTA makes RNR timer code 25 wait 61.44 ms (IBTA) instead of
	// rxe's 61.41 ms table typo.
	RNRCode25IBTA bool
	// NoGSIAckReq leaves the AckReq bit clear on GSI (QP1) packets, as on
	// every other datagram (IBTA); rxe sets it on the last packet.
	NoGSIAckReq bool
	// AckReqInterval is the number of consecutive RC packets without AckReq
	// after which a middle packet gets it; 0 means rxe's 65 (the 66th
	// packet carries A=1).
	AckReqInterval int
	// UDOversizeError completes a UD send larger than the port MTU with
	// IB_WC_LOC_LEN_ERR (QP to ERR) instead of rxe's silent success without
	// a packet.
	UDOversizeError bool
	// RecvOverflowIBTA answers an RC/UC message that does not fit its
	// receive WQE with a receive IB_WC_LOC_LEN_ERR and NAK 0x61 (invalid
	// request) instead of rxe's IB_WC_LOC_QP_OP_ERR and NAK 0x63.
	RecvOverflowIBTA bool
	// InvalidateNAK answers a SEND_WITH_INVALIDATE whose R_Key cannot be
	// invalidated with NAK 0x61 instead of rxe's normal ACK;
	// the receive completion is IB_WC_REM_INV_REQ_ERR either way.
	InvalidateNAK bool
	// AccessNAK62 answers a request the QP's access flags do not allow
	// (REMOTE_READ/WRITE/ATOMIC missing) with NAK 0x62 (remote access
	// error) instead of rxe's 0x61.
	AccessNAK62 bool
	// UCResyncIBTA accepts the first message after a UC sequence break (IBTA);
	// rxe drops it as well: the first packet of the next message only resets the
	// sequence state.
	UCResyncIBTA bool
	// Tick rounds the retransmission and RNR timers up to a multiple of it,
	// at least one tick, as rxe's conversion to jiffies does (4 ms at
	// HZ=250). Zero uses the exact IBTA durations.
	Tick time.Duration
}

// cacheOnly is a cancelled context: a Resolver asked with it answers from
// its cache without waiting.
var cacheOnly = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// rnrTimerUS is the RNR NAK timer table in microseconds (ib_rnr_timeout,
// rxe's rnrnak_usec with its code-25 typo).
var rnrTimerUS = [32]uint32{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61410, 81920, 122880, 163840,
	245760, 327680, 491520}

// RNRDelay returns the wait coded by an RNR NAK timer field
// under these quirks.
func (k Quirks) RNRDelay(code uint8) time.Duration {
	us := rnrTimerUS[code&0x1F]
	if code&0x1F == 25 && k.RNRCode25IBTA {
		us = 61440
	}
	return k.tick(time.Duration(us) * time.Microsecond)
}

// RetransmitTimeout returns the local ACK timeout 4.096 µs × 2^timeout
// (0: no timer, returned as 0).
func (k Quirks) RetransmitTimeout(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return k.tick(4096 * time.Nanosecond << min(timeout, 31))
}

func (k Quirks) tick(d time.Duration) time.Duration {
	if k.Tick <= 0 {
		return d
	}
	n := (d + k.Tick - 1) / k.Tick
	return max(n, 1) * k.Tick
}

func (k Quirks) ackInterval() int {
	if k.AckReqInterval > 0 {
		return k.AckReqInterval
	}
	return 65
}

// Pender is a Link that can tell how many frames are waiting to be read,
// so that a read of that many does not block. A synchronous device on
// such a link reads in Poll itself and runs no goroutine at all.
type Pender interface {
	// Pending returns how many frames are waiting to be read.
	Pending() int
}

// NonBlockingWriter is a Link whose WritePackets never waits for the
// peer to read: the kernel queues or drops (a TAP, an AF_PACKET or UDP
// socket). On such a link, when NonBlockingWrites reports true, the
// asynchronous device processes frames in the goroutine that reads them,
// which writes the answers itself: no hand-off to another goroutine per
// frame, and no deadlock with a peer that does the same, as there would
// be on a link whose writes wait for the peer's reader (a link.Pipe's
// WritePackets without DropWhenFull; a device on a bare link.PipeEnd
// writes with WriteRef, which never waits, and processes inline too).
// Bursts of frames go to each transmit stream's writer goroutine
// (txwriter.go), so that the goroutine that built one builds the next
// while it is written.
type NonBlockingWriter interface {
	NonBlockingWrites() bool
}

// ReadReadier is a Link that can tell, without reading, whether a frame is
// waiting to be read (a TAP's poll(2) for POLLIN). A retransmission
// timeout that finds a frame waiting puts its retry off once, so that a
// response already received is processed first (rxe_completer: a
// response queued when the timer's run begins cancels the retry).
type ReadReadier interface {
	ReadReady() bool
}

// transport is the device's attachment to its link.
type transport struct {
	l     link.Link
	sync  bool
	frame int // buffer size

	pender Pender // synchronous reads without a goroutine
	rbufs  [][]byte
	rsizes []int
	spare  []rxFrame // the inbox's other half, for Poll

	// inline: the reading goroutine processes what it reads
	// (NonBlockingWriter, or a bare link.PipeEnd); rbatch is its batch.
	// noHold: with Config.CoalesceACKs, a batch's ACKs are merged but
	// never held (ackhold.go).
	inline, noHold bool
	rbatch         []rxFrame

	inMu   sync.Mutex
	inCond *sync.Cond
	inbox  []rxFrame
	closed bool
	rxRead atomic.Uint64
	rxDone atomic.Uint64 // frames of rxRead processed (processBatch)
	wg     sync.WaitGroup

	// procMu orders the processing of inbox batches: whoever takes a
	// batch (the work loop, Poll, Settle) processes it before the next
	// batch is taken, so frames are processed in inbox order.
	procMu  sync.Mutex
	holders atomic.Int32 // callers inside Settle: they process loopback frames

	// nl is the link when it carries frames without their ICRC
	// (link.PipeEnd) or seals and checks them itself (the UDP link):
	// frames are built with wire.Frame.NoICRC and written with
	// WriteNoICRC, and read with ReadNoICRC, which marks the frames
	// whose ICRC the device need not check.
	nl noICRCLink
	// pipe is the link when it is a bare link.PipeEnd: requests carry
	// their payload by reference (WriteRef, payloadRef) and frames are
	// read with ReadRef.
	pipe *link.PipeEnd
	// The pipe's read buffers (inline.go), procMu held; pbufs[:pempty]
	// are nil (not filled yet).
	pbufs   [][]byte
	pempty  int
	psizes  []int
	pnoICRC []bool
	prefs   []link.PayloadRef

	poolMu sync.Mutex
	pool   [][]byte

	// tx are the two transmit streams, requests and responses (see
	// device.txq).
	tx [numStreams]txStream
}

// txStream is one transmit stream's writer state: mu is held from the
// moment a batch is taken off the device's queue (under r.mu) until it
// is written or handed to the stream's writer goroutine (txwriter.go),
// so that batches reach the link in the order they were queued.
type txStream struct {
	mu        sync.Mutex
	spare     [][]byte
	spareRefs []link.PayloadRef
	w         *writer // nil: no writer goroutine
}

// The transmit streams. A device's requester and responder are separate
// tasks in rxe (rxe_requester, rxe_responder) that each transmit in their
// own order and may run at the same time on two CPUs: the wire order
// within each stream is fixed, the interleaving of the two is not. Kept
// apart here, the ACK the responder sends after a receive completion
// does not hold up the request the woken application posts.
const (
	streamReq = iota // requests (the requester: runSQ, its retries)
	streamRsp        // responses (ACK, NAK, READ responses, atomic ACK)
	numStreams
)

// attach starts the receive side over cfg.Link.
func (r *device) attach() {
	l := r.cfg.Link
	t := &transport{l: l, sync: r.cfg.Synchronous, frame: link.MaxFrameSize(l.MTU())}
	t.inCond = sync.NewCond(&t.inMu)
	// Only a bare pipe end, or a link that seals and checks every ICRC
	// itself (the UDP link): a wrapper (a capture, a fault injector, a
	// test's gate embedding a pipe end) sees every frame, so its frames
	// carry their ICRC.
	if !r.cfg.Loopback {
		switch nl := l.(type) {
		case *link.PipeEnd:
			t.nl, t.pipe = nl, nl
		case icrcSealer:
			t.nl = nl
		}
	}
	if nb, ok := l.(NonBlockingWriter); ok && !t.sync {
		t.inline = nb.NonBlockingWrites()
	}
	if t.pipe != nil && !t.sync {
		// The pipe's WriteRef never waits for the peer (its queue
		// grows), so the reading goroutine may process what it reads
		// and write the answers itself, as on a NonBlockingWriter: no
		// hand-off to the work loop per batch. With
		// Config.CoalesceACKs its ACKs are merged within a batch but
		// not held (ackhold.go): the in-memory link's writes are not
		// system calls.
		t.inline, t.noHold = true, true
	}
	r.tp = t
	if pl, ok := l.(Pender); ok && t.sync {
		t.pender = pl
		return
	}
	if t.syscallWrites() {
		r.startWriters()
	}
	t.wg.Add(1)
	if t.inlineCapable() {
		n := max(1, l.BatchSize())
		t.pbufs, t.psizes, t.pnoICRC, t.prefs = make([][]byte, n), make([]int, n), make([]bool, n), make([]link.PayloadRef, n)
		t.pempty = n
		pipeDevices.Store(t.pipe, r)
		go r.pipeReadLoop()
	} else {
		go r.readLoop()
	}
	if !t.sync {
		t.wg.Add(1)
		go r.workLoop()
	}
}

// poolChunk is how many frame buffers get allocates at once when the pool
// is empty: the pool grows to the most frames in flight, which a burst
// of load may raise long after warm-up, and one allocation per chunk
// keeps that rare.
const poolChunk = 16

func (t *transport) get() []byte {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	if n := len(t.pool); n > 0 {
		b := t.pool[n-1]
		t.pool[n-1] = nil
		t.pool = t.pool[:n-1]
		return b[:cap(b)]
	}
	n := t.frame
	arr := make([]byte, poolChunk*n)
	for i := 1; i < poolChunk; i++ {
		t.pool = append(t.pool, arr[i*n:(i+1)*n:(i+1)*n])
	}
	return arr[:n:n]
}

// fill sets every element of bs to a frame buffer from the pool, under
// one lock.
func (t *transport) fill(bs [][]byte) {
	if len(bs) == 0 {
		return
	}
	t.poolMu.Lock()
	for i := range bs {
		n := len(t.pool)
		if n == 0 {
			break
		}
		bs[i] = t.pool[n-1][:cap(t.pool[n-1])]
		t.pool[n-1] = nil
		t.pool = t.pool[:n-1]
	}
	t.poolMu.Unlock()
	for i := range bs {
		if bs[i] == nil {
			bs[i] = t.get()
		}
	}
}

func (t *transport) put(bs [][]byte) {
	t.poolMu.Lock()
	t.pool = append(t.pool, bs...)
	t.poolMu.Unlock()
}

// readLoop moves frames from the link into the inbox until it closes.
func (r *device) readLoop() {
	t := r.tp
	defer t.wg.Done()
	n := max(1, t.l.BatchSize())
	bufs, sizes, noICRC := make([][]byte, n), make([]int, n), make([]bool, n)
	var refs []link.PayloadRef
	if t.pipe != nil {
		refs = make([]link.PayloadRef, n)
	}
	for {
		for i := range bufs {
			if bufs[i] == nil {
				bufs[i] = t.get()
			}
		}
		var k int
		var err error
		if t.pipe != nil {
			k, err = t.pipe.ReadRef(bufs, sizes, noICRC, refs)
		} else if t.nl != nil {
			k, err = t.nl.ReadNoICRC(bufs, sizes, noICRC)
		} else {
			k, err = t.l.ReadPackets(bufs, sizes)
		}
		if k > 0 && t.inline {
			t.rxRead.Add(uint64(k))
			batch := t.rbatch[:0]
			for i := range k {
				f := rxFrame{b: bufs[i][:sizes[i]], noICRC: t.nl != nil && noICRC[i]}
				if refs != nil {
					f.ref, refs[i] = refs[i], link.PayloadRef{}
				}
				batch = append(batch, f)
				bufs[i] = nil
			}
			t.procMu.Lock()
			woke := r.processBatch(batch, true)
			t.procMu.Unlock()
			t.rbatch = batch[:0]
			if woke {
				// A request was received and its completion woke a
				// handler: let the goroutine it woke run before this
				// one reads again. It is ready to run on this
				// processor, and the next frame is the peer's answer
				// to what it will post.
				runtime.Gosched()
			}
			if r.readsPending.Load() > 0 {
				t.inMu.Lock()
				t.inCond.Broadcast()
				t.inMu.Unlock()
			}
		} else if k > 0 {
			t.inMu.Lock()
			for i := range k {
				f := rxFrame{b: bufs[i][:sizes[i]], noICRC: t.nl != nil && noICRC[i]}
				if refs != nil {
					f.ref, refs[i] = refs[i], link.PayloadRef{}
				}
				t.inbox = append(t.inbox, f)
				bufs[i] = nil
			}
			t.rxRead.Add(uint64(k))
			t.inCond.Broadcast()
			t.inMu.Unlock()
		}
		if err != nil {
			t.readerDone()
			return
		}
	}
}

// readPending moves the frames a Pender link holds into the inbox.
func (r *device) readPending() {
	t := r.tp
	for {
		n := min(t.pender.Pending(), max(1, t.l.BatchSize()))
		if n <= 0 {
			return
		}
		if len(t.rbufs) < n {
			t.rbufs, t.rsizes = make([][]byte, n), make([]int, n)
		}
		bufs, sizes := t.rbufs[:n], t.rsizes[:n]
		for i := range bufs {
			bufs[i] = t.get()
		}
		k, err := t.l.ReadPackets(bufs, sizes)
		t.inMu.Lock()
		for i := range k {
			t.inbox = append(t.inbox, rxFrame{b: bufs[i][:sizes[i]]})
		}
		t.inMu.Unlock()
		t.rxRead.Add(uint64(k))
		t.put(bufs[k:])
		clear(bufs)
		if err != nil || k < n {
			return
		}
	}
}

// workLoop processes frames as they arrive (asynchronous mode).
func (r *device) workLoop() {
	t := r.tp
	defer t.wg.Done()
	var batch []rxFrame
	for {
		t.inMu.Lock()
		for len(t.inbox) == 0 && !t.closed && r.readsPending.Load() == 0 {
			t.inCond.Wait()
		}
		if len(t.inbox) == 0 && t.closed {
			t.inMu.Unlock()
			return
		}
		t.inMu.Unlock()
		t.procMu.Lock()
		t.inMu.Lock()
		batch, t.inbox = t.inbox, batch[:0]
		t.inMu.Unlock()
		if len(batch) > 0 {
			r.process(batch)
		}
		// One round of READ replies between batches: responses of
		// several QPs interleave with each other and with new requests.
		if r.readsPending.Load() > 0 {
			r.pumpReads()
		}
		t.procMu.Unlock()
	}
}

// process runs the receive pipeline over a batch of frames and recycles
// their buffers.
func (r *device) process(batch []rxFrame) { r.processBatch(batch, false) }

// processBatch is process; inline marks a batch the reading goroutine
// processes itself (NonBlockingWriter), whose ACKs Config.CoalesceACKs
// may hold (ackhold.go). It reports whether the batch queued responses
// and woke a completion handler (or ran another deferred callback): the
// batch that holds its responses under Config.CoalesceACKs, and after
// which the reader lets the goroutine it woke run.
func (r *device) processBatch(batch []rxFrame, inline bool) bool {
	woke := r.processFrames(batch, inline)
	t := r.tp
	t.poolMu.Lock()
	for i := range batch {
		t.pool = append(t.pool, batch[i].b)
	}
	t.poolMu.Unlock()
	clear(batch)
	return woke
}

// processFrames is processBatch leaving the frames' buffers to the
// caller.
func (r *device) processFrames(batch []rxFrame, inline bool) bool {
	r.lock()
	r.hold.reading = inline
	for _, f := range batch {
		r.rxNoICRC, r.rxRef = f.noICRC, f.ref
		r.receive(f.b)
	}
	return r.endRx(len(batch), inline)
}

// endRx ends the processing of n frames that processFrames or
// processPipe began under r.mu, which it releases, and reports whether
// they queued responses and woke a handler (processBatch).
func (r *device) endRx(n int, inline bool) bool {
	r.rxNoICRC, r.rxRef = false, link.PayloadRef{}
	woke := inline && len(r.deferred) > 0 && r.hold.queued
	r.tp.rxDone.Add(uint64(n))
	r.unlock()
	return woke
}

// rxFrame is a frame in the inbox: noICRC marks one that carries no ICRC
// (looped back, or from a peer on a link that carries such frames), whose
// check is skipped.
type rxFrame struct {
	b      []byte
	noICRC bool
	ref    link.PayloadRef // the payload by reference (link.PipeEnd.ReadRef)
}

// noICRCLink is a link that carries frames without their ICRC where
// nobody can observe them (link.PipeEnd), or computes and checks the
// ICRC itself (icrcSealer).
type noICRCLink interface {
	WriteNoICRC(bufs [][]byte) (int, error)
	ReadNoICRC(bufs [][]byte, sizes []int, noICRC []bool) (int, error)
}

// icrcSealer is a link that computes the ICRC of every frame it sends and
// checks every frame it receives (the UDP link): WriteNoICRC takes frames
// built without it, and ReadNoICRC marks the frames whose ICRC the link
// verified. SealsICRC only names the kind.
type icrcSealer interface {
	noICRCLink
	SealsICRC()
}

// Poll processes every frame that has arrived and returns how many it
// processed. With Config.Synchronous this is the only place frames are
// processed, so a test drives two devices step by step (post, Poll both
// until nothing moves, advance a clock.Manual to fire timers). Without a
// link it returns 0.
func (r *device) Poll() int {
	t := r.tp
	if t == nil {
		return 0
	}
	t.procMu.Lock()
	defer t.procMu.Unlock()
	if t.pender != nil {
		r.readPending()
	}
	t.inMu.Lock()
	batch := t.inbox
	t.inbox = t.spare[:0]
	t.spare = nil
	t.inMu.Unlock()
	n := len(batch)
	if n > 0 {
		r.process(batch)
	}
	for r.readsPending.Load() > 0 {
		r.pumpReads() // the READ replies, round by round
	}
	t.inMu.Lock()
	if t.spare == nil {
		t.spare = batch[:0]
	}
	t.inMu.Unlock()
	return n
}

// rxWaiting reports whether a frame has arrived that the device has not
// processed: read (or looped back) and not yet through processBatch, or
// waiting on the link (Pender, ReadReadier). r.mu held.
func (t *transport) rxWaiting() bool {
	if t.rxRead.Load() != t.rxDone.Load() {
		return true
	}
	if t.pender != nil {
		return t.pender.Pending() > 0
	}
	rr, ok := t.l.(ReadReadier)
	return ok && rr.ReadReady()
}

// Received returns how many frames the device has read from its link
// (processed or waiting for Poll).
func (r *device) Received() uint64 {
	if r.tp == nil {
		return 0
	}
	return r.tp.rxRead.Load()
}

// Close detaches the device from its link: it writes what is queued for
// transmission, closes the link and waits for the receive goroutines.
// Timers still pending find no link and do nothing.
//
// A frame the device has handed to its link writer (an ACK, the last
// packet of a message whose sender already completed) is written before
// the link closes, held ACKs too (ackhold.go): Close takes the device
// lock, whose release flushes the transmit queues, and then closes the
// link holding both streams' locks, after any flush still writing (the
// kernel's rxe drains its tasks before the device goes, rxe_dealloc /
// rxe_cleanup_task).
func (r *device) Close() error {
	t := r.tp
	if t == nil {
		return nil
	}
	r.lock()
	r.hold.held = false
	if r.hold.timer != nil {
		r.hold.timer.Stop()
		r.hold.timer = nil
	}
	r.unlock() // flushes r.txq
	if t.inlineCapable() {
		pipeDevices.CompareAndDelete(t.pipe, r)
	}
	for i := range t.tx {
		t.tx[i].mu.Lock()
		t.tx[i].drainWriter()
	}
	err := t.l.Close()
	for i := range t.tx {
		t.tx[i].stopWriter()
		t.tx[i].mu.Unlock()
	}
	t.wg.Wait()
	if t.inlineCapable() {
		// A peer's runInline that read frames before the close
		// processes them under procMu: wait for it, so that nothing
		// runs once the device is detached.
		t.procMu.Lock()
		t.procMu.Unlock()
	}
	r.lock()
	r.detached = true
	r.unlock()
	return err
}

// flushTx writes the frames queued under the lock, or hands them to their
// stream's writer (txwriter.go); called by unlock with r.mu held, it
// releases r.mu. Each stream's lock, taken before its batch is, keeps the
// wire order of that stream's batches. Once every lock is released, it
// waits while a writer it handed frames to holds maxQueued or more.
func (r *device) flushTx() {
	t := r.tp
	var batches [numStreams][][]byte
	var refs []link.PayloadRef
	for i := range r.txq {
		if len(r.txq[i]) == 0 {
			continue
		}
		if i == streamRsp && r.hold.held {
			continue
		}
		s := &t.tx[i]
		s.mu.Lock()
		batches[i] = r.txq[i]
		r.txq[i] = s.spare
		s.spare = nil
		if i == streamReq {
			refs, r.txRefs, s.spareRefs = r.txRefs, s.spareRefs, nil
		}
	}
	r.mu.Unlock()
	var failed int
	var full [numStreams]bool
	for i, tx := range batches {
		if tx == nil {
			continue
		}
		var txRefs []link.PayloadRef
		if i == streamReq {
			txRefs = refs
		}
		tx, n := r.route(tx)
		failed += n
		if t.tx[i].handOff(tx) {
			clear(tx)
			t.tx[i].spare = tx[:0]
			full[i] = t.tx[i].full()
			t.tx[i].mu.Unlock()
			continue
		}
		tx, n = r.send(tx, txRefs)
		failed += n
		if i == streamReq {
			clear(refs)
			t.tx[i].spareRefs = refs[:0]
		}
		// WriteNoICRC may have traded buffers: tx holds the pipe's, as
		// large.
		t.put(tx)
		clear(tx)
		t.tx[i].spare = tx[:0]
		t.tx[i].mu.Unlock()
	}
	if failed > 0 {
		r.mu.Lock()
		r.counters[cntSendErr] += uint64(failed)
		r.mu.Unlock()
	}
	for i := range full {
		if full[i] {
			t.tx[i].waitRoom()
		}
	}
}

// route loops back the frames of tx to the device's own MAC (whose
// buffers go to the inbox), or seals them when they go to the link
// instead, and returns the frames for the link and how many failed; the
// stream's lock held.
func (r *device) route(tx [][]byte) ([][]byte, int) {
	var failed int
	if r.cfg.Loopback && (r.cfg.LoopbackWhile == nil || r.cfg.LoopbackWhile()) {
		tx, failed = r.loopBack(tx)
	} else if r.cfg.Loopback && r.tp.nl == nil {
		r.sealOwn(tx)
	}
	return tx, failed
}

// send writes tx to the link and returns the frames it wrote or tried
// to, whose buffers are free again, and how many failed; the stream's
// lock held, or by its writer goroutine. refs, when not nil, holds tx's
// payloads by reference (only on a bare link.PipeEnd, which never loops
// back).
func (r *device) send(tx [][]byte, refs []link.PayloadRef) ([][]byte, int) {
	t := r.tp
	var failed int
	bs := max(1, t.l.BatchSize())
	for i := 0; i < len(tx); i += bs {
		j := min(len(tx), i+bs)
		var n int
		var err error
		if t.pipe != nil {
			var rs []link.PayloadRef
			if len(refs) == len(tx) {
				rs = refs[i:j]
			}
			n, err = t.pipe.WriteRef(tx[i:j], rs)
		} else if t.nl != nil {
			n, err = t.nl.WriteNoICRC(tx[i:j])
		} else {
			n, err = t.l.WritePackets(tx[i:j])
		}
		if err != nil {
			failed += j - i - n
			if errors.Is(err, net.ErrClosed) {
				break
			}
		}
	}
	return tx, failed
}

// addrOf returns the IP address of GID index idx of port 1.
func (r *device) addrOf(idx uint8) (netip.Addr, bool) {
	e, err := r.dev.QueryGID(1, int(idx))
	if err != nil || e.GID.IsZero() {
		return netip.Addr{}, false
	}
	return e.GID.Addr(), true
}

// path is where a packet goes: addresses and IP header fields.
type path struct {
	src, dst netip.Addr
	dmac     [6]byte
	tc, hop  uint8
	ok       bool
	// srcB and dstB are src and dst as a frame holds them, for a QP's
	// path (connPath) only: its packets' addresses are compared with
	// them (wire.Packet.SrcBytes).
	srcB, dstB addrBytes
}

// addrBytes is an IP address as a frame holds it: 4 bytes for IPv4, 16
// for IPv6 (an IPv4-mapped IPv6 address too); none for a zoned or invalid
// address, which no frame holds.
type addrBytes struct {
	b [16]byte
	n uint8
}

func addrBytesOf(a netip.Addr) addrBytes {
	var k addrBytes
	if a.Zone() == "" {
		k.n = uint8(copy(k.b[:], a.AsSlice()))
	}
	return k
}

// is reports whether b, an address's bytes in a frame, is k's address:
// fixed-size compares, no call.
func (k *addrBytes) is(b []byte) bool {
	switch {
	case len(b) != int(k.n):
		return false
	case len(b) == 4:
		return [4]byte(b) == [4]byte(k.b[:4])
	}
	return len(b) == 16 && [16]byte(b) == k.b
}

// pathOf resolves an AV into a path (rxe_init_av / rxe_av_from_attr).
func (r *device) pathOf(a *ib.AHAttr) path {
	p := path{dmac: a.DMAC, tc: a.GRH.TrafficClass, hop: a.GRH.HopLimit}
	src, ok := r.addrOf(a.GRH.SGIDIndex)
	if !ok {
		return p
	}
	p.src = src
	p.dst = netip.AddrFrom16(a.GRH.DGID).Unmap()
	if p.src.Is4() != p.dst.Is4() {
		return p
	}
	if r.cfg.Neighbor != nil {
		if mac, err := r.cfg.Neighbor.Resolve(cacheOnly, p.dst); err == nil {
			p.dmac = mac
		}
	}
	p.ok = true
	return p
}

// emit builds one frame into a pooled buffer and queues it for the wire;
// r.mu held. It reports false when the frame cannot be built.
func (r *device) emit(f *wire.Frame) bool { return r.emitIn(nil, f) }

// txBuf returns a frame buffer for f (opcode and addresses set) and the
// part of it where Build will put plen bytes of payload, so that the
// payload is gathered in place and Build copies nothing
// (wire.Frame.PayloadOffset). Without a transport, or if the frame would
// not fit, frame is nil and pay is the device's scratch space. r.mu held.
func (r *device) txBuf(f *wire.Frame, plen int) (frame, pay []byte) {
	if r.tp != nil && !r.detached {
		b := r.txGet()
		if off := f.PayloadOffset(); off > 0 && off+plen+wire.ICRCSize+3 <= len(b) {
			return b, b[off : off+plen]
		}
		r.txFree = append(r.txFree, b)
	}
	if cap(r.scratch) < plen {
		r.scratch = make([]byte, plen)
	}
	return nil, r.scratch[:plen]
}

// dropTx returns a buffer from txBuf unused; r.mu held.
func (r *device) dropTx(frame []byte) {
	if frame != nil {
		r.txFree = append(r.txFree, frame[:cap(frame)])
	}
}

// txChunk is how many frame buffers txGet takes from the pool at once.
const txChunk = 8

// txGet returns a frame buffer for a frame to send; r.mu held. It keeps a
// few from the transport's pool at hand, so that building a message's
// packets takes the pool's lock once every txChunk packets, not per
// packet.
func (r *device) txGet() []byte {
	if len(r.txFree) == 0 {
		r.txRefill()
	}
	n := len(r.txFree) - 1
	b := r.txFree[n]
	r.txFree[n] = nil
	r.txFree = r.txFree[:n]
	return b
}

// txRefill takes txChunk buffers from the pool into r.txFree, out of
// line so that txGet inlines; r.mu held.
func (r *device) txRefill() {
	if cap(r.txFree) < txChunk {
		r.txFree = make([][]byte, 0, 2*txChunk)
	}
	r.txFree = r.txFree[:txChunk]
	r.tp.fill(r.txFree)
}

// emitIn builds f into frame (from txBuf; nil takes a pooled buffer) and
// queues it, like emit; r.mu held.
func (r *device) emitIn(frame []byte, f *wire.Frame) bool {
	ref := r.txRef
	r.txRef = link.PayloadRef{}
	if r.tp == nil || r.detached {
		r.dropTx(frame)
		return true // no transport: the packet goes nowhere (a silent peer)
	}
	b := frame
	if b == nil {
		b = r.txGet()
	}
	f.NoICRC = r.noICRCTo(f.DstMAC)
	n, err := wire.Build(b, f)
	if err != nil || n > len(b) {
		r.txFree = append(r.txFree, b[:cap(b)])
		return false
	}
	if f.BTH.Opcode.IsRequest() {
		r.txq[streamReq] = append(r.txq[streamReq], b[:n])
		if r.tp.pipe != nil {
			r.txRefs = append(r.txRefs, ref)
		}
	} else if r.queueResponse(f, b[:n]) {
		return true
	}
	r.counters[cntSentPkts]++
	r.counters[cntSentBytes] += uint64(n - wire.EthernetSize)
	return true
}

// noICRCTo reports whether a frame to MAC dst is built without its ICRC,
// which is computed only where the frame becomes observable: a link that
// carries frames without it computes it on the way out, and a frame to
// the device's own MAC loops back (or gets it in route, should it go to
// the link after all).
func (r *device) noICRCTo(dst [6]byte) bool {
	return r.tp.nl != nil || r.cfg.Loopback && dst == r.mac
}

// newFrame fills r.fr's addressing from a path; r.mu held.
func (r *device) newFrame(p *path, sport uint16) *wire.Frame {
	f := &r.fr
	*f = wire.Frame{}
	f.SrcMAC = r.mac
	f.DstMAC = p.dmac
	f.Src, f.Dst = p.src, p.dst
	f.TrafficClass, f.HopLimit = p.tc, p.hop
	r.ipID++
	f.IPID = r.ipID
	f.SrcPort = sport
	f.BTH.PKey = emu.DefaultPKey
	return f
}

// readerDone marks the link's reading goroutine ended (the link closed or
// failed) and wakes whoever waits for its frames.
func (t *transport) readerDone() {
	t.inMu.Lock()
	t.closed = true
	t.inCond.Broadcast()
	t.inMu.Unlock()
}
