package clock

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestManualOrder(t *testing.T) {
	type sched struct {
		name string
		d    time.Duration
	}
	for _, tt := range []struct {
		name    string
		timers  []sched
		advance []time.Duration
		want    [][]string // fired per Advance call
	}{
		{
			name:    "deadline order",
			timers:  []sched{{"c", 3 * time.Second}, {"a", time.Second}, {"b", 2 * time.Second}},
			advance: []time.Duration{5 * time.Second},
			want:    [][]string{{"a", "b", "c"}},
		},
		{
			name:    "ties in scheduling order",
			timers:  []sched{{"x", time.Second}, {"y", time.Second}, {"z", time.Second}, {"w", 0}},
			advance: []time.Duration{time.Second},
			want:    [][]string{{"w", "x", "y", "z"}},
		},
		{
			name:    "window boundary is inclusive",
			timers:  []sched{{"at", time.Second}, {"after", time.Second + 1}},
			advance: []time.Duration{time.Second, 0, 1},
			want:    [][]string{{"at"}, nil, {"after"}},
		},
		{
			name:    "zero and negative durations are due at once",
			timers:  []sched{{"neg", -time.Hour}, {"zero", 0}},
			advance: []time.Duration{0},
			want:    [][]string{{"neg", "zero"}},
		},
		{
			name:    "split advances",
			timers:  []sched{{"a", 10 * time.Millisecond}, {"b", 20 * time.Millisecond}, {"c", 30 * time.Millisecond}},
			advance: []time.Duration{15 * time.Millisecond, 10 * time.Millisecond, time.Hour},
			want:    [][]string{{"a"}, {"b"}, {"c"}},
		},
		{
			name:    "negative advance does nothing",
			timers:  []sched{{"a", time.Nanosecond}},
			advance: []time.Duration{-time.Second, time.Nanosecond},
			want:    [][]string{nil, {"a"}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManual(epoch)
			var fired []string
			for _, s := range tt.timers {
				m.AfterFunc(s.d, func() { fired = append(fired, s.name) })
			}
			for i, d := range tt.advance {
				fired = nil
				m.Advance(d)
				if !slices.Equal(fired, tt.want[i]) {
					t.Errorf("Advance #%d (%v) fired %v, want %v", i, d, fired, tt.want[i])
				}
			}
		})
	}
}

func TestManualNowDuringCallback(t *testing.T) {
	m := NewManual(epoch)
	var seen []time.Duration
	for _, d := range []time.Duration{3, 1, 2} {
		m.AfterFunc(d*time.Second, func() { seen = append(seen, m.Now().Sub(epoch)) })
	}
	m.Advance(10 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(seen, want) {
		t.Errorf("Now() in callbacks = %v, want %v", seen, want)
	}
	if got := m.Now().Sub(epoch); got != 10*time.Second {
		t.Errorf("after Advance(10s) Now() = epoch+%v, want epoch+10s", got)
	}
}

// TestManualRescheduleInWindow is the retry-timer pattern: a callback that
// re-arms itself fires again within the same Advance while its new
// deadline is inside the window.
func TestManualRescheduleInWindow(t *testing.T) {
	for _, tt := range []struct {
		name    string
		period  time.Duration
		advance time.Duration
		want    int
	}{
		{"exact multiple", 100 * time.Millisecond, time.Second, 10},
		{"remainder", 300 * time.Millisecond, time.Second, 3},
		{"shorter than period", time.Second, 999 * time.Millisecond, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManual(epoch)
			n := 0
			var tick func()
			tick = func() {
				n++
				m.AfterFunc(tt.period, tick)
			}
			m.AfterFunc(tt.period, tick)
			m.Advance(tt.advance)
			if n != tt.want {
				t.Errorf("fired %d times, want %d", n, tt.want)
			}
			if m.Pending() != 1 {
				t.Errorf("Pending() = %d, want 1 (the re-armed timer)", m.Pending())
			}
			next, ok := m.NextDeadline()
			if want := epoch.Add(time.Duration(tt.want+1) * tt.period); !ok || !next.Equal(want) {
				t.Errorf("NextDeadline() = %v, %v; want %v, true", next, ok, want)
			}
		})
	}
}

