package cma

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestRemoveDevice: RemoveDevice gives each ID attached to the device,
// whatever its state, exactly one DEVICE_REMOVAL and leaves it in
// DEVICE_REMOVAL, where the calls that want another state are EINVAL, as
// cma_process_remove does; the IDs without a device (IDLE, on a wildcard,
// a wildcard listener) get nothing and keep their state.
func TestRemoveDevice(t *testing.T) {
	a, b := newPair(t, Config{}, Config{})
	type want struct {
		name  string
		id    *ID
		state State // before
		dev   bool  // attached: gets the event
	}
	var ws []want
	add := func(name string, id *ID, state State, dev bool) {
		t.Helper()
		if got := id.Info().State; got != state {
			t.Fatalf("%s: state %v, want %v", name, got, state)
		}
		ws = append(ws, want{name, id, state, dev})
	}
	add("idle", a.id(PSTCP), StateIdle, false)
	wb := a.id(PSTCP)
	if err := wb.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
		t.Fatal(err)
	}
	add("wildcard bound", wb, StateAddrBound, false)
	add("wildcard listener", a.listen(7470), StateListen, false)
	sb := a.id(PSTCP)
	if err := sb.Bind(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	add("bound", sb, StateAddrBound, true)
	sl := a.id(PSTCP)
	if err := sl.Bind(netip.AddrPortFrom(a.ip, 7471)); err != nil {
		t.Fatal(err)
	}
	if err := sl.Listen(0); err != nil {
		t.Fatal(err)
	}
	add("listener", sl, StateListen, true)
	ar := a.id(PSTCP)
	if err := ar.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(b.ip, 7472), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(EventAddrResolved, 0)
	add("address resolved", ar, StateAddrResolved, true)
	add("route resolved", a.resolved(b.ip, 7472), StateRouteResolved, true)
	active, _ := established(t, a, b, 7473)
	add("active connection", active, StateConnect, true)
	peer, passive := established(t, b, a, 7474) // a's wildcard listener stays, without a device
	add("passive connection", passive, StateConnect, true)

	if n := a.cm.RemoveDevice(); n != 6 {
		t.Errorf("RemoveDevice: %d IDs got the event, want 6", n)
	}
	got := map[*ID]int{}
	for len(a.evs) > 0 {
		ev := <-a.evs
		if ev.Type != EventDeviceRemoval || ev.Status != 0 {
			t.Errorf("event %v status %d, want only DEVICE_REMOVAL", ev.Type, ev.Status)
		}
		got[ev.ID]++
	}
	if n := a.cm.RemoveDevice(); n != 0 || len(a.evs) != 0 {
		t.Errorf("a second RemoveDevice: %d IDs, %d events", n, len(a.evs))
	}
	for _, w := range ws {
		st := w.id.Info().State
		if !w.dev {
			if got[w.id] != 0 || st != w.state {
				t.Errorf("%s: %d events, state %v; want none, %v", w.name, got[w.id], st, w.state)
			}
			continue
		}
		if got[w.id] != 1 || st != StateDeviceRemoval {
			t.Errorf("%s: %d events, state %v; want one DEVICE_REMOVAL, %v", w.name, got[w.id], st, StateDeviceRemoval)
		}
		for name, err := range map[string]error{
			"bind":          w.id.Bind(netip.AddrPortFrom(a.ip, 0)),
			"resolve addr":  w.id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(b.ip, 7475), time.Second),
			"resolve route": w.id.ResolveRoute(time.Second),
			"listen":        w.id.Listen(0),
			"connect":       w.id.Connect(&ConnParam{}),
			"accept":        w.id.Accept(&ConnParam{}),
		} {
			if !errorsIs(err, unix.EINVAL) {
				t.Errorf("%s: %s after the removal: %v, want EINVAL", w.name, name, err)
			}
		}
	}
	select {
	case ev := <-b.evs:
		t.Errorf("the peer got %v: the connections stay until the consumer destroys its ID", ev.Type)
	case <-time.After(50 * time.Millisecond):
	}
	// The wildcard listener keeps its state but hears no request: the
	// kernel destroyed its listen on the device.
	late := b.resolved(a.ip, 7470)
	if err := late.Connect(&ConnParam{QPNum: b.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	b.want(EventRejected, int32(mad.RejInvalidServiceID))
	if len(a.evs) != 0 {
		t.Fatalf("a request after the removal reached %v", (<-a.evs).Type)
	}
	// Destroying the removed ID ends its connection as ever; the peer's
	// DREQ reaches a removed ID, which hears nothing more.
	active.Destroy()
	b.want(EventDisconnected, 0)
	rx := a.cm.Stats().Received
	peer.Destroy()
	waitFor(t, "the peer's DREQ", func() bool { return a.cm.Stats().Received > rx })
	if st := passive.Info().State; st != StateDeviceRemoval {
		t.Errorf("the removed ID the peer disconnected: %v, want %v", st, StateDeviceRemoval)
	}
	if len(a.evs) != 0 {
		t.Errorf("a removed ID got %v", (<-a.evs).Type)
	}
}

// TestRemoveDeviceHandlerDestroys: a handler that refuses DEVICE_REMOVAL
// has its ID destroyed, as the kernel's cma_send_device_removal_put does
// for a non-zero return.
func TestRemoveDeviceHandlerDestroys(t *testing.T) {
	a, _ := newPair(t, Config{}, Config{})
	calls := 0
	id, err := a.cm.CreateID(PSTCP, qpstate.TypeRC, func(ev *Event) error {
		calls++
		return unix.ENODEV
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Bind(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	if n := a.cm.RemoveDevice(); n != 1 || calls != 1 {
		t.Fatalf("RemoveDevice: %d IDs, %d handler calls; want 1, 1", n, calls)
	}
	if st := id.Info().State; st != StateDestroying {
		t.Errorf("state %v, want %v", st, StateDestroying)
	}
}
