package node

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
)

// portEvents starts a node on the link open gives (called inside ns) and
// returns it with a channel of its port events.
func portEvents(t *testing.T, ns *testenv.NetNS, open func() (*Node, error)) (*Node, <-chan emu.EventType) {
	t.Helper()
	var n *Node
	if err := ns.Do(func() (err error) { n, err = open(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ch := make(chan emu.EventType, 16)
	n.Device().RegisterEventHandler(func(e emu.Event) {
		if e.Type == emu.EventPortErr || e.Type == emu.EventPortActive {
			ch <- e.Type
		}
	})
	return n, ch
}

// expectPort waits for the port event want after step and checks the
// port's state and physical state.
func expectPort(t *testing.T, n *Node, ch <-chan emu.EventType, step string, want emu.EventType, state emu.PortState, phys emu.PhysState) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("after %s: event %v, want %v", step, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("after %s: no port event in 5 s, want %v", step, want)
	}
	a, err := n.Device().QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != state || a.PhysState != phys {
		t.Errorf("after %s: port state %v, physical %v; want %v, %v", step, a.State, a.PhysState, state, phys)
	}
	select {
	case e := <-ch:
		t.Errorf("after %s: a second event %v", step, e)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestPortFollowsTAPCarrier: the carrier and the administrative state of
// the node's TAP, changed with ip(8), give IB_EVENT_PORT_ERR and
// IB_EVENT_PORT_ACTIVE and the port's state DOWN / ACTIVE (physical state
// POLLING without carrier, DISABLED when down), as rxe's netdev notifier
// and rxe_query_port do for its interface.
func TestPortFollowsTAPCarrier(t *testing.T) {
	ns := testenv.NewNetNS(t)
	n, ch := portEvents(t, ns, func() (*Node, error) {
		l, err := OpenTAP("srcarrier0", "", 0)
		if err != nil {
			return nil, err
		}
		return New(context.Background(), Config{Link: l, NoDAD: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.79.0.2/24")}})
	})
	for _, s := range []struct {
		args  []string
		want  emu.EventType
		state emu.PortState
		phys  emu.PhysState
	}{
		{[]string{"carrier", "off"}, emu.EventPortErr, emu.PortDown, emu.PhysPolling},
		{[]string{"carrier", "on"}, emu.EventPortActive, emu.PortActive, emu.PhysLinkUp},
		{[]string{"down"}, emu.EventPortErr, emu.PortDown, emu.PhysDisabled},
		{[]string{"up"}, emu.EventPortActive, emu.PortActive, emu.PhysLinkUp},
	} {
		ns.Run(t, "ip", append([]string{"link", "set", "srcarrier0"}, s.args...)...)
		expectPort(t, n, ch, "ip link set "+s.args[0]+" "+s.args[len(s.args)-1], s.want, s.state, s.phys)
	}
}

// TestPortFollowsVethCarrier: a node on one end of a veth pair
// (AF_PACKET) loses carrier when the other end goes down and gets it back
// when it comes up: PORT_ERR, then PORT_ACTIVE.
func TestPortFollowsVethCarrier(t *testing.T) {
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "srveth0", "type", "veth", "peer", "name", "srveth1")
	ns.Run(t, "ip", "link", "set", "srveth1", "up")
	n, ch := portEvents(t, ns, func() (*Node, error) {
		l, err := OpenPacket("srveth0", "", 0)
		if err != nil {
			return nil, err
		}
		return New(context.Background(), Config{Link: l, NoDAD: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.79.1.2/24")}})
	})
	ns.Run(t, "ip", "link", "set", "srveth1", "down")
	expectPort(t, n, ch, "the peer going down", emu.EventPortErr, emu.PortDown, emu.PhysPolling)
	ns.Run(t, "ip", "link", "set", "srveth1", "up")
	expectPort(t, n, ch, "the peer coming up", emu.EventPortActive, emu.PortActive, emu.PhysLinkUp)
}
