package node

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/wire"
)

var (
	udpA  = netip.MustParseAddr("10.79.0.1")
	udpB  = netip.MustParseAddr("10.79.0.2")
	udpA6 = netip.MustParseAddr("fd79::1")
	udpB6 = netip.MustParseAddr("fd79::2")
)

// vethPair makes two namespaces joined by a veth, with a's addresses on
// one end and b's on the other.
func vethPair(t *testing.T, a, b []netip.Addr) (*testenv.NetNS, *testenv.NetNS) {
	t.Helper()
	na, nb := testenv.NewNetNS(t), testenv.NewNetNS(t)
	na.Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", "netns", nb.Name)
	for _, x := range []struct {
		ns    *testenv.NetNS
		dev   string
		addrs []netip.Addr
	}{{na, "ve0", a}, {nb, "ve1", b}} {
		for _, ip := range x.addrs {
			p := ip.String() + "/24"
			args := []string{"addr", "add", p, "dev", x.dev}
			if ip.Is6() {
				args = []string{"addr", "add", ip.String() + "/64", "dev", x.dev, "nodad"}
			}
			x.ns.Run(t, "ip", args...)
		}
		x.ns.Run(t, "ip", "link", "set", x.dev, "up")
	}
	return na, nb
}

// udpNodeIn starts a node on a UDP link bound to addrs (all of the
// namespace's addresses when empty).
func udpNodeIn(t *testing.T, ns *testenv.NetNS, name string, addrs []netip.Addr) *Node {
	t.Helper()
	var n *Node
	err := ns.Do(func() error {
		l, err := OpenUDP(addrs, 0)
		if err != nil {
			return err
		}
		n, err = New(context.Background(), Config{Name: name, Link: l, Seed: uint64(len(name))})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestNodesOverUDP: two nodes in two namespaces on UDP links, one bound to
// its addresses, the other to all of its namespace's, run RC SEND and
// WRITE over IPv4 and IPv6 with the data checked; the receiver counts no
// unverifiable ICRC (both ends send identification 0 with DF).
func TestNodesOverUDP(t *testing.T) {
	na, nb := vethPair(t, []netip.Addr{udpA, udpA6}, []netip.Addr{udpB, udpB6})
	a := udpNodeIn(t, na, "softroce0", []netip.Addr{udpA, udpA6})
	b := udpNodeIn(t, nb, "softroce1", nil)
	if b.Host() != nil {
		t.Error("a node on a UDP link has a host stack")
	}
	for _, tc := range []struct {
		name   string
		ia, ib netip.Addr
	}{{"RC IPv4", udpA, udpB}, {"RC IPv6", udpA6, udpB6}} {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := connectRC(t, a, b, tc.ia, tc.ib)
			for _, size := range []int{1, 1024, 4000, bufSize} {
				sendRecv(t, ea, eb, size, byte(size))
				sendRecv(t, eb, ea, size, byte(size+1))
				write(t, ea, eb, size, 0, byte(size+2))
				write(t, eb, ea, size/2, 7, byte(size+3))
			}
		})
	}
	for _, n := range []*Node{a, b} {
		s := n.Stats().UDP
		if s.RxFrames == 0 || s.TxFrames == 0 || s.Unverifiable != 0 || s.TxErrors != 0 {
			t.Errorf("%s: UDP stats %+v: want traffic both ways, nothing unverifiable, no errors", n.Name(), s)
		}
		c := counters(t, n)
		if c["softroce_icrc_err"] != 0 {
			t.Errorf("%s: %d ICRC errors", n.Name(), c["softroce_icrc_err"])
		}
	}
}

// TestUDPNodeGIDsFollowTheHostsAddresses: a node bound to all addresses
// gets a GID for an address added with `ip addr add` and loses it with
// `ip addr del`; a node bound to its own addresses has exactly those.
func TestUDPNodeGIDsFollowTheHostsAddresses(t *testing.T) {
	na, nb := vethPair(t, []netip.Addr{udpA}, []netip.Addr{udpB})
	a := udpNodeIn(t, na, "softroce0", []netip.Addr{udpA})
	b := udpNodeIn(t, nb, "softroce1", nil)
	if _, err := a.GID(udpA); err != nil {
		t.Errorf("bound node: GID of %v: %v", udpA, err)
	}
	if _, err := a.GID(udpB); err == nil {
		t.Errorf("bound node has a GID for %v, an address it does not bind", udpB)
	}
	if _, err := b.GID(udpB); err != nil {
		t.Errorf("wildcard node: GID of %v: %v", udpB, err)
	}
	if _, err := b.GID(netip.MustParseAddr("127.0.0.1")); err == nil {
		t.Error("wildcard node has a GID for the loopback address")
	}
	waitGID := func(ip netip.Addr, want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := b.GID(ip)
			if (err == nil) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GID of %v after 5s: %v, want present=%v", ip, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	extra := netip.MustParseAddr("10.79.0.22")
	nb.Run(t, "ip", "addr", "add", "10.79.0.22/24", "dev", "ve1")
	waitGID(extra, true)
	nb.Run(t, "ip", "addr", "del", "10.79.0.22/24", "dev", "ve1")
	waitGID(extra, false)
	if err := b.AddAddr(t.Context(), netip.MustParsePrefix("10.79.0.23/24")); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("AddAddr on a UDP link: %v, want EOPNOTSUPP", err)
	}
}

// TestMulticastOverUDP: on UDP links the node's multicast membership is
// the link socket's. Two QPs of a node bound to all addresses attach to
// 239.1.2.3 (its socket joins the group, and the kernel reports it), and
// a UD multicast SEND from a node in another namespace reaches both; the
// last detach drops the membership, after which nothing arrives. A link
// bound to its own addresses cannot join.
func TestMulticastOverUDP(t *testing.T) {
	testenv.RequireRoot(t)
	na, nb := vethPair(t, []netip.Addr{udpA}, []netip.Addr{udpB})
	na.Run(t, "ip", "route", "add", "224.0.0.0/4", "dev", "ve0")
	nb.Run(t, "ip", "route", "add", "224.0.0.0/4", "dev", "ve1")
	a := udpNodeIn(t, na, "softroce0", []netip.Addr{udpA})
	b := udpNodeIn(t, nb, "softroce1", nil)
	group := netip.MustParseAddr("239.1.2.3")
	if err := a.JoinMulticast(group); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("join on a link bound to its addresses: %v, want EOPNOTSUPP", err)
	}
	sender := newUDEnd(t, a, mcastQKey)
	m1, m2 := newUDEnd(t, b, mcastQKey), newUDEnd(t, b, mcastQKey)
	gid := emu.GIDFromAddr(group)
	for _, e := range []*udEnd{m1, m2} {
		if err := e.qp.AttachMcast(gid, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.JoinMulticast(group); err != nil { // rdma_cm's join on top: counted, no second socket join
		t.Fatal(err)
	}
	out := nb.Run(t, "ip", "maddr", "show", "dev", "ve1")
	if !strings.Contains(out, group.String()) {
		t.Errorf("the kernel has no membership of %v on ve1:\n%s", group, out)
	}
	sender.sendMcast(t, udpA, group, []byte("multicast over UDP"))
	m1.received(t, []byte("multicast over UDP"), sender.qp.QPNum())
	m2.received(t, []byte("multicast over UDP"), sender.qp.QPNum())
	for _, e := range []*udEnd{m1, m2} {
		if err := e.qp.DetachMcast(gid, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if out := nb.Run(t, "ip", "maddr", "show", "dev", "ve1"); strings.Contains(out, group.String()) {
		t.Errorf("the kernel still has a membership of %v on ve1:\n%s", group, out)
	}
	if err := b.LeaveMulticast(group); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Errorf("a leave too many: %v, want EADDRNOTAVAIL", err)
	}
}

// TestUDPFramesCarryTheQPsTrafficClassAndHopLimit: the QP's path (its
// GRH's traffic class and hop limit, as ibv_modify_qp gives them) reaches
// the wire through the UDP socket: a capture on the veth shows every frame
// one end sends with IPv4 TOS or IPv6 traffic class 0xb8 (DSCP 46, ECN 0)
// and TTL or hop limit 9, the other end's with 0 and 64, over IPv4 and
// IPv6, every frame's ICRC verifying.
func TestUDPFramesCarryTheQPsTrafficClassAndHopLimit(t *testing.T) {
	na, nb := vethPair(t, []netip.Addr{udpA, udpA6}, []netip.Addr{udpB, udpB6})
	a := udpNodeIn(t, na, "softroce0", []netip.Addr{udpA, udpA6})
	b := udpNodeIn(t, nb, "softroce1", []netip.Addr{udpB, udpB6})
	var fd int
	err := nb.Do(func() error {
		ifi, err := net.InterfaceByName("ve1")
		if err != nil {
			return err
		}
		all := uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(all)); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000})
	for _, fam := range []struct {
		name   string
		ia, ib netip.Addr
	}{{"IPv4", udpA, udpB}, {"IPv6", udpA6, udpB6}} {
		t.Run(fam.name, func(t *testing.T) {
			ea, eb := newEnd(t, a, fam.ia), newEnd(t, b, fam.ib)
			ea.hopLimit, ea.tclass = 9, 0xb8
			ea.connect(t, eb)
			eb.connect(t, ea)
			write(t, ea, eb, 4000, 0, 5)
			var fromA, fromB int
			buf := make([]byte, 9000)
			for {
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					break // quiet for 300 ms: all captured
				}
				f := buf[:n]
				pk, err := wire.Parse(f)
				if err != nil || pk.Src().Is4() != fam.ia.Is4() {
					continue // ND, ARP, the other family
				}
				if err := wire.VerifyICRC(f, wire.EthernetSize); err != nil {
					t.Errorf("%v -> %v: %v", pk.Src(), pk.Dst(), err)
				}
				var tc, hop byte
				if fam.ia.Is4() {
					tc, hop = f[wire.EthernetSize+1], f[wire.EthernetSize+8]
				} else {
					tc, hop = f[wire.EthernetSize]<<4|f[wire.EthernetSize+1]>>4, f[wire.EthernetSize+7]
				}
				want := [2]byte{0, 64}
				if pk.Src() == fam.ia {
					fromA++
					want = [2]byte{0xb8, 9}
				} else {
					fromB++
				}
				if [2]byte{tc, hop} != want {
					t.Errorf("%v -> %v: traffic class %#x hop limit %d, want %#x and %d", pk.Src(), pk.Dst(), tc, hop, want[0], want[1])
				}
			}
			if fromA < 4 || fromB < 1 {
				t.Errorf("captured %d frames from %v and %d from %v, want the WRITE (4 or more) and its ACKs", fromA, fam.ia, fromB, fam.ib)
			}
		})
	}
}
