package workload

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// silentCorrupter flips a payload byte of the target-th SEND it writes
// (counting SEND_ONLY and SEND_FIRST packets from 1) and seals the ICRC
// again, so that the receiver accepts the damaged message: a corruption
// only a check of the data can see.
type silentCorrupter struct {
	link.Link
	mu        sync.Mutex
	sends     int
	target    int
	corrupted bool
}

func (c *silentCorrupter) WritePackets(bufs [][]byte) (int, error) {
	c.mu.Lock()
	out := bufs
	for i, f := range bufs {
		p, err := wire.Parse(f)
		if err != nil || (p.Opcode() != wire.RCSendOnly && p.Opcode() != wire.RCSendFirst) {
			continue
		}
		if c.sends++; c.sends != c.target || len(p.Payload()) == 0 {
			continue
		}
		g := append([]byte(nil), f...)
		g[p.PayloadOffset()] ^= 0xff
		if err := wire.SealICRC(g, p.L3Offset()); err != nil {
			panic(err)
		}
		out = append(append([][]byte(nil), bufs[:i]...), g)
		out = append(out, bufs[i+1:]...)
		c.corrupted = true
		break
	}
	c.mu.Unlock()
	return c.Link.WritePackets(out)
}

// TestSendBWChecksEveryMessage: a loopback send test checks every message
// it receives, not only the last one: a middle message damaged in flight
// (its ICRC sealed again) fails the run, while the same run without the
// damage passes and reports each message checked.
func TestSendBWChecksEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		test  oob.PerftestTest
		bidir bool
	}{{oob.PerftestSendBW, false}, {oob.PerftestSendBW, true}, {oob.PerftestSendLat, false}} {
		name := tc.test.String()
		if tc.bidir {
			name += "-b"
		}
		t.Run(name, func(t *testing.T) {
			for _, damage := range []bool{false, true} {
				cor := &silentCorrupter{target: 11}
				cfg := LoopbackConfig{Seed: 3}
				if damage {
					cfg.Wrap = func(i int, l link.Link) link.Link {
						if i != 0 {
							return l
						}
						cor.Link = l
						return cor
					}
				}
				lb, err := NewLoopback(cfg)
				if err != nil {
					t.Fatal(err)
				}
				cl, sv, err := lb.Perf(PerfConfig{Test: tc.test, MaxSize: 64, Iters: 100, GIDIndex: LoopbackGIDIndex,
					Bidirectional: tc.bidir, Seed: 3, Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if !sv.ChecksEachMessage() {
					t.Fatal("the server does not check each message")
				}
				var wg sync.WaitGroup
				var errs error
				wg.Add(1)
				go func() { defer wg.Done(); _, errs = sv.Run(64) }()
				_, errc := cl.Run(64)
				wg.Wait()
				err = errors.Join(errc, errs)
				if err == nil {
					err = VerifyPerf(cl, sv)
				}
				if !damage && err != nil {
					t.Fatalf("undamaged run: %v", err)
				}
				if damage && (!cor.corrupted || !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), "message 10 received differs")) {
					t.Errorf("damaged run (corrupted %v): %v; want message 10 to differ (EIO)", cor.corrupted, err)
				}
				cl.Close()
				sv.Close()
				lb.Close()
			}
		})
	}
}