func TestManualStop(t *testing.T) {
	m := NewManual(epoch)
	var fired []string
	mk := func(name string, d time.Duration) Timer {
		return m.AfterFunc(d, func() { fired = append(fired, name) })
	}
	a := mk("a", time.Second)
	b := mk("b", 2*time.Second)
	c := mk("c", 3*time.Second)
	if m.Pending() != 3 {
		t.Fatalf("Pending() = %d, want 3", m.Pending())
	}
	if !b.Stop() {
		t.Error("first Stop of a pending timer returned false")
	}
	if b.Stop() {
		t.Error("second Stop returned true")
	}
	// A callback stopping a later timer in the same window prevents it.
	m.AfterFunc(1500*time.Millisecond, func() {
		fired = append(fired, "stopper")
		if !c.Stop() {
			t.Error("Stop from a callback of a timer due later in the window returned false")
		}
	})
	m.Advance(5 * time.Second)
	if want := []string{"a", "stopper"}; !slices.Equal(fired, want) {
		t.Errorf("fired %v, want %v", fired, want)
	}
	if a.Stop() {
		t.Error("Stop after the callback ran returned true")
	}
	if m.Pending() != 0 {
		t.Errorf("Pending() = %d, want 0", m.Pending())
	}
	if _, ok := m.NextDeadline(); ok {
		t.Error("NextDeadline() reported a deadline with nothing pending")
	}
}

func TestManualStopSelfInCallback(t *testing.T) {
	m := NewManual(epoch)
	var tm Timer
	var stopped bool
	tm = m.AfterFunc(time.Second, func() { stopped = tm.Stop() })
	m.Advance(time.Second)
	if stopped {
		t.Error("a timer stopping itself while running: Stop returned true")
	}
}

func TestManualAdvanceToNext(t *testing.T) {
	m := NewManual(epoch)
	if m.AdvanceToNext() {
		t.Fatal("AdvanceToNext with nothing pending returned true")
	}
	n := 0
	m.AfterFunc(7*time.Second, func() { n++ })
	m.AfterFunc(7*time.Second, func() { n++ })
	m.AfterFunc(9*time.Second, func() { n++ })
	if !m.AdvanceToNext() || n != 2 || !m.Now().Equal(epoch.Add(7*time.Second)) {
		t.Errorf("after AdvanceToNext: fired %d, Now epoch+%v; want 2, epoch+7s", n, m.Now().Sub(epoch))
	}
}

// TestManualStopRace races Stop against Advance: every timer either runs
// exactly once (Stop reports false) or never (Stop reports true).
func TestManualStopRace(t *testing.T) {
	rng := testenv.Rand(t)
	const n = 2000
	m := NewManual(epoch)
	ran := make([]atomic.Int32, n)
	timers := make([]Timer, n)
	for i := range timers {
		timers[i] = m.AfterFunc(time.Duration(rng.IntN(1000))*time.Microsecond, func() { ran[i].Add(1) })
	}
	stopped := make([]bool, n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range timers {
			stopped[i] = timers[i].Stop()
		}
	})
	wg.Go(func() {
		for range 100 {
			m.Advance(10 * time.Microsecond)
		}
	})
	wg.Wait()
	for i := range n {
		r := ran[i].Load()
		switch {
		case r > 1:
			t.Fatalf("timer %d ran %d times", i, r)
		case stopped[i] && r != 0:
			t.Fatalf("timer %d: Stop reported true but it ran", i)
		case !stopped[i] && r != 1:
			t.Fatalf("timer %d: Stop reported false but it did not run", i)
		}
	}
}

// TestManualConcurrentSchedule schedules from many goroutines while Advance
// runs; all timers with deadlines inside the final window run once.
func TestManualConcurrentSchedule(t *testing.T) {
	m := NewManual(epoch)
	var count atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				m.AfterFunc(time.Duration(g*100+i)*time.Microsecond, func() { count.Add(1) })
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			m.Advance(time.Microsecond)
		}
	})
	wg.Wait()
	m.Advance(time.Hour)
	if got := count.Load(); got != 800 {
		t.Errorf("%d callbacks ran, want 800", got)
	}
}

func TestRealFires(t *testing.T) {
	done := make(chan struct{})
	Real{}.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Real.AfterFunc did not fire")
	}
	if tm := (Real{}).AfterFunc(time.Hour, func() {}); !tm.Stop() {
		t.Error("Real timer Stop before firing returned false")
	}
}

func ExampleManual() {
	m := NewManual(epoch)
	m.AfterFunc(2*time.Second, func() { fmt.Println("retry at", m.Now().Sub(epoch)) })
	m.AfterFunc(time.Second, func() { fmt.Println("ack timeout at", m.Now().Sub(epoch)) })
	m.Advance(time.Minute)
	// Output:
	// ack timeout at 1s
	// retry at 2s
}

func BenchmarkManualAfterFuncAdvance(b *testing.B) {
	m := NewManual(epoch)
	f := func() {}
	b.ReportAllocs()
	for b.Loop() {
		m.AfterFunc(time.Microsecond, f)
		m.Advance(time.Microsecond)
	}
}
