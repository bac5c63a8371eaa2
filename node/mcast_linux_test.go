package node

import (
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
)

// TestMulticastOnASnoopingBridge: two softroce nodes on TAPs of a bridge
// with multicast snooping and a querier (IGMP and MLD), in a fresh
// namespace. The receiver attaches two UD QPs to the group and joins it:
// the bridge learns the group on its port from the IGMP or MLDv2 report
// (`bridge mdb show`), the sender's UD multicast SEND (to the group's MAC,
// 01:00:5e or 33:33) reaches both QPs, and tshark finds in the receiver's
// capture the join, the SEND decoded as RoCE, and the leave, none
// malformed; after the leave the bridge forgets the port. (The bridge's
// querier speaks IGMPv2: once the node heard it, its IPv4 reports are
// IGMPv2 too, as a kernel host's are.)
func TestMulticastOnASnoopingBridge(t *testing.T) {
	testenv.RequireRoot(t)
	tshark := testutil.Tshark(t)
	for _, tt := range []struct {
		group    netip.Addr
		src, dst netip.Addr
	}{
		{netip.MustParseAddr("239.1.2.3"), brA, brB},
		{netip.MustParseAddr("ff0e::4791"), brA6, brB6},
	} {
		t.Run(tt.group.String(), func(t *testing.T) {
			ns := testenv.NewNetNS(t)
			ns.Run(t, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "1", "mcast_querier", "1")
			ns.Run(t, "ip", "addr", "add", "10.78.0.1/24", "dev", "br0")
			ns.Run(t, "ip", "addr", "add", "fd78::1/64", "dev", "br0", "nodad")
			ns.Run(t, "ip", "link", "set", "br0", "up")
			group := tt.group
			pcapB := filepath.Join(t.TempDir(), "b.pcap")
			a := bridgeNode(t, ns, "softroce0", "srm0", macA, []netip.Addr{tt.src}, "")
			b := bridgeNode(t, ns, "softroce1", "srm1", macB, []netip.Addr{tt.dst}, pcapB)

			sender := newUDEnd(t, a, mcastQKey)
			m1, m2 := newUDEnd(t, b, mcastQKey), newUDEnd(t, b, mcastQKey)
			gid := emu.GIDFromAddr(group)
			for _, e := range []*udEnd{m1, m2} {
				if err := e.qp.AttachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.JoinMulticast(group); err != nil {
				t.Fatal(err)
			}
			entry := "port srm1 grp " + group.String()
			mdbHas := func(present bool) string {
				var out string
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					o, err := ns.Command("bridge", "mdb", "show", "dev", "br0").CombinedOutput()
					if err != nil {
						t.Fatalf("bridge mdb show: %v\n%s", err, o)
					}
					if out = string(o); strings.Contains(out, entry) == present {
						break
					}
				}
				return out
			}
			if out := mdbHas(true); !strings.Contains(out, entry) {
				t.Fatalf("the bridge did not learn %v on srm1:\n%s", group, out)
			}
			msg := []byte("multicast over a bridge")
			sender.sendMcast(t, tt.src, group, msg)
			m1.received(t, msg, sender.qp.QPNum())
			m2.received(t, msg, sender.qp.QPNum())
			for _, e := range []*udEnd{m1, m2} {
				if err := e.qp.DetachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.LeaveMulticast(group); err != nil {
				t.Fatal(err)
			}
			if out := mdbHas(false); strings.Contains(out, entry) {
				t.Errorf("the bridge still has %v on srm1 after the leave:\n%s", group, out)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			seen := captureEvents(t, tshark, pcapB, group)
			if strings.Join(seen, " ") != "join send leave" {
				t.Errorf("tshark saw %v in the receiver's capture, want join send leave", seen)
			}
		})
	}
}

// captureEvents reads a capture with tshark and returns, in order, the
// joins and leaves of group it holds (an IGMPv3 or MLDv2 record TO_EX or
// TO_IN, an IGMPv2 report or leave) and the RoCE UD SENDs to the group's
// MAC and QPN 0xFFFFFF ("send"), repeats folded (answers to the querier
// repeat a join). A malformed frame fails t.
func captureEvents(t *testing.T, tshark, path string, group netip.Addr) []string {
	t.Helper()
	mac := emu.MulticastMAC(emu.GIDFromAddr(group))
	want := net.HardwareAddr(mac[:]).String() // as tshark prints it
	out, err := exec.Command(tshark, "-r", path, "-Y", "igmp || icmpv6.type == 143 || infiniband", "-T", "fields",
		"-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "eth.dst", "-e", "frame.protocols", "-e", "igmp.type", "-e", "igmp.record_type", "-e", "igmp.maddr",
		"-e", "icmpv6.mldr.mar.record_type", "-e", "icmpv6.mldr.mar.multicast_address",
		"-e", "infiniband.bth.destqp", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := append(strings.Split(line, "\t"), make([]string, 9)...)[:9] // tshark drops empty trailing fields
		if f[8] != "" {
			t.Errorf("malformed in tshark: %q", line)
		}
		// The record type of group in a report: zip the record types
		// with the addresses (an IGMPv2 message has no records).
		recType := func(types, addrs string) string {
			ts, as := strings.Split(types, ","), strings.Split(addrs, ",")
			for i, a := range as {
				if a == group.String() && i < len(ts) {
					return ts[i]
				}
			}
			return ""
		}
		switch {
		case strings.HasSuffix(f[1], ":igmp") && f[2] == "0x16" && f[4] == group.String():
			seen = append(seen, "join")
		case strings.HasSuffix(f[1], ":igmp") && f[2] == "0x17" && f[4] == group.String():
			seen = append(seen, "leave")
		case strings.HasSuffix(f[1], ":igmp") && recType(f[3], f[4]) == "4", strings.Contains(f[1], "icmpv6") && recType(f[5], f[6]) == "4":
			seen = append(seen, "join")
		case strings.HasSuffix(f[1], ":igmp") && recType(f[3], f[4]) == "3", strings.Contains(f[1], "icmpv6") && recType(f[5], f[6]) == "3":
			seen = append(seen, "leave")
		case strings.Contains(f[1], "infiniband") && f[0] == want && f[7] == "0xffffff":
			seen = append(seen, "send")
		}
	}
	return slices.Compact(seen)
}
