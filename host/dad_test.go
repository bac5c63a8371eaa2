package host

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// dadRig is a rig with DAD on and only hostIP6 configured (no link-local
// address), its detection started.
func dadRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	r := newRig(t, func(c *Config) {
		c.NoDAD = false
		c.NoLinkLocal = true
		c.Addrs = []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}
		c.Seed = 7
		if mod != nil {
			mod(c)
		}
	})
	if got := r.h.Addrs(); len(got) != 0 {
		t.Fatalf("Addrs() = %v before DAD; want none", got)
	}
	if got := r.h.Tentative(); !slices.Equal(got, []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}) {
		t.Fatalf("Tentative() = %v; want [%v/64]", got, hostIP6)
	}
	r.h.Announce()
	if r.sent() != 1 {
		t.Fatalf("the Host sent %d frames at once; want the MLD report", r.sent())
	}
	checkMLDReport(t, r.recv(t), mldChangeToExclude, solicitedNode(hostIP6))
	return r
}

// checkProbe fails t unless p is a DAD probe for target and returns its
// nonce.
func checkProbe(t *testing.T, p gopacket.Packet, target netip.Addr) []byte {
	t.Helper()
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	ns, _ := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	if ip == nil || ns == nil {
		t.Fatalf("not a neighbour solicitation: %s", p.Dump())
	}
	group := solicitedNode(target)
	if !bytes.Equal(eth.DstMAC, MulticastMAC(group)) || !bytes.Equal(ip.SrcIP, netip.IPv6Unspecified().AsSlice()) ||
		!bytes.Equal(ip.DstIP, group.AsSlice()) || ip.HopLimit != 255 || !bytes.Equal(ns.TargetAddress, target.AsSlice()) {
		t.Errorf("probe %s; want :: -> %v hop limit 255 for %v", p.Dump(), group, target)
	}
	checkICMPv6Checksum(t, p)
	var nonce []byte
	for _, o := range ns.Options {
		switch o.Type {
		case layers.ICMPv6OptSourceAddress:
			t.Error("DAD probe carries a source link-layer address option")
		case ndOptNonce:
			nonce = o.Data
		}
	}
	if len(nonce) != 6 {
		t.Errorf("DAD probe nonce %x; want 6 bytes", nonce)
	}
	return nonce
}

// firstProbe advances the clock to the first probe and returns it.
func firstProbe(t *testing.T, r *rig) []byte {
	t.Helper()
	start := r.clk.Now()
	for r.sent() == 1 && r.clk.AdvanceToNext() {
	}
	if r.sent() != 2 || r.clk.Now().Sub(start) >= DADDelay {
		t.Fatalf("%d frames sent after %v; want the report and the probe within %v", r.sent(), r.clk.Now().Sub(start), DADDelay)
	}
	return checkProbe(t, r.recv(t), hostIP6)
}

func TestDADSucceeds(t *testing.T) {
	for _, transmits := range []int{0, 1, 3} {
		t.Run(map[int]string{0: "default", 1: "1", 3: "3"}[transmits], func(t *testing.T) {
			r := dadRig(t, func(c *Config) { c.DADTransmits = transmits })
			firstProbe(t, r)
			probeAt := r.clk.Now()
			// While tentative the address answers nothing.
			r.h.Input(nsFrame(t, peerIP6, solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, true))
			r.h.Input(echo6Frame(t, hostMAC, hostIP6, []byte("x")))
			if r.sent() != 2 {
				t.Fatalf("a tentative address answered: %s", r.recv(t).Dump())
			}
			n := max(transmits, 1)
			for i := 1; i < n; i++ {
				r.clk.Advance(DefaultRetransTime)
				checkProbe(t, r.recv(t), hostIP6)
			}
			r.clk.Advance(DefaultRetransTime - time.Nanosecond)
			if len(r.h.Addrs()) != 0 || len(r.changes) != 0 {
				t.Fatalf("address usable %v before the last probe's retrans timer ran out", r.clk.Now().Sub(probeAt))
			}
			r.clk.Advance(time.Nanosecond)
			want := []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}
			if got := r.h.Addrs(); !slices.Equal(got, want) || len(r.h.Tentative()) != 0 {
				t.Fatalf("after DAD: Addrs() = %v, Tentative() = %v; want %v, none", got, r.h.Tentative(), want)
			}
			if !slices.Equal(r.changes, []AddrChange{{Prefix: want[0], Added: true}}) {
				t.Errorf("OnAddrChange calls %v; want the address added once", r.changes)
			}
			// Announced, then answering.
			if na := r.recv(t).Layer(layers.LayerTypeICMPv6NeighborAdvertisement); na == nil {
				t.Error("no unsolicited advertisement after DAD")
			}
			if err := r.h.WaitDAD(context.Background(), hostIP6); err != nil {
				t.Errorf("WaitDAD: %v", err)
			}
			if s := r.h.Stats(); s.DADProbes != uint64(n) || s.DADFailures != 0 {
				t.Errorf("Stats() = %+v; want %d probes, no failure", s, n)
			}
		})
	}
}

