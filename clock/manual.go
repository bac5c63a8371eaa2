package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Manual is a virtual clock for tests: time stands still until Advance
// moves it, and Advance runs the callbacks that fall due, one at a time, in
// the goroutine that called Advance (after gVisor's faketime.ManualClock).
// A retry-exhaustion case whose timers span minutes of virtual time thus
// runs in microseconds and replays exactly.
//
// The zero value is not usable; call NewManual. A Manual is safe for
// concurrent use; Advance calls are serialized.
type Manual struct {
	// advancing serializes Advance so timers fire in one global order.
	advancing sync.Mutex

	mu     sync.Mutex
	now    time.Time
	seq    uint64 // scheduling order, breaks deadline ties
	timers timerHeap
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start}
}

// Now returns the clock's current time. During Advance it is the deadline
// of the callback being run, so a callback that schedules relative to Now
// sees the time it was meant to fire at.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// AfterFunc schedules f to run from Advance once the clock has moved d
// past Now. A d of zero or less makes f due at once: the next Advance,
// even Advance(0), runs it.
func (m *Manual) AfterFunc(d time.Duration, f func()) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d < 0 {
		d = 0
	}
	t := &manualTimer{m: m, when: m.now.Add(d), seq: m.seq, f: f}
	m.seq++
	heap.Push(&m.timers, t)
	return t
}

// Advance moves the clock forward by d, running every callback whose
// deadline falls within the window, in deadline order (ties in the order
// AfterFunc was called). Before each callback the clock reads its
// deadline; callbacks may call AfterFunc and Stop, and timers they
// schedule within the window run in the same Advance. Callbacks must not
// call Advance. When Advance returns the clock reads the old time plus d.
// A negative d is treated as zero.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	m.advancing.Lock()
	defer m.advancing.Unlock()
	m.mu.Lock()
	end := m.now.Add(d)
	m.mu.Unlock()
	for {
		m.mu.Lock()
		if len(m.timers) == 0 || m.timers[0].when.After(end) {
			m.now = end
			m.mu.Unlock()
			return
		}
		t := heap.Pop(&m.timers).(*manualTimer)
		m.now = t.when
		m.mu.Unlock()
		t.f()
	}
}

// AdvanceToNext moves the clock to the earliest pending deadline and runs
// the callbacks due then (as Advance). It reports false, leaving the clock
// alone, when nothing is pending.
func (m *Manual) AdvanceToNext() bool {
	next, ok := m.NextDeadline()
	if !ok {
		return false
	}
	m.Advance(next.Sub(m.Now()))
	return true
}

// Pending returns the number of scheduled callbacks that have neither run
// nor been stopped.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// NextDeadline returns the earliest deadline among pending callbacks, and
// false when there are none.
func (m *Manual) NextDeadline() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.timers) == 0 {
		return time.Time{}, false
	}
	return m.timers[0].when, true
}

// manualTimer is one AfterFunc call on a Manual clock.
type manualTimer struct {
	m     *Manual
	when  time.Time
	seq   uint64
	f     func()
	index int // position in m.timers; -1 once run or stopped
}

// Stop removes the callback if it is still pending and reports whether it
// did. It returns false once the callback has started (or finished)
// running or was already stopped.
func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.m.timers, t.index)
	return true
}

// timerHeap orders pending timers by deadline, then scheduling order.
type timerHeap []*manualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

var (
	_ Clock = Real{}
	_ Clock = (*Manual)(nil)
)
