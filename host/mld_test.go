package host

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// checkMLDReport fails t unless p is an MLDv2 report, sent as RFC 3810
// §5.2 asks (to ff02::16, hop limit 1, router alert), whose records are
// of type typ for groups, in order.
func checkMLDReport(t *testing.T, p gopacket.Packet, typ uint8, groups ...netip.Addr) {
	t.Helper()
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ip == nil || icmp == nil || icmp.TypeCode.Type() != icmpv6MLDv2Report {
		t.Fatalf("not an MLDv2 report: %s", p.Dump())
	}
	if !bytes.Equal(eth.DstMAC, MulticastMAC(allMLDv2Routers)) || !bytes.Equal(ip.DstIP, allMLDv2Routers.AsSlice()) || ip.HopLimit != 1 {
		t.Errorf("report to %v (%v) hop limit %d; want ff02::16, 1", ip.DstIP, eth.DstMAC, ip.HopLimit)
	}
	src, _ := netip.AddrFromSlice(ip.SrcIP)
	if !src.IsUnspecified() && !src.IsLinkLocalUnicast() {
		t.Errorf("report from %v; want the link-local address or ::", src)
	}
	ra := false
	if ip.HopByHop != nil {
		for _, o := range ip.HopByHop.Options {
			ra = ra || o.OptionType == mldRouterAlertOption && bytes.Equal(o.OptionData, []byte{0, 0})
		}
	}
	if !ra {
		t.Error("report without the MLD router alert option")
	}
	msg := append(bytes.Clone(icmp.Contents), icmp.Payload...)
	pseudo := append(append(bytes.Clone(ip.SrcIP), ip.DstIP...), 0, 0, byte(len(msg)>>8), byte(len(msg)), 0, 0, 0, 58)
	if s := checksum16(msg, uint32(checksum16(pseudo, 0))); s != 0xffff {
		t.Errorf("MLD report checksum does not verify (sum %#x)", s)
	}
	body := icmp.Payload
	if len(body) < 4 || int(binary.BigEndian.Uint16(body[2:])) != len(groups) || len(body) != 4+20*len(groups) {
		t.Fatalf("report body %x; want %d records without sources", body, len(groups))
	}
	for i, g := range groups {
		rec := body[4+20*i:]
		if rec[0] != typ || rec[1] != 0 || rec[2] != 0 || rec[3] != 0 || !bytes.Equal(rec[4:20], g.AsSlice()) {
			t.Errorf("record %d: %x; want type %d for %v, no sources", i, rec[:20], typ, g)
		}
	}
}

func queryFrame(t testing.TB, dst, group netip.Addr, maxResp uint16, v2 bool) []byte {
	body := make([]byte, 20, 24)
	binary.BigEndian.PutUint16(body, maxResp)
	copy(body[4:], group.AsSlice())
	if v2 {
		body = append(body, 2, 125, 0, 0) // QRV 2, QQIC 125, no sources
	}
	hbh := &layers.IPv6HopByHop{Options: []*layers.IPv6HopByHopOption{
		{OptionType: mldRouterAlertOption, OptionLength: 2, OptionData: []byte{0, 0}},
		{OptionType: 1, OptionLength: 0, OptionData: []byte{}}}}
	hbh.NextHeader = layers.IPProtocolICMPv6
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: MulticastMAC(dst), EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 1, SrcIP: peerLL.AsSlice(), DstIP: dst.AsSlice(), HopByHop: hbh},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(icmpv6MLDQuery, 0)},
		gopacket.Payload(body))
}

