package host

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link/pcap"
)

var group4 = netip.MustParseAddr("239.1.2.3")

// checkIGMP fails t unless p is an IGMP message as the kernel sends it
// (to dst and its multicast MAC, from the Host's IPv4 address, TTL 1, TOS
// 0xc0, DF, router alert, valid checksums) and returns its body.
func checkIGMP(t *testing.T, p gopacket.Packet, dst netip.Addr) []byte {
	t.Helper()
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil || ip.Protocol != layers.IPProtocolIGMP {
		t.Fatalf("not IGMP: %s", p.Dump())
	}
	if !bytes.Equal(eth.DstMAC, MulticastMAC(dst)) || !bytes.Equal(ip.DstIP.To4(), dst.AsSlice()) {
		t.Errorf("IGMP to %v (%v), want %v (%v)", ip.DstIP, eth.DstMAC, dst, MulticastMAC(dst))
	}
	if !bytes.Equal(ip.SrcIP.To4(), hostIP4.AsSlice()) || ip.TTL != 1 || ip.TOS != 0xc0 || ip.Flags&layers.IPv4DontFragment == 0 {
		t.Errorf("IGMP from %v TTL %d TOS %#x flags %v", ip.SrcIP, ip.TTL, ip.TOS, ip.Flags)
	}
	if len(ip.Options) == 0 || ip.Options[0].OptionType != 0x94 || ip.IHL != 6 {
		t.Errorf("no router alert option: IHL %d options %+v", ip.IHL, ip.Options)
	}
	if !validIPv4Checksum(ip.Contents) {
		t.Error("IPv4 header checksum does not verify")
	}
	if checksum(ip.Payload) != 0xffff {
		t.Errorf("IGMP checksum does not verify: %x", ip.Payload)
	}
	return ip.Payload
}

func igmpV3Records(t *testing.T, body []byte) (typ []uint8, groups []netip.Addr) {
	t.Helper()
	if body[0] != igmpV3Report || len(body) != 8+8*int(binary.BigEndian.Uint16(body[6:])) {
		t.Fatalf("not an IGMPv3 report of records without sources: %x", body)
	}
	for r := body[8:]; len(r) >= 8; r = r[8:] {
		if r[1] != 0 || r[2] != 0 || r[3] != 0 {
			t.Errorf("record %x has aux data or sources", r[:8])
		}
		typ = append(typ, r[0])
		groups = append(groups, netip.AddrFrom4([4]byte(r[4:8])))
	}
	return typ, groups
}

// TestJoinIPGroupIGMPv3: the first join of an IPv4 group sends an IGMPv3
// TO_EX{} record to 224.0.0.22 and opens the MAC filter; a second join
// sends nothing; the last leave sends TO_IN{} and closes the filter.
func TestJoinIPGroupIGMPv3(t *testing.T) {
	r := newRig(t, nil)
	if err := r.h.JoinIPGroup(group4); err != nil {
		t.Fatal(err)
	}
	typ, gs := igmpV3Records(t, checkIGMP(t, r.recv(t), allIGMPv3Rtr))
	if len(typ) != 1 || typ[0] != igmpChangeToExclude || gs[0] != group4 {
		t.Errorf("join report: types %v groups %v", typ, gs)
	}
	if !r.h.acceptsMAC(MulticastMAC(group4)) || !r.h.acceptsIP(group4) {
		t.Error("the group's frames are not accepted after the join")
	}
	if err := r.h.JoinIPGroup(netip.AddrFrom16(group4.As16())); err != nil { // IPv4-mapped: the same group
		t.Fatal(err)
	}
	if r.sent() != 1 {
		t.Errorf("a second join sent %d frames", r.sent()-1)
	}
	if g := r.h.IPGroups(); len(g) != 1 || g[0] != group4 {
		t.Errorf("IPGroups() = %v", g)
	}
	if err := r.h.LeaveIPGroup(group4); err != nil {
		t.Fatal(err)
	}
	if r.sent() != 1 || !r.h.acceptsIP(group4) {
		t.Error("the first of two leaves left the group")
	}
	if err := r.h.LeaveIPGroup(group4); err != nil {
		t.Fatal(err)
	}
	typ, gs = igmpV3Records(t, checkIGMP(t, r.recv(t), allIGMPv3Rtr))
	if len(typ) != 1 || typ[0] != igmpChangeToInclude || gs[0] != group4 {
		t.Errorf("leave report: types %v groups %v", typ, gs)
	}
	if r.h.acceptsMAC(MulticastMAC(group4)) || r.h.acceptsIP(group4) {
		t.Error("the group's frames are still accepted after the leave")
	}
	if err := r.h.LeaveIPGroup(group4); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("third leave: %v, want EADDRNOTAVAIL", err)
	}
	if err := r.h.JoinIPGroup(hostIP4); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join of a unicast address: %v, want EINVAL", err)
	}
	if s := r.h.Stats(); s.IGMPReports != 2 {
		t.Errorf("IGMPReports = %d, want 2", s.IGMPReports)
	}
}

