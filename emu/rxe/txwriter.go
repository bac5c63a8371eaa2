package rxe

import "sync"

// The transmit streams' writer goroutines.
//
// On a link whose every write is a system call (syscallWrites), a
// goroutine that writes a burst itself is kept from the work that produces
// the next one: the reading goroutine that took an ACK and opened the
// window, the application's that posted. The link then stands idle while
// the next burst is built. So a batch of handOffFrames frames or more goes
// to the stream's writer goroutine, which writes one batch after the other
// while the next is built, as rxe runs its send work on its workqueue
// (rxe_sched_task) rather than in the caller. While that goroutine has
// frames to write, every later batch of its stream queues behind them,
// which keeps the stream's wire order. A smaller batch with nothing queued
// before it is written by the goroutine that built it: a pingpong's frame
// waits for no wake-up. A writer holds at most about maxQueued frames: the
// goroutine that hands it more waits for room, as the one that wrote its
// own batch waited for the link.

// handOffFrames is the smallest batch that goes to a stream's writer
// goroutine when it is idle.
const handOffFrames = 8

// maxQueued is how many frames a stream's writer may hold before the
// goroutines that hand it more wait for it to take them: the queue is
// bounded, as rxe stops a QP's requester while RXE_INFLIGHT_SKBS_PER_QP_HIGH
// of its packets are still on their way out. Without it, a UD or UC
// stream, whose WRs complete as their packets are queued, would grow the
// queue for as long as the program posts faster than the link writes.
const maxQueued = 256

// writer is a transmit stream's writer goroutine, all under the stream's
// mu: queue holds the frames handed to it, in order, and busy is set from
// a hand-off until it finds its queue empty. cond is signalled when it
// takes its queue and when it goes idle.
type writer struct {
	queue [][]byte
	busy  bool
	wake  chan struct{}
	cond  sync.Cond
}

// syscallWrites reports whether every write to the link is a system call
// of its own, for an asynchronous device: a NonBlockingWriter's (a TAP, an
// AF_PACKET socket) or the UDP link's (an icrcSealer), not the in-memory
// pipe's. Such a device's streams have writer goroutines.
func (t *transport) syscallWrites() bool {
	return !t.sync && t.pipe == nil && (t.inline || t.nl != nil)
}

// startWriters gives each transmit stream its writer goroutine.
func (r *device) startWriters() {
	t := r.tp
	for i := range t.tx {
		s := &t.tx[i]
		w := &writer{wake: make(chan struct{}, 1)}
		w.cond.L = &s.mu
		s.w = w
		t.wg.Add(1)
		go r.runWriter(s, w)
	}
}

// handOff queues tx, frames for the link, for s's writer goroutine and
// reports true, or reports false and leaves tx to the caller to write:
// when s has no writer, or tx is small and the writer has nothing queued.
// s.mu held.
func (s *txStream) handOff(tx [][]byte) bool {
	w := s.w
	if w == nil || len(tx) == 0 || !w.busy && len(tx) < handOffFrames {
		return false
	}
	w.queue = append(w.queue, tx...)
	if !w.busy {
		w.busy = true
		w.wake <- struct{}{}
	}
	return true
}

// runWriter writes the frames handed to stream s until stopWriter.
func (r *device) runWriter(s *txStream, w *writer) {
	t := r.tp
	defer t.wg.Done()
	var tx [][]byte
	for range w.wake {
		for {
			s.mu.Lock()
			if len(w.queue) == 0 {
				w.busy = false
				w.cond.Broadcast()
				s.mu.Unlock()
				break
			}
			tx, w.queue = w.queue, tx[:0]
			w.cond.Broadcast()
			s.mu.Unlock()
			sent, failed := r.send(tx, nil)
			t.put(sent)
			clear(tx)
			if failed > 0 {
				r.mu.Lock()
				r.counters[cntSendErr] += uint64(failed)
				r.mu.Unlock()
			}
		}
	}
}

// full reports whether s's writer holds maxQueued frames or more; s.mu
// held.
func (s *txStream) full() bool { return s.w != nil && len(s.w.queue) >= maxQueued }

// waitRoom waits until s's writer holds fewer than maxQueued frames. The
// caller holds no stream's lock: a writer never waits for one but its
// own.
func (s *txStream) waitRoom() {
	s.mu.Lock()
	for s.full() {
		s.w.cond.Wait()
	}
	s.mu.Unlock()
}

// drainWriter waits until s's writer has written every frame handed to
// it; s.mu held.
func (s *txStream) drainWriter() {
	if w := s.w; w != nil {
		for w.busy {
			w.cond.Wait()
		}
	}
}

// stopWriter ends s's writer goroutine, which drainWriter emptied; later
// batches are written by the goroutines that build them. s.mu held.
func (s *txStream) stopWriter() {
	if w := s.w; w != nil {
		close(w.wake)
		s.w = nil
	}
}