func TestDADDuplicate(t *testing.T) {
	otherNonce := []byte{1, 2, 3, 4, 5, 6}
	for _, tt := range []struct {
		name  string
		frame func(t *testing.T, nonce []byte) []byte
		dup   bool
	}{
		{"advertisement", func(t *testing.T, _ []byte) []byte {
			return naFrame(t, peerIP6, allNodes, hostIP6, MulticastMAC(allNodes), 0x20)
		}, true},
		{"another node's probe", func(t *testing.T, _ []byte) []byte { return probeFrame(t, hostIP6, otherNonce) }, true},
		{"another node's probe without a nonce", func(t *testing.T, _ []byte) []byte { return probeFrame(t, hostIP6, nil) }, true},
		{"our own probe looped back", func(t *testing.T, nonce []byte) []byte { return probeFrame(t, hostIP6, nonce) }, false},
		{"a solicitation from a unicast address", func(t *testing.T, _ []byte) []byte {
			return nsFrame(t, peerIP6, solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, true)
		}, false},
		{"a probe for another address", func(t *testing.T, _ []byte) []byte { return probeFrame(t, peerIP6, otherNonce) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var failed []error
			r := dadRig(t, func(c *Config) { c.OnDADFailure = func(_ netip.Prefix, err error) { failed = append(failed, err) } })
			nonce := firstProbe(t, r)
			r.h.Input(tt.frame(t, nonce))
			r.clk.Advance(time.Minute)
			err := r.h.WaitDAD(context.Background(), hostIP6)
			if !tt.dup {
				if err != nil || !r.h.HasAddr(hostIP6) || len(failed) != 0 {
					t.Errorf("WaitDAD = %v, HasAddr = %v; want the address held", err, r.h.HasAddr(hostIP6))
				}
				return
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("WaitDAD = %v; want EADDRINUSE", err)
			}
			if len(failed) != 1 || failed[0] != err {
				t.Errorf("OnDADFailure got %v; want the one error %v", failed, err)
			}
			if r.h.HasAddr(hostIP6) || len(r.h.Addrs())+len(r.h.Tentative()) != 0 || len(r.changes) != 0 {
				t.Errorf("duplicate kept: Addrs() = %v, Tentative() = %v, changes %v", r.h.Addrs(), r.h.Tentative(), r.changes)
			}
			if r.sent() != 3 {
				t.Fatalf("the Host sent %d frames; want the report, the probe and a leave", r.sent())
			}
			checkMLDReport(t, r.recv(t), mldChangeToInclude, solicitedNode(hostIP6))
			if s := r.h.Stats(); s.DADFailures != 1 {
				t.Errorf("Stats().DADFailures = %d; want 1", s.DADFailures)
			}
			// The address may be tried again.
			if err := r.h.AddAddr(netip.PrefixFrom(hostIP6, 64)); err != nil {
				t.Errorf("AddAddr after a failed DAD: %v", err)
			}
			if err := r.h.WaitDAD(doneContext(), hostIP6); !errors.Is(err, context.Canceled) {
				t.Errorf("WaitDAD of the new attempt = %v; want it pending", err)
			}
		})
	}
}

func doneContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func probeFrame(t testing.TB, target netip.Addr, nonce []byte) []byte {
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if nonce != nil {
		ns.Options = layers.ICMPv6Options{{Type: ndOptNonce, Data: nonce}}
	}
	group := solicitedNode(target)
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: MulticastMAC(group), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: netip.IPv6Unspecified().AsSlice(), DstIP: group.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)},
		ns)
}

// TestDADAddRemove: AddAddr of a tentative address is EEXIST; removing
// one ends its detection quietly; AddAddrWait returns when it is usable.
func TestDADAddRemove(t *testing.T) {
	r := dadRig(t, nil)
	if err := r.h.AddAddr(netip.PrefixFrom(hostIP6, 64)); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("AddAddr of a tentative address: %v; want EEXIST", err)
	}
	if err := r.h.RemoveAddr(hostIP6); err != nil {
		t.Fatal(err)
	}
	if err := r.h.WaitDAD(context.Background(), hostIP6); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("WaitDAD of a removed address: %v; want EADDRNOTAVAIL", err)
	}
	checkMLDReport(t, r.recv(t), mldChangeToInclude, solicitedNode(hostIP6))
	r.clk.Advance(time.Minute)
	if r.sent() != 2 || len(r.changes) != 0 || len(r.h.Tentative()) != 0 {
		t.Errorf("a removed tentative address went on: %d frames, changes %v", r.sent(), r.changes)
	}
	// IPv4 needs no DAD.
	if err := r.h.AddAddr(netip.PrefixFrom(hostIP4, 24)); err != nil || !r.h.HasAddr(hostIP4) {
		t.Errorf("AddAddr(IPv4) = %v, HasAddr = %v", err, r.h.HasAddr(hostIP4))
	}
	a6 := netip.MustParseAddr("fd77::99")
	done := make(chan error, 1)
	go func() { done <- r.h.AddAddrWait(context.Background(), netip.PrefixFrom(a6, 64)) }()
	for len(r.h.Tentative()) == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 10 && len(done) == 0; i++ {
		r.clk.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	if err := <-done; err != nil || !r.h.HasAddr(a6) {
		t.Errorf("AddAddrWait = %v, HasAddr = %v", err, r.h.HasAddr(a6))
	}
}

// TestDADDeterministic: the probe delay comes from Config.Seed.
func TestDADDeterministic(t *testing.T) {
	delay := func(seed uint64) time.Duration {
		r := newRig(t, func(c *Config) {
			c.NoDAD, c.NoLinkLocal, c.Seed = false, true, seed
			c.Addrs = []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}
		})
		r.h.Announce()
		start := r.clk.Now()
		for r.h.Stats().DADProbes == 0 {
			if !r.clk.AdvanceToNext() {
				t.Fatal("no probe scheduled")
			}
		}
		return r.clk.Now().Sub(start)
	}
	d1, d2, d3 := delay(1), delay(1), delay(2)
	if d1 != d2 || d1 == d3 || d1 >= DADDelay || d3 >= DADDelay {
		t.Errorf("probe delays %v, %v (seed 1) and %v (seed 2); want equal for one seed, below %v", d1, d2, d3, DADDelay)
	}
}