// TestMLDQueries: queries get reports after a random delay below their
// maximum response delay: a general query covers every solicited-node
// group, a group-specific one its group only; other groups' queries and
// invalid ones get nothing.
func TestMLDQueries(t *testing.T) {
	// The link-local address and hostIP6 share their last 24 bits: one
	// solicited-node group, reported once.
	if solicitedNode(LinkLocal(hostMAC)) != solicitedNode(hostIP6) {
		t.Fatal("test addresses changed: fix the expected groups")
	}
	all := []netip.Addr{solicitedNode(hostIP6)}
	for _, tt := range []struct {
		name   string
		frame  func(testing.TB) []byte
		max    time.Duration
		groups []netip.Addr // nil: no answer
	}{
		{"general v2", func(t testing.TB) []byte { return queryFrame(t, allNodes, netip.IPv6Unspecified(), 10000, true) }, 10 * time.Second, all},
		{"general v1", func(t testing.TB) []byte { return queryFrame(t, allNodes, netip.IPv6Unspecified(), 10000, false) }, 10 * time.Second, all},
		{"general v2, exponential code", func(t testing.TB) []byte {
			return queryFrame(t, allNodes, netip.IPv6Unspecified(), 0x8000|1<<12|0x10, true)
		}, (0x1010 << 4) * time.Millisecond, all},
		{"group-specific", func(t testing.TB) []byte {
			g := solicitedNode(hostIP6)
			return queryFrame(t, g, g, 1000, true)
		}, time.Second, []netip.Addr{solicitedNode(hostIP6)}},
		{"another group", func(t testing.TB) []byte {
			return queryFrame(t, allNodes, netip.MustParseAddr("ff02::1:ff99:9999"), 1000, true)
		}, time.Second, nil},
		{"hop limit 2", func(t testing.TB) []byte {
			f := queryFrame(t, allNodes, netip.IPv6Unspecified(), 1000, true)
			f[14+7] = 2
			return f
		}, time.Second, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Addrs = []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}; c.Seed = 3 })
			r.h.Input(tt.frame(t))
			start := r.clk.Now()
			for r.sent() == 0 && r.clk.AdvanceToNext() {
			}
			if tt.groups == nil {
				if r.sent() != 0 {
					t.Errorf("answered: %s", r.recv(t).Dump())
				}
				return
			}
			if r.sent() != 1 {
				t.Fatalf("no report (%d frames), stats %+v", r.sent(), r.h.Stats())
			}
			if d := r.clk.Now().Sub(start); d >= tt.max {
				t.Errorf("report after %v; want within %v", d, tt.max)
			}
			checkMLDReport(t, r.recv(t), mldModeIsExclude, tt.groups...)
			// A second query while a report is pending is not answered twice.
			r.h.Input(tt.frame(t))
			r.h.Input(tt.frame(t))
			r.clk.Advance(tt.max)
			if r.sent() != 2 {
				t.Errorf("%d frames after two more queries; want one more report", r.sent())
			}
		})
	}
}

// TestMLDJoinLeave: adding an address reports the join of its
// solicited-node group, removing it the leave, unless another address
// shares the group; the MAC filter follows.
func TestMLDJoinLeave(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Addrs = nil; c.NoLinkLocal = true })
	a1, a2 := netip.MustParsePrefix("fd77::1:2/64"), netip.MustParsePrefix("fd78::1:2/64") // one solicited-node group
	g := solicitedNode(a1.Addr())
	r.h.AddAddr(a1)
	checkMLDReport(t, r.recv(t), mldChangeToExclude, g)
	r.recv(t) // the unsolicited NA
	r.h.AddAddr(a2)
	r.recv(t) // its NA: the group was already joined
	r.h.RemoveAddr(a1.Addr())
	if r.sent() != 3 || !r.h.acceptsMAC(MulticastMAC(g)) {
		t.Errorf("removing one of two addresses of a group: %d frames sent, group filter %v; want 3, still joined", r.sent(), r.h.acceptsMAC(MulticastMAC(g)))
	}
	r.h.RemoveAddr(a2.Addr())
	checkMLDReport(t, r.recv(t), mldChangeToInclude, g)
	if r.h.acceptsMAC(MulticastMAC(g)) {
		t.Error("the group's MAC is still accepted")
	}
	if s := r.h.Stats(); s.MLDReports != 2 {
		t.Errorf("Stats().MLDReports = %d; want 2", s.MLDReports)
	}
}
