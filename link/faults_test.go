package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/softroce/softroce/internal/testutil"
	"math"
	"math/bits"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/internal/testenv"
	"golang.org/x/sys/unix"
)

// recorder is a Link that keeps copies of the frames written to it.
type recorder struct {
	mu     sync.Mutex
	frames [][]byte
	closed bool
}

func (r *recorder) ReadPackets([][]byte, []int) (int, error) {
	return 0, &net.OpError{Op: "read", Err: net.ErrClosed}
}
func (r *recorder) WritePackets(bufs [][]byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bufs {
		r.frames = append(r.frames, bytes.Clone(b))
	}
	return len(bufs), nil
}
func (r *recorder) BatchSize() int { return 8 }
func (r *recorder) MTU() int       { return 1500 }
func (r *recorder) Close() error   { r.closed = true; return nil }

// seqs returns the sequence numbers of the recorded frames.
func (r *recorder) seqs() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []uint32
	for _, f := range r.frames {
		s = append(s, binary.BigEndian.Uint32(f[14:]))
	}
	return s
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFaultsSchedule(t *testing.T) {
	for _, tt := range []struct {
		name    string
		actions map[uint64]Action
		before  []uint32 // output right after writing frames 0..4, one per call
		after   []uint32 // output after the clock passes both timeouts
		stats   FaultStats
	}{
		{"pass", nil, []uint32{0, 1, 2, 3, 4}, nil, FaultStats{Frames: 5}},
		{"drop", map[uint64]Action{1: Drop, 4: Drop | Duplicate}, []uint32{0, 2, 3}, nil, FaultStats{Frames: 5, Dropped: 2}},
		{"duplicate", map[uint64]Action{2: Duplicate}, []uint32{0, 1, 2, 2, 3, 4}, nil, FaultStats{Frames: 5, Duplicated: 1}},
		{"reorder", map[uint64]Action{1: Reorder}, []uint32{0, 2, 1, 3, 4}, nil, FaultStats{Frames: 5, Reordered: 1}},
		{"reorder two in a row", map[uint64]Action{1: Reorder, 2: Reorder}, []uint32{0, 3, 1, 2, 4}, nil, FaultStats{Frames: 5, Reordered: 2}},
		{"reorder last frame times out", map[uint64]Action{4: Reorder}, []uint32{0, 1, 2, 3}, []uint32{4}, FaultStats{Frames: 5, Reordered: 1}},
		{"reorder and duplicate", map[uint64]Action{0: Reorder | Duplicate}, []uint32{1, 0, 0, 2, 3, 4}, nil, FaultStats{Frames: 5, Reordered: 1, Duplicated: 1}},
		{"delay", map[uint64]Action{0: Delay, 3: Delay | Reorder}, []uint32{1, 2, 4}, []uint32{0, 3}, FaultStats{Frames: 5, Delayed: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			clk := clock.NewManual(epoch)
			f := NewFaults(rec, FaultConfig{Schedule: ByIndex(tt.actions), Clock: clk, DelayBy: 5 * time.Millisecond, ReorderTimeout: 3 * time.Millisecond})
			for i := range uint32(5) {
				if n, err := f.WritePackets([][]byte{testutil.Frame(64, i)}); n != 1 || err != nil {
					t.Fatalf("WritePackets = %d, %v", n, err)
				}
			}
			if got := rec.seqs(); !slices.Equal(got, tt.before) {
				t.Errorf("before the timeouts: got %v, want %v", got, tt.before)
			}
			clk.Advance(10 * time.Millisecond)
			if got, want := rec.seqs(), append(slices.Clone(tt.before), tt.after...); !slices.Equal(got, want) {
				t.Errorf("after the timeouts: got %v, want %v", got, want)
			}
			if got := f.Stats(); got != tt.stats {
				t.Errorf("Stats() = %+v, want %+v", got, tt.stats)
			}
		})
	}
}

func TestFaultsCorrupt(t *testing.T) {
	for _, from := range []int{0, 14, 60} {
		t.Run(fmt.Sprintf("from %d", from), func(t *testing.T) {
			rec := &recorder{}
			f := NewFaults(rec, FaultConfig{Seed: 9, Corrupt: 1, CorruptFrom: from})
			for i := range uint32(50) {
				in := testutil.Frame(64, i)
				orig := bytes.Clone(in)
				f.WritePackets([][]byte{in})
				if !bytes.Equal(in, orig) {
					t.Fatal("Corrupt modified the caller's buffer")
				}
				got := rec.frames[i]
				flipped := 0
				for k := range got {
					d := bits.OnesCount8(got[k] ^ orig[k])
					if d > 0 && k < from {
						t.Errorf("frame %d: bit flipped at byte %d, before CorruptFrom %d", i, k, from)
					}
					flipped += d
				}
				if flipped != 1 {
					t.Errorf("frame %d: %d bits differ, want exactly 1", i, flipped)
				}
			}
			if s := f.Stats(); s.Corrupted != 50 {
				t.Errorf("Corrupted = %d, want 50", s.Corrupted)
			}
		})
	}
	t.Run("frame too short to corrupt", func(t *testing.T) {
		rec := &recorder{}
		f := NewFaults(rec, FaultConfig{Corrupt: 1, CorruptFrom: 64})
		in := testutil.Frame(64, 1)
		f.WritePackets([][]byte{in})
		if !bytes.Equal(rec.frames[0], in) || f.Stats().Corrupted != 0 {
			t.Error("frame no longer than CorruptFrom was corrupted")
		}
	})
}

