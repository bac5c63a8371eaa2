package cma

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/mad"
	"golang.org/x/sys/unix"
)

// TestLoopbackBindsAsWildcard: as cma_any_addr, a loopback address binds
// as the wildcard does (no device); resolving a loopback or wildcard
// destination takes port 1's GID 0 and a loopback source
// (cma_bind_loopback), and the route of such an ID has no netdev
// (ENODEV). An ID bound to the device's address resolves the loopback to
// itself and keeps its netdev.
func TestLoopbackBindsAsWildcard(t *testing.T) {
	a, _ := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	for _, lo := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.3.2.1"), netip.IPv6Loopback()} {
		x := a.id(PSTCP)
		if err := x.Bind(netip.AddrPortFrom(lo, 0)); err != nil {
			t.Fatalf("bind %v: %v", lo, err)
		}
		if in := x.Info(); in.HasDevice || in.Src.Addr() != lo || in.State != StateAddrBound {
			t.Errorf("bound to %v: %+v, want ADDR_BOUND without a device", lo, in)
		}
		dst := netip.AddrPortFrom(lo, 7000)
		if err := x.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
			t.Fatalf("resolve %v: %v", dst, err)
		}
		a.want(EventAddrResolved, 0)
		in := x.Info()
		wantSrc := netip.MustParseAddr("127.0.0.1")
		if lo.Is6() {
			wantSrc = lo
		}
		if !in.HasDevice || in.Src.Addr() != wantSrc || in.SGID != a.cm.gidAt(0) || in.DGID != in.SGID || in.Dst != dst {
			t.Errorf("resolved %v: %+v, want port 1's GID 0 both ways from %v", dst, in, wantSrc)
		}
		if err := x.ResolveRoute(time.Second); !errorsIs(err, unix.ENODEV) {
			t.Errorf("route of a loopback ID: %v, want ENODEV", err)
		}
		if x.Info().State != StateAddrResolved {
			t.Errorf("after the failed route: %v, want ADDR_RESOLVED", x.Info().State)
		}
	}
	x := a.id(PSTCP)
	if err := x.Bind(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	if err := x.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 7000), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(EventAddrResolved, 0)
	if in := x.Info(); in.Src.Addr() != a.ip || in.DGID != in.SGID {
		t.Errorf("device-bound ID resolved to the loopback: %+v", in)
	}
	if err := x.ResolveRoute(time.Second); err != nil {
		t.Fatalf("route of a device-bound ID: %v", err)
	}
	a.want(EventRouteResolved, 0)
}

// TestBindAddressRules: the errnos of rdma_bind_addr for the kinds of
// address (cma_check_linklocal, rdma_translate_ip, cma_check_port) and of
// a resolve whose source and destination families differ (the ID stays
// bound, resolve_prepare_src).
func TestBindAddressRules(t *testing.T) {
	a, _ := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	for _, tc := range []struct {
		name string
		addr netip.AddrPort
		want unix.Errno
	}{
		{"link-local without scope", netip.MustParseAddrPort("[fe80::1]:0"), unix.EINVAL},
		{"foreign link-local with scope", netip.MustParseAddrPort("[fe80::1%2]:0"), unix.ENODEV},
		{"foreign address", netip.MustParseAddrPort("192.0.2.7:0"), unix.EADDRNOTAVAIL},
		{"multicast", netip.MustParseAddrPort("224.0.0.1:0"), unix.EADDRNOTAVAIL},
		{"IPv4 wildcard", netip.MustParseAddrPort("0.0.0.0:0"), 0},
		{"IPv6 wildcard", netip.MustParseAddrPort("[::]:0"), 0},
	} {
		err := a.id(PSTCP).Bind(tc.addr)
		if tc.want == 0 && err != nil || tc.want != 0 && !errorsIs(err, tc.want) {
			t.Errorf("%s: bind %v: %v, want %v", tc.name, tc.addr, err, tc.want)
		}
	}
	// Ports: wildcard beside an address is EADDRNOTAVAIL, the same
	// address EADDRINUSE; an IPv4 ID is AF-only, so an AF-only IPv6
	// wildcard shares the port; both with reuse share it.
	x := a.id(PSTCP)
	if err := x.Bind(netip.AddrPortFrom(a.ip, 6000)); err != nil {
		t.Fatal(err)
	}
	if err := a.id(PSTCP).Bind(netip.MustParseAddrPort("[::]:6000")); !errorsIs(err, unix.EADDRNOTAVAIL) {
		t.Errorf("IPv6 wildcard beside IPv4: %v, want EADDRNOTAVAIL", err)
	}
	y := a.id(PSTCP)
	if err := y.SetAFOnly(true); err != nil {
		t.Fatal(err)
	}
	if err := y.Bind(netip.MustParseAddrPort("[::]:6000")); err != nil {
		t.Errorf("AF-only IPv6 wildcard beside IPv4: %v", err)
	}
	r1, r2 := a.id(PSTCP), a.id(PSTCP)
	for _, r := range []*ID{r1, r2} {
		if err := r.SetReuseAddr(true); err != nil {
			t.Fatal(err)
		}
		if err := r.Bind(netip.MustParseAddrPort("0.0.0.0:6001")); err != nil {
			t.Errorf("reuse: %v", err)
		}
	}
	// A listener shares its port with no one (rdma_listen checks it
	// again without reuse): neither may listen while the other is bound.
	if err := r1.Listen(0); !errorsIs(err, unix.EADDRNOTAVAIL) {
		t.Errorf("listener on a shared port: %v, want EADDRNOTAVAIL", err)
	}
	r2.Destroy()
	if err := r1.Listen(0); err != nil {
		t.Fatalf("listener alone on its port: %v", err)
	}
	if err := r1.SetReuseAddr(true); !errorsIs(err, unix.EINVAL) {
		t.Errorf("reuse on a listener: %v, want EINVAL", err)
	}
	z := a.id(PSTCP)
	if err := z.ResolveAddr(netip.MustParseAddrPort("[::]:0"), netip.AddrPortFrom(a.ip, 1), time.Second); !errorsIs(err, unix.EINVAL) {
		t.Errorf("resolve IPv4 from IPv6: %v, want EINVAL", err)
	}
	if st := z.Info().State; st != StateAddrBound {
		t.Errorf("after a resolve across families: %v, want ADDR_BOUND", st)
	}
}

// TestCMCounters: the message counters of both CMs for a REQ nobody
// listens for, answered with a REJ (cm.c's cm_tx_msgs and cm_rx_msgs).
func TestCMCounters(t *testing.T) {
	a, b := newPair(t, Config{Seed: 41}, Config{Seed: 42})
	ca := a.resolved(b.ip, 7600)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	a.want(EventRejected, int32(mad.RejInvalidServiceID))
	const req, rej = 0, 2 // attribute IDs 0x10 and 0x12
	for _, c := range []struct {
		name        string
		cm          *CM
		group, attr int
		want        uint64
	}{
		{"a sent REQ", a.cm, CounterXmit, req, 1},
		{"a received REJ", a.cm, CounterRecv, rej, 1},
		{"b received REQ", b.cm, CounterRecv, req, 1},
		{"b sent REJ", b.cm, CounterXmit, rej, 1},
		{"a retried", a.cm, CounterXmitRetries, req, 0},
		{"b duplicates", b.cm, CounterRecvDuplicates, req, 0},
	} {
		if got := c.cm.Counters()[c.group][c.attr]; got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