// TestJoinIPGroupIGMPv2: with IGMP version 2 a join is a membership
// report to the group itself and a leave goes to 224.0.0.2.
func TestJoinIPGroupIGMPv2(t *testing.T) {
	r := newRig(t, func(c *Config) { c.IGMPVersion = 2 })
	if err := r.h.JoinIPGroup(group4); err != nil {
		t.Fatal(err)
	}
	b := checkIGMP(t, r.recv(t), group4)
	if len(b) != 8 || b[0] != igmpV2Report || b[1] != 0 || netip.AddrFrom4([4]byte(b[4:8])) != group4 {
		t.Errorf("v2 report %x", b)
	}
	if err := r.h.LeaveIPGroup(group4); err != nil {
		t.Fatal(err)
	}
	b = checkIGMP(t, r.recv(t), allRouters)
	if len(b) != 8 || b[0] != igmpV2Leave || netip.AddrFrom4([4]byte(b[4:8])) != group4 {
		t.Errorf("v2 leave %x", b)
	}
	if _, err := New(r.hostEnd, Config{MAC: hostMAC, IGMPVersion: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IGMP version 1: %v, want EINVAL", err)
	}
}

// TestJoinIPGroupMLD: an IPv6 group is joined with an MLDv2 TO_EX{} and
// left with TO_IN{}, and general queries then cover it.
func TestJoinIPGroupMLD(t *testing.T) {
	g := netip.MustParseAddr("ff0e::4791")
	r := newRig(t, func(c *Config) { c.Addrs = []netip.Prefix{netip.PrefixFrom(hostIP6, 64)}; c.Seed = 5 })
	if err := r.h.JoinIPGroup(g); err != nil {
		t.Fatal(err)
	}
	checkMLDReport(t, r.recv(t), mldChangeToExclude, g)
	r.h.Input(queryFrame(t, allNodes, netip.IPv6Unspecified(), 1000, true))
	for r.sent() == 1 && r.clk.AdvanceToNext() {
	}
	p := r.recv(t)
	icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if !bytes.Contains(icmp.Payload, g.AsSlice()) {
		t.Errorf("general query's answer does not list %v: %x", g, icmp.Payload)
	}
	if err := r.h.LeaveIPGroup(g); err != nil {
		t.Fatal(err)
	}
	checkMLDReport(t, r.recv(t), mldChangeToInclude, g)
}

func igmpQueryFrame(t testing.TB, dst, group netip.Addr, code uint8, v3 bool) []byte {
	body := make([]byte, 8, 12)
	body[0], body[1] = igmpQuery, code
	copy(body[4:], group.AsSlice())
	if v3 {
		body = append(body, 2, 125, 0, 0)
	}
	binary.BigEndian.PutUint16(body[2:], ^checksum(body))
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: MulticastMAC(dst), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 1, Protocol: layers.IPProtocolIGMP, SrcIP: peerIP4.AsSlice(), DstIP: dst.AsSlice()},
		gopacket.Payload(body))
}

