package node

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
)

// TestMulticastOnASnoopingBridge: two softroce nodes on TAPs of a bridge
// with IGMP snooping and a querier, in a fresh namespace. The receiver
// attaches two UD QPs to 239.1.2.3 and joins the group: the bridge learns
// the group on its port from the IGMPv3 report (`bridge mdb show`), the
// sender's UD multicast SEND (to 01:00:5e:01:02:03) reaches both QPs, and
// tshark finds in the receiver's capture the join, the SEND decoded as
// RoCE, and the leave, none malformed; after the leave the bridge forgets
// the port.
func TestMulticastOnASnoopingBridge(t *testing.T) {
	testenv.RequireRoot(t)
	tshark := testutil.Tshark(t)
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "1", "mcast_querier", "1")
	ns.Run(t, "ip", "addr", "add", "10.78.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	group := netip.MustParseAddr("239.1.2.3")
	pcapB := filepath.Join(t.TempDir(), "b.pcap")
	a := bridgeNode(t, ns, "softroce0", "srm0", macA, []netip.Addr{brA}, "")
	b := bridgeNode(t, ns, "softroce1", "srm1", macB, []netip.Addr{brB}, pcapB)

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
	mdbHas := func(present bool) string {
		var out string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			o, err := ns.Command("bridge", "mdb", "show", "dev", "br0").CombinedOutput()
			if err != nil {
				t.Fatalf("bridge mdb show: %v\n%s", err, o)
			}
			if out = string(o); strings.Contains(out, "port srm1 grp "+group.String()) == present {
				break
			}
		}
		return out
	}
	if out := mdbHas(true); !strings.Contains(out, "port srm1 grp "+group.String()) {
		t.Fatalf("the bridge did not learn %v on srm1:\n%s", group, out)
	}
	msg := []byte("multicast over a bridge")
	sender.sendMcast(t, brA, group, msg)
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
	if out := mdbHas(false); strings.Contains(out, "port srm1 grp "+group.String()) {
		t.Errorf("the bridge still has %v on srm1 after the leave:\n%s", group, out)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(tshark, "-r", pcapB, "-Y", "igmp || infiniband", "-T", "fields", "-E", "occurrence=a",
		"-e", "eth.dst", "-e", "frame.protocols", "-e", "igmp.type", "-e", "igmp.record_type", "-e", "igmp.maddr",
		"-e", "infiniband.bth.destqp", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := append(strings.Split(line, "\t"), make([]string, 7)...)[:7] // tshark drops empty trailing fields
		if f[6] != "" {
			t.Errorf("malformed in tshark: %q", line)
		}
		switch {
		case strings.HasSuffix(f[1], ":igmp") && f[4] == group.String() && f[3] == "4":
			seen = append(seen, "join")
		case strings.HasSuffix(f[1], ":igmp") && f[4] == group.String() && f[3] == "3":
			seen = append(seen, "leave")
		case strings.Contains(f[1], "infiniband") && f[0] == "01:00:5e:01:02:03" && f[5] == "0xffffff":
			seen = append(seen, "send")
		}
	}
	if strings.Join(seen, " ") != "join send leave" {
		t.Errorf("tshark saw %v in the receiver's capture, want join send leave:\n%s", seen, out)
	}
}
