package rdmacm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/mad"
)

// txLog records when (on the CM's clock) each message went out, and drops
// the attributes in drop.
type txLog struct {
	mu   sync.Mutex
	clk  clock.Clock
	at   map[mad.AttrID][]time.Duration
	drop map[mad.AttrID]bool
}

func newTxLog(clk clock.Clock, drop ...mad.AttrID) *txLog {
	l := &txLog{clk: clk, at: map[mad.AttrID][]time.Duration{}, drop: map[mad.AttrID]bool{}}
	for _, a := range drop {
		l.drop[a] = true
	}
	return l
}

func (l *txLog) record(m mad.MAD) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[m.AttributeID()] = append(l.at[m.AttributeID()], l.clk.Now().Sub(time.Unix(0, 0)))
	return l.drop[m.AttributeID()]
}

func (l *txLog) times(a mad.AttrID) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.at[a]...)
}

// checkEvery fails t unless ts are n sends, every step apart from the first.
func checkEvery(t *testing.T, what string, ts []time.Duration, n int, step time.Duration) {
	t.Helper()
	if len(ts) != n {
		t.Fatalf("%s sent %d times, want %d: %v", what, len(ts), n, ts)
	}
	for i := 1; i < n; i++ {
		if d := ts[i] - ts[i-1]; d != step {
			t.Errorf("%s %d went out %v after the one before, want %v", what, i, d, step)
		}
	}
}

// TestKernelTimers: with the kernel's times (no RetryInterval), an
// unanswered REQ goes out 16 times, every 6144 ms (twice the packet
// lifetime of 18 plus the response timeout of 20), then Connect fails with
// ETIMEDOUT; an unanswered REP every 4096 ms (the REQ's Local CM Response
// Timeout), as many times as the REQ's Max CM Retries allow.
func TestKernelTimers(t *testing.T) {
	if got := CMTimeout(20); got != 4096*time.Millisecond || CMTimeout(3) != time.Millisecond || CMTimeout(24) != 65536*time.Millisecond {
		t.Fatalf("CMTimeout(20) = %v", got)
	}
	t.Run("REQ", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(0, 0))
		log := newTxLog(clk, mad.AttrREQ)
		lb, a, _ := newPair(t, Config{Seed: 31, Clock: clk, dropTx: log.record}, Config{Seed: 32})
		errc := make(chan error, 1)
		go func() { _, err := a.cm.Connect(context.Background(), a.qp, lb.B.IP, 7800, rpingParam); errc <- err }()
		for {
			select {
			case err := <-errc:
				if !errors.Is(err, unix.ETIMEDOUT) {
					t.Fatalf("Connect: %v, want ETIMEDOUT", err)
				}
				checkEvery(t, "REQ", log.times(mad.AttrREQ), 16, REQTimeout)
				if s := a.cm.Stats(); s.Retries != 15 || s.Sent[mad.AttrREQ] != 16 {
					t.Errorf("stats %+v", s)
				}
				return
			case <-time.After(time.Millisecond):
				clk.AdvanceToNext()
			}
		}
	})
	t.Run("REP", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(0, 0))
		log := newTxLog(clk, mad.AttrREP)
		lb, a, b := newPair(t, Config{Seed: 33, Clock: clk}, Config{Seed: 34, Clock: clk, dropTx: log.record})
		l, err := b.cm.Listen(7801)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 2)
		go func() { _, err := a.cm.Connect(context.Background(), a.qp, lb.B.IP, 7801, rpingParam); errc <- err }()
		go func() {
			r, err := l.Accept(context.Background())
			if err == nil {
				_, err = r.Accept(context.Background(), b.qp, rpingParam)
			}
			errc <- err
		}()
		var errs []error
		for len(errs) < 2 {
			select {
			case err := <-errc:
				errs = append(errs, err)
			case <-time.After(time.Millisecond):
				clk.AdvanceToNext()
			}
		}
		for _, err := range errs {
			if !errors.Is(err, unix.ETIMEDOUT) {
				t.Errorf("%v, want ETIMEDOUT", err)
			}
		}
		checkEvery(t, "REP", log.times(mad.AttrREP), 16, DefaultRetryInterval)
		// The REQ's retransmissions reached the passive side as
		// duplicates: answered with an MRA while the consumer had not
		// accepted, dropped once the REP was out (its timer recovers).
		if s := b.cm.Stats(); s.Duplicates == 0 || s.Sent[mad.AttrMRA] >= s.Duplicates {
			t.Errorf("passive stats %+v", s)
		}
	})
}

// TestMRA: a consumer slow to accept. The active side's REQ times out
// after 6144 ms and goes out again; the passive side, still holding the
// first copy for its consumer, answers the duplicate with an MRA (service
// timeout 24); the active side then waits 2^(24−8) + 2^(19−8) ms before
// its next copy, and the connection comes up when the consumer accepts.
func TestMRA(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	log := newTxLog(clk)
	lb, a, b := newPair(t, Config{Seed: 35, Clock: clk, dropTx: log.record}, Config{Seed: 36, Clock: clk})
	l, err := b.cm.Listen(7802)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		cn  *Conn
		err error
	}
	ac := make(chan res, 1)
	go func() {
		cn, err := a.cm.Connect(context.Background(), a.qp, lb.B.IP, 7802, rpingParam)
		ac <- res{cn, err}
	}()
	req, err := l.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the REQ timer", func() bool { return clk.Pending() > 0 })
	clk.AdvanceToNext() // 6144 ms: the REQ again
	waitFor(t, "the MRA", func() bool { return a.cm.Stats().Received[mad.AttrMRA] == 1 })
	if s := b.cm.Stats(); s.Sent[mad.AttrMRA] != 1 || s.Duplicates != 1 {
		t.Errorf("passive stats %+v", s)
	}
	clk.AdvanceToNext()
	want := []time.Duration{0, REQTimeout, REQTimeout + 65536*time.Millisecond + 2048*time.Millisecond}
	waitFor(t, "the third REQ", func() bool { return len(log.times(mad.AttrREQ)) == 3 })
	if got := log.times(mad.AttrREQ); got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("REQs at %v, want %v", got, want)
	}
	waitFor(t, "the second MRA", func() bool { return a.cm.Stats().Received[mad.AttrMRA] == 2 })
	if s := a.cm.Stats(); s.Duplicates != 1 {
		t.Errorf("a second MRA is a duplicate: %+v", s)
	}
	cb, err := req.Accept(context.Background(), b.qp, rpingParam)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ac
	if r.err != nil || r.cn.State() != StateEstablished || cb.State() != StateEstablished {
		t.Fatalf("connect after MRA: %v", r.err)
	}
}