// TestIGMPQueries: general and group-specific queries (v2 and v3) get a
// current-state report of the joined groups after a random delay below
// the maximum response time; a query for another group, or one with a
// bad checksum, gets nothing.
func TestIGMPQueries(t *testing.T) {
	other := netip.MustParseAddr("239.9.9.9")
	for _, tt := range []struct {
		name   string
		frame  func(testing.TB) []byte
		max    time.Duration
		groups []netip.Addr
	}{
		{"general v3", func(t testing.TB) []byte { return igmpQueryFrame(t, allHosts, netip.IPv4Unspecified(), 100, true) }, 10 * time.Second, []netip.Addr{group4, other}},
		{"general v2", func(t testing.TB) []byte { return igmpQueryFrame(t, allHosts, netip.IPv4Unspecified(), 20, false) }, 2 * time.Second, []netip.Addr{group4, other}},
		{"general v3, exponential code", func(t testing.TB) []byte {
			return igmpQueryFrame(t, allHosts, netip.IPv4Unspecified(), 0x80|1<<4|2, true)
		}, (0x12 << 4) * 100 * time.Millisecond, []netip.Addr{group4, other}},
		{"group-specific", func(t testing.TB) []byte { return igmpQueryFrame(t, group4, group4, 10, true) }, time.Second, []netip.Addr{group4}},
		{"unjoined group", func(t testing.TB) []byte {
			g := netip.MustParseAddr("239.7.7.7")
			return igmpQueryFrame(t, allHosts, g, 10, true)
		}, time.Second, nil},
		{"bad checksum", func(t testing.TB) []byte {
			f := igmpQueryFrame(t, allHosts, netip.IPv4Unspecified(), 10, true)
			f[14+20+11] ^= 1 // the last byte of the query (the frame is padded to 60)
			return f
		}, time.Second, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Seed = 7 })
			r.h.JoinIPGroup(group4)
			r.h.JoinIPGroup(other)
			r.recv(t)
			r.recv(t)
			base := r.sent()
			r.h.Input(tt.frame(t))
			start := r.clk.Now()
			for r.sent() == base && r.clk.AdvanceToNext() {
			}
			if tt.groups == nil {
				if r.sent() != base {
					t.Errorf("answered: %s", r.recv(t).Dump())
				}
				return
			}
			if d := r.clk.Now().Sub(start); r.sent() != base+1 || d >= tt.max {
				t.Fatalf("%d reports after %v; want one within %v (stats %+v)", r.sent()-base, d, tt.max, r.h.Stats())
			}
			typ, gs := igmpV3Records(t, checkIGMP(t, r.recv(t), allIGMPv3Rtr))
			if len(gs) != len(tt.groups) {
				t.Fatalf("report of %v, want %v", gs, tt.groups)
			}
			for i := range gs {
				if typ[i] != igmpModeIsExclude || gs[i] != tt.groups[i] {
					t.Errorf("record %d: type %d group %v, want IS_EX %v", i, typ[i], gs[i], tt.groups[i])
				}
			}
		})
	}
}

// TestIGMPInTshark: Wireshark dissects the Host's IGMPv3 and IGMPv2
// messages as such, with good checksums.
func TestIGMPInTshark(t *testing.T) {
	tshark := testutil.Tshark(t)
	for _, tt := range []struct {
		version int
		want    string
	}{
		{3, "3\t0x22\t1\t1\t\n3\t0x22\t1\t1\t\n"},
		{2, "2\t0x16\t1\t1\t\n2\t0x17\t1\t1\t\n"},
	} {
		path := filepath.Join(t.TempDir(), "igmp.pcap")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		r := newRig(t, func(c *Config) { c.IGMPVersion = tt.version })
		c, err := pcap.New(r.hostEnd, f, r.clk)
		if err != nil {
			t.Fatal(err)
		}
		r.h.l = c
		r.h.JoinIPGroup(group4)
		r.h.LeaveIPGroup(group4)
		f.Close()
		out, err := exec.Command(tshark, "-r", path, "-o", "ip.check_checksum:TRUE", "-T", "fields",
			"-e", "igmp.version", "-e", "igmp.type", "-e", "igmp.checksum.status", "-e", "ip.checksum.status", "-e", "_ws.malformed").Output()
		if err != nil {
			t.Fatalf("tshark: %v\n%s", err, out)
		}
		if got := strings.ReplaceAll(string(out), "0x00000022", "0x22"); got != tt.want {
			t.Errorf("IGMPv%d in tshark:\n%s\nwant\n%s", tt.version, out, tt.want)
		}
	}
}
