package link

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/softroce/softroce/clock"
	"golang.org/x/sys/unix"
)

// Action is the set of faults applied to one written frame. The zero
// Action delivers the frame unchanged.
type Action uint8

// The faults. Drop overrides the rest; Corrupt applies before Duplicate
// (both copies carry the flipped bit); Delay overrides Reorder.
const (
	// Drop discards the frame.
	Drop Action = 1 << iota
	// Duplicate sends the frame twice, back to back.
	Duplicate
	// Reorder holds the frame back and sends it right after the next frame
	// that goes out undelayed, or after FaultConfig.ReorderTimeout.
	Reorder
	// Delay sends the frame FaultConfig.DelayBy later on the clock.
	Delay
	// Corrupt flips one bit, chosen at random, of the frame.
	Corrupt
)

var actionNames = []string{"Drop", "Duplicate", "Reorder", "Delay", "Corrupt"}

// String returns the set's names joined by "|", "Pass" for the zero
// Action, and leftover bits in hex.
func (a Action) String() string {
	if a == 0 {
		return "Pass"
	}
	var parts []string
	for i, n := range actionNames {
		if a&(1<<i) != 0 {
			parts = append(parts, n)
			a &^= 1 << i
		}
	}
	if a != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint8(a)))
	}
	return strings.Join(parts, "|")
}

// ByIndex returns a FaultConfig.Schedule applying actions[i] to the i-th
// frame written (counting from 0) and passing every other frame.
func ByIndex(actions map[uint64]Action) func(i uint64, frame []byte) Action {
	return func(i uint64, _ []byte) Action { return actions[i] }
}

// FaultConfig configures NewFaults. Rates are probabilities in [0, 1]
// drawn independently per frame; the zero value injects nothing.
type FaultConfig struct {
	// Seed seeds the PCG generator behind the rates and the corrupted bit
	// positions. The same Seed, configuration and sequence of written
	// frames give the same output, frame for frame.
	Seed uint64
	// Drop, Duplicate, Reorder, Delay and Corrupt are the per-frame
	// probabilities of each Action.
	Drop, Duplicate, Reorder, Delay, Corrupt float64
	// Schedule, when set, chooses each frame's Action instead of the
	// rates: it is called with the frame's index (0 for the first frame
	// written) and its bytes, which it must not keep or modify. Corrupted
	// bit positions still come from Seed.
	Schedule func(i uint64, frame []byte) Action
	// DelayBy is how long Delay holds a frame; zero means 1ms.
	DelayBy time.Duration
	// ReorderTimeout bounds how long Reorder holds a frame when no other
	// frame follows; zero means 1ms.
	ReorderTimeout time.Duration
	// CorruptFrom is the first byte offset Corrupt may flip a bit in
	// (e.g. 14 to leave the Ethernet header alone); zero means the whole
	// frame. Frames no longer than it are not corrupted.
	CorruptFrom int
	// Clock times Delay and ReorderTimeout; nil means clock.Real.
	Clock clock.Clock
}

// FaultStats counts what a Faults link did to the frames written to it.
type FaultStats struct {
	// Frames counts frames written to the Faults link.
	Frames uint64
	// Dropped, Duplicated, Reordered, Delayed and Corrupted count frames
	// that had each fault applied.
	Dropped, Duplicated, Reordered, Delayed, Corrupted uint64
	// Lost counts held or delayed frames that never went out: the link
	// closed first, or the inner link refused them.
	Lost uint64
}

// Faults is a Link that injects faults into the frames written to it
// before passing them to an inner Link; reads pass straight through. Wrap
// both ends of a Pipe to disturb both directions. Output is deterministic
// for a given seed when frames are written by one goroutine and the clock
// is a clock.Manual.
type Faults struct {
	inner Link
	cfg   FaultConfig
	clk   clock.Clock

	mu      sync.Mutex
	rng     *rand.Rand
	index   uint64
	held    []heldFrame
	timers  map[clock.Timer]struct{}
	stats   FaultStats
	closed  bool
	out     [][]byte // scratch batch for the inner write
	outFrom []int    // input index of each entry of out
}

type heldFrame struct {
	frame []byte
	timer clock.Timer
}

var _ Link = (*Faults)(nil)

// NewFaults returns a Faults link over inner. It panics if a rate is
// outside [0, 1] or a duration is negative: a programming error.
func NewFaults(inner Link, cfg FaultConfig) *Faults {
	for _, r := range []float64{cfg.Drop, cfg.Duplicate, cfg.Reorder, cfg.Delay, cfg.Corrupt} {
		if !(r >= 0 && r <= 1) {
			panic(fmt.Sprintf("link.NewFaults: rate %v outside [0, 1]", r))
		}
	}
	if cfg.DelayBy < 0 || cfg.ReorderTimeout < 0 || cfg.CorruptFrom < 0 {
		panic("link.NewFaults: negative DelayBy, ReorderTimeout or CorruptFrom")
	}
	if cfg.DelayBy == 0 {
		cfg.DelayBy = time.Millisecond
	}
	if cfg.ReorderTimeout == 0 {
		cfg.ReorderTimeout = time.Millisecond
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	return &Faults{
		inner:  inner,
		cfg:    cfg,
		clk:    clk,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc909)),
		timers: make(map[clock.Timer]struct{}),
	}
}