// runRates writes n frames through a Faults link with the given config on
// a manual clock, advancing it between writes, and returns the output.
func runRates(cfg FaultConfig, n int) ([][]byte, FaultStats) {
	rec := &recorder{}
	clk := clock.NewManual(epoch)
	cfg.Clock = clk
	f := NewFaults(rec, cfg)
	for i := range n {
		f.WritePackets([][]byte{testutil.Frame(80, uint32(i))})
		clk.Advance(100 * time.Microsecond)
	}
	clk.Advance(time.Second)
	return rec.frames, f.Stats()
}

func TestFaultsDeterministic(t *testing.T) {
	seed := testenv.Seed(t)
	cfg := FaultConfig{Seed: seed, Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Delay: 0.05, Corrupt: 0.05}
	a, sa := runRates(cfg, 2000)
	b, sb := runRates(cfg, 2000)
	if sa != sb || len(a) != len(b) {
		t.Fatalf("same seed: stats %+v vs %+v, %d vs %d frames", sa, sb, len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("same seed: output frame %d differs", i)
		}
	}
	cfg.Seed = seed + 1
	c, _ := runRates(cfg, 2000)
	same := len(a) == len(c)
	for i := 0; same && i < len(a); i++ {
		same = bytes.Equal(a[i], c[i])
	}
	if same {
		t.Error("different seeds gave identical output")
	}
	// Every fault happened at roughly its rate (5% of 2000 = 100; the
	// bounds are > 5 standard deviations wide).
	for name, got := range map[string]uint64{"dropped": sa.Dropped, "duplicated": sa.Duplicated, "reordered": sa.Reordered, "delayed": sa.Delayed, "corrupted": sa.Corrupted} {
		if got < 50 || got > 160 {
			t.Errorf("%s %d of 2000 frames at rate 0.05", name, got)
		}
	}
	// Conservation: what went out is what came in, less drops, plus
	// duplicates; nothing was lost on the manual clock.
	if want := int(sa.Frames - sa.Dropped + sa.Duplicated); len(a) != want || sa.Lost != 0 {
		t.Errorf("%d frames out, want %d (stats %+v)", len(a), want, sa)
	}
}

func TestFaultsCloseLosesHeld(t *testing.T) {
	rec := &recorder{}
	clk := clock.NewManual(epoch)
	f := NewFaults(rec, FaultConfig{Schedule: ByIndex(map[uint64]Action{0: Delay, 1: Reorder | Duplicate}), Clock: clk})
	f.WritePackets([][]byte{testutil.Frame(64, 0), testutil.Frame(64, 1)})
	if err := f.Close(); err != nil || !rec.closed {
		t.Fatalf("Close = %v, inner closed %v", err, rec.closed)
	}
	clk.Advance(time.Second)
	if len(rec.frames) != 0 {
		t.Errorf("%d frames went out after Close", len(rec.frames))
	}
	if s := f.Stats(); s.Lost != 3 {
		t.Errorf("Lost = %d, want 3", s.Lost)
	}
	if clk.Pending() != 0 {
		t.Errorf("%d timers still pending after Close", clk.Pending())
	}
}

func TestFaultsOverPipe(t *testing.T) {
	a, b := Pipe()
	f := NewFaults(a, FaultConfig{Schedule: ByIndex(map[uint64]Action{0: Drop})})
	defer f.Close()
	if n, err := f.WritePackets([][]byte{testutil.Frame(64, 0), testutil.Frame(64, 1), testutil.Frame(1515, 2)}); n != 2 || err == nil {
		t.Errorf("WritePackets with an oversized third frame = %d, %v; want 2 and an error", n, err)
	}
	bufs, sizes := testutil.ReadBufs(4, 2000)
	if n, err := b.ReadPackets(bufs, sizes); n != 1 || err != nil || binary.BigEndian.Uint32(bufs[0][14:]) != 1 {
		t.Errorf("peer read %d, %v; want frame 1 only", n, err)
	}
	// Reads pass through to the inner link.
	b.WritePackets([][]byte{testutil.Frame(64, 7)})
	if n, err := f.ReadPackets(bufs, sizes); n != 1 || err != nil || binary.BigEndian.Uint32(bufs[0][14:]) != 7 {
		t.Errorf("ReadPackets through Faults = %d, %v", n, err)
	}
}

func TestActionString(t *testing.T) {
	for _, tt := range []struct {
		a    Action
		want string
	}{{0, "Pass"}, {Drop, "Drop"}, {Reorder | Corrupt, "Reorder|Corrupt"}, {Delay | 0x80, "Delay|0x80"}} {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Action(%#x).String() = %q, want %q", uint8(tt.a), got, tt.want)
		}
	}
}

func TestNewFaultsRejectsBadConfig(t *testing.T) {
	for _, cfg := range []FaultConfig{{Drop: -0.1}, {Corrupt: 1.5}, {Delay: 0.1, DelayBy: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewFaults(%+v) did not panic", cfg)
				}
			}()
			NewFaults(&recorder{}, cfg)
		}()
	}
}

// TestFaultConfigValidate: a rate that is not a probability (NaN, which
// passes "< 0 || > 1", infinities, outside [0, 1]) is EINVAL.
func TestFaultConfigValidate(t *testing.T) {
	if err := (FaultConfig{Drop: 0, Duplicate: 1, Corrupt: 0.5}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	for _, c := range []FaultConfig{{Drop: math.NaN()}, {Duplicate: math.Inf(1)}, {Reorder: math.Inf(-1)},
		{Delay: -0.01}, {Corrupt: 1.01}} {
		if err := c.Validate(); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%+v: Validate() = %v, want EINVAL", c, err)
		}
	}
}
