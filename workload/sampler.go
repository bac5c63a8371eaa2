package workload

import (
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/clock"
)

// sampleState is a phase of a duration run (perftest's duration_state).
type sampleState int32

const (
	stateStart      sampleState = iota // START_STATE: traffic runs, nothing is counted
	stateSample                        // SAMPLE_STATE: completions are counted
	stateStopSample                    // STOP_SAMPLE_STATE: the window is closed, traffic goes on
	stateEnd                           // END_STATE: the loops stop
)

// sampler is perftest's duration mode alarm (catch_alarm): armed when a
// run starts (or at the first receive completion, for the sides that wait
// for the peer), it moves from START to SAMPLE after the margin, stamps
// the window's start, moves to STOP_SAMPLE at duration-margin, stamps its
// end, and to END at the duration. Only completions seen in SAMPLE count;
// the loops leave at END. Its callbacks run on the clock's goroutine
// (clock.Real) or inside Advance (clock.Manual): the state is atomic, and
// the stamps are written before the state that publishes them.
type sampler struct {
	clk              clock.Clock
	duration, margin time.Duration
	state            atomic.Int32
	armed            bool
	start, stop      time.Time
	timer            atomic.Pointer[clock.Timer]
	end              chan struct{} // closed at END
	hits             atomic.Uint64 // sampling() calls that said yes
}

func newSampler(clk clock.Clock, duration, margin time.Duration) *sampler {
	return &sampler{clk: clk, duration: duration, margin: margin, end: make(chan struct{})}
}

// The methods below take a nil *sampler as iterations mode: never armed,
// never sampling, never ended.

// arm starts the alarm; later calls do nothing. Only the run's goroutine
// calls it.
func (s *sampler) arm() {
	if s == nil || s.armed {
		return
	}
	s.armed = true
	s.after(s.margin, s.toSample)
}

// after runs f after d, or at once when d is not positive (perftest calls
// catch_alarm directly for a zero margin).
func (s *sampler) after(d time.Duration, f func()) {
	if d <= 0 {
		f()
		return
	}
	t := s.clk.AfterFunc(d, f)
	s.timer.Store(&t)
}

func (s *sampler) toSample() {
	s.start = s.clk.Now()
	s.state.Store(int32(stateSample))
	s.after(s.duration-2*s.margin, s.toStop)
}

func (s *sampler) toStop() {
	s.stop = s.clk.Now()
	s.state.Store(int32(stateStopSample))
	s.after(s.margin, s.toEnd)
}

func (s *sampler) toEnd() {
	s.state.Store(int32(stateEnd))
	close(s.end)
}

// sampling reports whether a completion seen now counts.
func (s *sampler) sampling() bool {
	if s == nil || sampleState(s.state.Load()) != stateSample {
		return false
	}
	s.hits.Add(1)
	return true
}

// ended reports whether the run is over.
func (s *sampler) ended() bool { return s != nil && sampleState(s.state.Load()) == stateEnd }

// done is closed at the end (nil, never closed, in iterations mode).
func (s *sampler) done() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.end
}

// window returns the length of the sample window; valid once ended.
func (s *sampler) window() time.Duration { return s.stop.Sub(s.start) }

// cancel stops a pending alarm (a run that failed before its end).
func (s *sampler) cancel() {
	if s == nil {
		return
	}
	if t := s.timer.Load(); t != nil {
		(*t).Stop()
	}
}
