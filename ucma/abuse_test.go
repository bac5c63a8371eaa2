//go:build linux

package ucma

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// TestREQFloodPastTheBacklog: a flood of REQs at a listener of backlog 4
// whose consumer is slow: 4 CONNECT_REQUESTs are queued, the other REQs
// are dropped without an answer and counted (ucma_event_handler's
// -ENOMEM, after which ib_cm does not reject, so that a retransmission
// may find room), their retransmissions are dropped
// too until the requesters give up (UNREACHABLE, -ETIMEDOUT); the queued
// requests' retransmissions get an MRA. The consumer then takes the 4
// requests and answers none: closing its file rejects them (REJ 28), and
// nothing is left: no context, no goroutine.
func TestREQFloodPastTheBacklog(t *testing.T) {
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	// The requesters resend once, 500 ms later.
	ca, err := cma.New(cma.Config{Dev: lb.A.Dev, Seed: 1, REQTimeout: 500 * time.Millisecond, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := cma.New(cma.Config{Dev: lb.B.Dev, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	s := NewService(cb, 2)
	goroutines := runtime.NumGoroutine()

	srv := open(t, s, 1)
	l := srv.createID(cma.PSTCP, 0x10)
	if err := srv.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: l, Addr: sin(netip.AddrPortFrom(lb.B.IP, 7500))}, 0)); err != nil {
		t.Fatal(err)
	}
	const backlog, n = 4, 12
	if err := srv.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: l, Backlog: backlog}, 0)); err != nil {
		t.Fatal(err)
	}
	evs := make(chan cma.Event, 4*n)
	h := func(ev *cma.Event) error { evs <- *ev; return nil }
	next := func(what string) cma.Event {
		t.Helper()
		select {
		case ev := <-evs:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
		return cma.Event{}
	}
	var ids []*cma.ID
	for range n {
		id, err := ca.CreateID(cma.PSTCP, qpstate.TypeRC, h, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(lb.B.IP, 7500), time.Second); err != nil {
			t.Fatal(err)
		}
		if ev := next("ADDR_RESOLVED"); ev.Type != cma.EventAddrResolved {
			t.Fatalf("event %v", ev.Type)
		}
		if err := id.ResolveRoute(time.Second); err != nil {
			t.Fatal(err)
		}
		if ev := next("ROUTE_RESOLVED"); ev.Type != cma.EventRouteResolved {
			t.Fatalf("event %v", ev.Type)
		}
	}
	st0 := cb.Stats()
	for i, id := range ids {
		if err := id.Connect(&cma.ConnParam{QPNum: 0x100 + uint32(i), RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
	}
	// The dropped ones give up after their retransmission (the consumer
	// takes no event meanwhile: the backlog stays full).
	unreachable := map[*cma.ID]bool{}
	for range n - backlog {
		ev := next(fmt.Sprintf("UNREACHABLE (%+v)", cb.Stats()))
		if ev.Type != cma.EventUnreachable || ev.Status != -int32(unix.ETIMEDOUT) {
			t.Fatalf("event %v status %d, want UNREACHABLE -ETIMEDOUT", ev.Type, ev.Status)
		}
		unreachable[ev.ID] = true
	}
	for deadline := time.Now().Add(5 * time.Second); cb.Stats().Received-st0.Received < 2*n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	st := cb.Stats()
	if st.Received-st0.Received != 2*n || st.BacklogDrops-st0.BacklogDrops != 2*(n-backlog) ||
		st.Duplicates-st0.Duplicates != backlog || st.RejSent != st0.RejSent {
		t.Errorf("listener's CM after %d REQs sent twice at a backlog of %d: %+v, before %+v", n, backlog, st, st0)
	}
	for range backlog {
		if ev := srv.event(); ev.Event != uint32(cma.EventConnectRequest) {
			t.Fatalf("event %+v, want CONNECT_REQUEST", ev)
		}
	}
	if got := s.Contexts(); got != 1+backlog {
		t.Errorf("%d contexts, want the listener and %d requests", got, backlog)
	}
	// The consumer goes: the queued requests are rejected.
	srv.f.Close()
	for range backlog {
		ev := next("REJECTED")
		if ev.Type != cma.EventRejected || ev.Status != int32(mad.RejConsumerDefined) || unreachable[ev.ID] {
			t.Fatalf("event %v status %d, want REJECTED 28 for a queued request", ev.Type, ev.Status)
		}
	}
	if got := cb.Stats().RejSent - st0.RejSent; got != backlog {
		t.Errorf("%d REJs sent, want %d", got, backlog)
	}
	for _, id := range ids {
		id.Destroy()
	}
	if got := s.Contexts(); got != 0 {
		t.Errorf("%d contexts left", got)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), goroutines)
		}
	}
}
