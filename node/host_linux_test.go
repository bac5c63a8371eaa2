package node

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/host"
	"github.com/softroce/softroce/internal/testenv"
)

// TestKernelSeesClosedPorts: the kernel's sockets in the namespace learn
// that softroce listens on nothing but RoCEv2, the way they learn it from
// a Linux host: a connected UDP socket's next read fails with
// ECONNREFUSED (ICMP port unreachable, IPv4 and IPv6) and a TCP connect
// is refused (RST).
func TestKernelSeesClosedPorts(t *testing.T) {
	ns := bridgeNS(t)
	a := bridgeNode(t, ns, "softroce0", "srn0", macA, []netip.Addr{brA, brA6}, "")
	for _, ip := range []netip.Addr{brA, brA6} {
		t.Run("UDP "+ip.String(), func(t *testing.T) {
			var c net.Conn
			if err := ns.Do(func() (err error) {
				c, err = net.Dial("udp", netip.AddrPortFrom(ip, 9).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("anyone?")); err != nil {
				t.Fatal(err)
			}
			_, err := c.Read(make([]byte, 100))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("read after a datagram to %v port 9: %v; want ECONNREFUSED (ICMP port unreachable)", ip, err)
			}
		})
		t.Run("TCP "+ip.String(), func(t *testing.T) {
			err := ns.Do(func() error {
				c, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, 22).String(), 5*time.Second)
				if err == nil {
					c.Close()
				}
				return err
			})
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("connect to %v port 22: %v; want ECONNREFUSED (RST)", ip, err)
			}
		})
	}
	s := hostStatsWhen(a, func(s host.Stats) bool { return s.DestUnreachables == 2 && s.TCPResets == 2 })
	if s.DestUnreachables != 2 || s.TCPResets != 2 {
		t.Errorf("host stats %+v; want 2 port unreachables and 2 resets", s)
	}
}

// TestDADAgainstKernel: the kernel's bridge holds fd78::1, so softroce's
// duplicate address detection fails for it — in New and in AddAddr — with
// no GID made, while an unused address passes and gets its GID.
func TestDADAgainstKernel(t *testing.T) {
	ns := bridgeNS(t)
	dup := netip.MustParsePrefix("fd78::1/64")
	t.Run("New", func(t *testing.T) {
		cfg := Config{Name: "softroce0", MAC: macA, Addrs: []netip.Prefix{dup}}
		err := ns.Do(func() error {
			n, err := newOnTAP(cfg, "srn0", 0)
			if err == nil {
				n.Close()
			}
			return err
		})
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "duplicate address detected") {
			t.Errorf("New with the kernel's address: %v; want a duplicate address error (EADDRINUSE)", err)
		}
	})
	t.Run("AddAddr", func(t *testing.T) {
		var failed []netip.Prefix
		var mu sync.Mutex
		cfg := Config{Name: "softroce1", MAC: macB, Addrs: []netip.Prefix{netip.PrefixFrom(brB6, 64)},
			OnDADFailure: func(p netip.Prefix, _ error) { mu.Lock(); failed = append(failed, p); mu.Unlock() }}
		var n *Node
		if err := ns.Do(func() (err error) { n, err = newOnTAP(cfg, "srn1", 0); return err }); err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		if _, err := n.GID(brB6); err != nil {
			t.Errorf("GID of %v after its DAD passed: %v", brB6, err)
		}
		if s := n.Stats().Host; s.DADProbes != 2 {
			t.Errorf("%d DAD probes; want 2 (link-local and %v)", s.DADProbes, brB6)
		}
		err := n.AddAddr(context.Background(), dup)
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("AddAddr(%v): %v; want EADDRINUSE", dup, err)
		}
		if _, err := n.GID(dup.Addr()); err == nil {
			t.Errorf("a GID exists for the duplicate %v", dup)
		}
		mu.Lock()
		if len(failed) != 1 || failed[0] != dup {
			t.Errorf("OnDADFailure got %v; want [%v]", failed, dup)
		}
		mu.Unlock()
		out, err := ns.Command("ping", "-c", "1", "-W", "3", brB6.String()).CombinedOutput()
		if err != nil {
			t.Errorf("ping %v: %v\n%s", brB6, err, out)
		}
	})
}

// TestMLDSnoopingBridge: a bridge with multicast snooping and a querier
// learns softroce's solicited-node group on its port from softroce's MLD
// reports (`bridge mdb show`), and forgets it when the address goes.
func TestMLDSnoopingBridge(t *testing.T) {
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "1", "mcast_querier", "1")
	ns.Run(t, "ip", "addr", "add", "fd78::1/64", "dev", "br0", "nodad")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	// Not fd78::a: its solicited-node group is the link-local address's too.
	ip := netip.MustParseAddr("fd78::1:a")
	a := bridgeNode(t, ns, "softroce0", "srn0", macA, []netip.Addr{ip}, "")
	group := "ff02::1:ff01:a"
	mdb := func() string {
		out, err := ns.Command("bridge", "mdb", "show", "dev", "br0").CombinedOutput()
		if err != nil {
			t.Fatalf("bridge mdb show: %v\n%s", err, out)
		}
		return string(out)
	}
	waitFor := func(present bool) string {
		var out string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out = mdb()
			if strings.Contains(out, "port srn0 grp "+group) == present {
				break
			}
		}
		return out
	}
	if out := waitFor(true); !strings.Contains(out, "port srn0 grp "+group) {
		t.Fatalf("bridge mdb has no %s on srn0:\n%s", group, out)
	}
	if err := a.Host().RemoveAddr(ip); err != nil {
		t.Fatal(err)
	}
	if out := waitFor(false); strings.Contains(out, "port srn0 grp "+group) {
		t.Errorf("bridge mdb still has %s on srn0 after the address went:\n%s", group, out)
	}
	if s := hostStatsWhen(a, func(s host.Stats) bool { return s.MLDReports >= 2 }); s.MLDReports < 2 {
		t.Errorf("host stats %+v; want a join and a leave report at least", s)
	}
}

// TestLinkLocalDADInBackground: New waits for the detection of the
// addresses it was given, not for that of the link-local address the host
// makes itself: that one is still tentative when New returns with only an
// IPv4 address, and becomes one of the host's addresses about a second
// later, as the kernel's does after `ip link set up`. (GID index 0, the
// default GID from the MAC, exists from the start, as in the kernel.)
func TestLinkLocalDADInBackground(t *testing.T) {
	ns := bridgeNS(t)
	cfg := Config{Name: "softroce2", MAC: macA,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.78.0.42/24")}}
	var n *Node
	start := time.Now()
	if err := ns.Do(func() (err error) { n, err = newOnTAP(cfg, "srn2", 0); return err }); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("New took %v: it waited for the link-local address's detection", d)
	}
	tent := n.Host().Tentative()
	if len(tent) != 1 || !tent[0].Addr().IsLinkLocalUnicast() {
		t.Fatalf("tentative after New: %v; want the link-local address alone", tent)
	}
	ll := tent[0]
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(n.Host().Addrs(), ll) {
		if time.Now().After(deadline) {
			t.Fatalf("%v still not an address 5 s after New (tentative %v)", ll, n.Host().Tentative())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(n.Host().Tentative()) != 0 {
		t.Errorf("still tentative: %v", n.Host().Tentative())
	}
}