// Validate reports a rate that is not a probability: below 0, above 1,
// NaN or infinite (a NaN passes both "< 0" and "> 1" and would inject
// nothing). The error wraps EINVAL.
func (c FaultConfig) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"Drop", c.Drop}, {"Duplicate", c.Duplicate}, {"Reorder", c.Reorder}, {"Delay", c.Delay}, {"Corrupt", c.Corrupt}} {
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("link: fault rate %s %v: not a probability in [0, 1]: %w", r.name, r.v, unix.EINVAL)
		}
	}
	return nil
}

// choose returns frame's Action. Called with f.mu held.
func (f *Faults) choose(frame []byte) Action {
	i := f.index
	f.index++
	if f.cfg.Schedule != nil {
		return f.cfg.Schedule(i, frame)
	}
	var a Action
	for k, r := range []float64{f.cfg.Drop, f.cfg.Duplicate, f.cfg.Reorder, f.cfg.Delay, f.cfg.Corrupt} {
		if r > 0 && f.rng.Float64() < r {
			a |= 1 << k
		}
	}
	return a
}

// WritePackets applies each frame's faults and writes what goes out now
// to the inner link in one batch. It returns how many of bufs it
// consumed: all of them, or those before the first the inner link
// refused, with its error.
func (f *Faults) WritePackets(bufs [][]byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out, f.outFrom = f.out[:0], f.outFrom[:0]
	emit := func(b []byte, from int) {
		f.out = append(f.out, b)
		f.outFrom = append(f.outFrom, from)
	}
	for i, b := range bufs {
		f.stats.Frames++
		a := f.choose(b)
		if a&Drop != 0 {
			f.stats.Dropped++
			continue
		}
		if a&Corrupt != 0 && len(b) > f.cfg.CorruptFrom {
			b = append([]byte(nil), b...)
			bit := f.cfg.CorruptFrom*8 + f.rng.IntN((len(b)-f.cfg.CorruptFrom)*8)
			b[bit/8] ^= 1 << (bit % 8)
			f.stats.Corrupted++
		}
		copies := 1
		if a&Duplicate != 0 {
			copies = 2
			f.stats.Duplicated++
		}
		switch {
		case a&Delay != 0:
			f.stats.Delayed++
			for range copies {
				f.delay(b)
			}
		case a&Reorder != 0:
			f.stats.Reordered++
			for range copies {
				f.hold(b)
			}
		default:
			for range copies {
				emit(b, i)
			}
			for _, h := range f.held {
				h.timer.Stop()
				delete(f.timers, h.timer)
				emit(h.frame, i)
			}
			clear(f.held)
			f.held = f.held[:0]
		}
	}
	if len(f.out) == 0 {
		return len(bufs), nil
	}
	n, err := f.inner.WritePackets(f.out)
	if err != nil {
		if n < len(f.outFrom) {
			return f.outFrom[n], err
		}
		return len(bufs), err
	}
	return len(bufs), nil
}

// delay sends a copy of b after DelayBy. Called with f.mu held.
func (f *Faults) delay(b []byte) {
	c := append([]byte(nil), b...)
	var t clock.Timer
	t = f.clk.AfterFunc(f.cfg.DelayBy, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.timers[t]; !ok {
			return // stopped by Close
		}
		delete(f.timers, t)
		f.sendLate(c)
	})
	f.timers[t] = struct{}{}
}

// hold keeps a copy of b until the next undelayed frame or the reorder
// timeout. Called with f.mu held.
func (f *Faults) hold(b []byte) {
	c := append([]byte(nil), b...)
	var t clock.Timer
	t = f.clk.AfterFunc(f.cfg.ReorderTimeout, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.timers[t]; !ok {
			return
		}
		delete(f.timers, t)
		for i, h := range f.held {
			if h.timer == t {
				f.held = append(f.held[:i], f.held[i+1:]...)
				break
			}
		}
		f.sendLate(c)
	})
	f.timers[t] = struct{}{}
	f.held = append(f.held, heldFrame{frame: c, timer: t})
}

// sendLate writes one held or delayed frame. Called with f.mu held.
func (f *Faults) sendLate(b []byte) {
	if f.closed {
		f.stats.Lost++
		return
	}
	if n, err := f.inner.WritePackets([][]byte{b}); n != 1 || err != nil {
		f.stats.Lost++
	}
}

// ReadPackets reads from the inner link.
func (f *Faults) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	return f.inner.ReadPackets(bufs, sizes)
}

// BatchSize is the inner link's.
func (f *Faults) BatchSize() int { return f.inner.BatchSize() }

// MTU is the inner link's.
func (f *Faults) MTU() int { return f.inner.MTU() }

// Close drops held and delayed frames (counting them Lost) and closes the
// inner link.
func (f *Faults) Close() error {
	f.mu.Lock()
	f.closed = true
	for t := range f.timers {
		if t.Stop() {
			f.stats.Lost++
		}
	}
	clear(f.timers)
	f.held = nil
	f.mu.Unlock()
	return f.inner.Close()
}

// Stats returns the counters.
func (f *Faults) Stats() FaultStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}
