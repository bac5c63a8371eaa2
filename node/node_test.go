package node

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/host"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

var (
	ipA  = netip.MustParseAddr("10.0.0.1")
	ipB  = netip.MustParseAddr("10.0.0.2")
	ip6A = netip.MustParseAddr("fd00::1")
	ip6B = netip.MustParseAddr("fd00::2")
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
)

// pipePair returns two nodes on the two ends of an in-memory link, with an
// IPv4 and an IPv6 address each, and pcap captures of both.
func pipePair(t *testing.T) (a, b *Node, pa, pb *bytes.Buffer) {
	t.Helper()
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 1500, QueueLen: 4096})
	pa, pb = new(bytes.Buffer), new(bytes.Buffer)
	var err error
	a, err = New(context.Background(), Config{Name: "softroce0", Link: ea, NoDAD: true, MAC: macA, Seed: 1, Pcap: pa,
		Addrs: []netip.Prefix{netip.PrefixFrom(ipA, 24), netip.PrefixFrom(ip6A, 64)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err = New(context.Background(), Config{Name: "softroce1", Link: eb, NoDAD: true, MAC: macB, Seed: 2, Pcap: pb,
		Addrs: []netip.Prefix{netip.PrefixFrom(ipB, 24), netip.PrefixFrom(ip6B, 64)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b, pa, pb
}

func TestResolveByARPAndND(t *testing.T) {
	a, b, _, _ := pipePair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		from *Node
		ip   netip.Addr
		want net.HardwareAddr
	}{
		{"ARP a->b", a, ipB, macB},
		{"ARP b->a", b, ipA, macA},
		{"ND a->b", a, ip6B, macB},
		{"ND b->a", b, ip6A, macA},
		{"IPv4-mapped GID", a, netip.AddrFrom16(emu.GIDFromAddr(ipB)), macB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.from.Resolve(ctx, tc.ip)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:], tc.want) {
				t.Fatalf("Resolve(%v) = %v, want %v", tc.ip, got, tc.want)
			}
		})
	}
	if s := hostStatsWhen(b, func(s host.Stats) bool { return s.ARPReplies > 0 && s.NeighborAdverts > 0 }); s.ARPReplies == 0 || s.NeighborAdverts == 0 {
		t.Errorf("b answered %d ARP requests and %d solicitations, want both > 0", s.ARPReplies, s.NeighborAdverts)
	}
}

// hostStatsWhen returns n's host counters once ok holds of them, or after
// two seconds. The host counts an answer once its write returned, so the
// peer may hold the answer before the count moves.
func hostStatsWhen(n *Node, ok func(host.Stats) bool) host.Stats {
	s := n.Stats().Host
	for deadline := time.Now().Add(2 * time.Second); !ok(s) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		s = n.Stats().Host
	}
	return s
}

func TestRCSendWriteOverPipe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ia, ib netip.Addr
	}{
		{"IPv4", ipA, ipB},
		{"IPv6", ip6A, ip6B},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, pa, _ := pipePair(t)
			ea, eb := connectRC(t, a, b, tc.ia, tc.ib)
			for _, size := range []int{1, 1024, 1025, 5000, bufSize, 0} {
				sendRecv(t, ea, eb, size, byte(size))
				sendRecv(t, eb, ea, size, byte(size+1))
				write(t, ea, eb, size, min(3, bufSize-size), byte(size+2))
				write(t, eb, ea, size/2, 100, byte(size+3))
			}
			for _, n := range []*Node{a, b} {
				c := counters(t, n)
				if c["rcvd_pkts"] == 0 || c["sent_pkts"] == 0 || c["softroce_icrc_err"] != 0 || c["softroce_dropped_pkts"] != 0 {
					t.Errorf("%s counters %v", n.Name(), c)
				}
			}
			if err := a.Close(); err != nil { // the capture is complete
				t.Fatal(err)
			}
			checkCapture(t, pa.Bytes(), tc.ia.Is4())
		})
	}
}

// checkCapture parses every RoCE frame of a pcap stream and verifies its
// ICRC, and checks that the IP version is the expected one.
func checkCapture(t *testing.T, pcap []byte, v4 bool) {
	t.Helper()
	frames := readPcap(t, pcap)
	roce := 0
	for i, f := range frames {
		if !isRoCE(f) {
			continue
		}
		roce++
		p, err := wire.Parse(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if err := p.VerifyICRC(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p.Dst().Is4() != v4 {
			t.Fatalf("frame %d to %v, want IPv4 %v", i, p.Dst(), v4)
		}
	}
	if roce == 0 {
		t.Fatal("capture holds no RoCE frame")
	}
}

// counters returns the device's port counters by name.
func counters(t testing.TB, n *Node) map[string]uint64 {
	t.Helper()
	s, err := n.Device().AllocHWPortStats(1)
	if err != nil {
		t.Fatal(err)
	}
	n.Device().GetHWStats(s, 1)
	m := map[string]uint64{}
	for i, d := range s.Descs {
		m[d.Name] = s.Value[i]
	}
	return m
}

func TestUserModifyResolves(t *testing.T) {
	a, b, _, _ := pipePair(t)
	ea, eb := newEnd(t, a, ipA), newEnd(t, b, ipB)
	init := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: allAccess}
	if err := ea.qp.Modify(&init, qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := func(dst netip.Addr) (qpstate.Attr, error) {
		attr := qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, DestQPNum: eb.qp.QPNum(),
			MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
				GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(dst), SGIDIndex: 1, HopLimit: 1}}}
		err := ea.qp.ModifyWithUdata(&attr, qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|
			qpstate.AttrDestQPN|qpstate.AttrRQPSN|qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer, &emu.UData{})
		return attr, err
	}
	// Nobody holds 10.0.0.9: the modify fails like the kernel's, and the
	// QP stays in INIT.
	if _, err := rtr(netip.MustParseAddr("10.0.0.9")); !errors.Is(err, unix.EHOSTUNREACH) {
		t.Fatalf("modify to RTR towards a silent address: %v, want EHOSTUNREACH", err)
	}
	attr, err := rtr(ipB)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(attr.AHAttr.DMAC[:], macB) || attr.AHAttr.GRH.HopLimit != 64 {
		t.Fatalf("resolved DMAC %x hop limit %d, want %v and 64", attr.AHAttr.DMAC, attr.AHAttr.GRH.HopLimit, macB)
	}
}

func TestGIDTableFollowsAddresses(t *testing.T) {
	a, _, _, _ := pipePair(t)
	var mu sync.Mutex
	var events []emu.EventType
	a.Device().RegisterEventHandler(func(ev emu.Event) {
		mu.Lock()
		events = append(events, ev.Type)
		mu.Unlock()
	})
	take := func() []emu.EventType {
		mu.Lock()
		defer mu.Unlock()
		e := events
		events = nil
		return e
	}
	ll := host.LinkLocal(macA)
	new4 := netip.MustParseAddr("192.168.7.1")
	for _, step := range []struct {
		name   string
		change func() error
		want   []netip.Addr // slots 0.. (invalid = empty slot)
		event  bool
	}{
		{"initial", func() error { return nil }, []netip.Addr{ll, ipA, ip6A}, false},
		{"add IPv4", func() error { return a.Host().AddAddr(netip.PrefixFrom(new4, 24)) },
			[]netip.Addr{ll, ipA, ip6A, new4}, true},
		{"remove first IPv4", func() error { return a.Host().RemoveAddr(ipA) },
			[]netip.Addr{ll, {}, ip6A, new4}, true},
		{"re-add it into the free slot", func() error { return a.Host().AddAddr(netip.PrefixFrom(ipA, 24)) },
			[]netip.Addr{ll, ipA, ip6A, new4}, true},
		{"remove unknown fails, no event", func() error {
			if err := a.Host().RemoveAddr(netip.MustParseAddr("10.9.9.9")); !errors.Is(err, unix.EADDRNOTAVAIL) {
				t.Fatalf("remove unknown: %v", err)
			}
			return nil
		}, []netip.Addr{ll, ipA, ip6A, new4}, false},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := step.change(); err != nil {
				t.Fatal(err)
			}
			for i, want := range step.want {
				e, err := a.Device().QueryGID(1, i)
				if !want.IsValid() {
					if !errors.Is(err, unix.ENODATA) {
						t.Errorf("GID[%d]: %v %v, want an empty slot", i, e.GID, err)
					}
					continue
				}
				if err != nil || e.GID != emu.GIDFromAddr(want) || e.Type != ib.GIDTypeRoCEv2 {
					t.Errorf("GID[%d] = %v %v %v, want %v RoCEv2", i, e.GID, e.Type, err, want)
				}
			}
			if _, err := a.Device().QueryGID(1, len(step.want)); !errors.Is(err, unix.ENODATA) {
				t.Errorf("GID[%d]: %v, want ENODATA", len(step.want), err)
			}
			ev := take()
			if step.event && (len(ev) != 1 || ev[0] != emu.EventGIDChange) {
				t.Errorf("events %v, want one %v", ev, emu.EventGIDChange)
			}
			if !step.event && len(ev) != 0 {
				t.Errorf("events %v, want none", ev)
			}
		})
	}
	idx, err := a.GID(new4)
	if err != nil || idx != 3 {
		t.Fatalf("GID(%v) = %d, %v; want 3", new4, idx, err)
	}
}

func TestConfigErrors(t *testing.T) {
	e1, e2 := link.Pipe()
	defer e1.Close()
	defer e2.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"multicast MAC", Config{MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}}},
		{"bad MTU", Config{MTU: 10}},
		{"MTU with link", Config{Link: e1, MTU: 9000}},
		{"two pcaps", Config{PcapPath: "x.pcap", Pcap: new(bytes.Buffer)}},
		{"bad address", Config{Addrs: []netip.Prefix{netip.MustParsePrefix("224.0.0.1/4")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(context.Background(), tc.cfg)
			if err == nil {
				n.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, unix.EINVAL) {
				t.Fatalf("New: %v, want EINVAL", err)
			}
		})
	}
}

func TestDefaultNode(t *testing.T) {
	n, err := New(context.Background(), Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if n.Name() != DefaultName || n.Device().Name() != DefaultName {
		t.Errorf("name %q / %q, want %q", n.Name(), n.Device().Name(), DefaultName)
	}
	mac := n.MAC()
	if mac[0]&3 != 2 {
		t.Errorf("MAC %v is not locally administered unicast", mac)
	}
	e, err := n.Device().QueryGID(1, 0)
	if err != nil || e.GID.Addr() != host.LinkLocal(mac) {
		t.Errorf("GID[0] = %v %v, want %v", e.GID, err, host.LinkLocal(mac))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
	// The same seed gives the same MAC.
	m, err := New(context.Background(), Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !bytes.Equal(m.MAC(), mac) {
		t.Errorf("seed 7 gave %v then %v", mac, m.MAC())
	}
}

// TestLoopback: two QPs of one node, connected through the node's own
// addresses on the in-memory default link (nobody on the other end), talk
// to each other: rxe loops such packets back.
func TestLoopback(t *testing.T) {
	for _, ip := range []netip.Addr{ipA, ip6A} {
		t.Run(ip.String(), func(t *testing.T) {
			n, err := New(context.Background(), Config{MAC: macA, Addrs: []netip.Prefix{netip.PrefixFrom(ipA, 24), netip.PrefixFrom(ip6A, 64)}})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			e1, e2 := connectRC(t, n, n, ip, ip)
			for _, size := range []int{1, 4000, bufSize} {
				sendRecv(t, e1, e2, size, byte(size))
				write(t, e2, e1, size, 0, byte(size+1))
			}
		})
	}
}

// TestNewContext: New waits for duplicate address detection within its
// context. On a manual clock that nobody advances the detection never
// ends, so New returns the context's error instead of blocking.
func TestNewContext(t *testing.T) {
	ea, eb := link.Pipe()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n, err := New(ctx, Config{Link: ea, Clock: clock.NewManual(time.Unix(0, 0)),
			Addrs: []netip.Prefix{netip.MustParsePrefix("fd00::5/64")}})
		if err == nil {
			n.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("New: %v; want the context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New blocked past its context")
	}
}

// TestSettleDoesTheLoopbackWork: a SEND between two QPs of one node, posted
// inside Settle, has both completions in the CQs when Settle returns (the
// SEND and its ACK were processed in the caller), and neither frame
// reached the link: the capture stays empty, as rxe_loopback's packets
// never reach the netdev.
func TestSettleDoesTheLoopbackWork(t *testing.T) {
	var capture bytes.Buffer
	n, err := New(context.Background(), Config{MAC: macA, NoDAD: true, Pcap: &capture,
		Addrs: []netip.Prefix{netip.PrefixFrom(ipA, 24)}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	e1, e2 := connectRC(t, n, n, ipA, ipA)
	before := capture.Len()
	for i := range 100 {
		if _, err := e2.qp.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: e2.addr, Length: 64, LKey: e2.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		n.Settle(func() {
			if _, err := e1.qp.PostSend([]emu.SendWR{{WRID: uint64(i), Opcode: emu.WRSend,
				SGList: []emu.SGE{{Addr: e1.addr, Length: 64, LKey: e1.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		})
		var wc [2]emu.WC
		if k := e2.cq.Poll(wc[:]); k != 1 || wc[0].Opcode != emu.WCRecv || wc[0].WRID != uint64(i) {
			t.Fatalf("message %d: receive completions %+v after Settle", i, wc[:k])
		}
		if k := e1.cq.Poll(wc[:]); k != 1 || wc[0].Opcode != emu.WCSend || wc[0].Status != emu.WCSuccess {
			t.Fatalf("message %d: send completions %+v after Settle", i, wc[:k])
		}
	}
	if capture.Len() != before {
		t.Errorf("the capture grew by %d bytes: looped-back frames reached the link", capture.Len()-before)
	}
}

// countingLink counts the frames the device writes through it.
type countingLink struct {
	link.Link
	frames atomic.Int64
}

func (c *countingLink) WritePackets(bufs [][]byte) (int, error) {
	c.frames.Add(int64(len(bufs)))
	return c.Link.WritePackets(bufs)
}

// TestSettleLoopsBackPastAPassingDeviceLink checks that a DeviceLink that
// says it passes frames unchanged (DeviceLinkPasses) does not stop the
// device's loop-back and Settle's work, and that once it no longer does,
// every frame passes it again and still arrives.
func TestSettleLoopsBackPastAPassingDeviceLink(t *testing.T) {
	var passes atomic.Bool
	passes.Store(true)
	var cl *countingLink
	n, err := New(context.Background(), Config{MAC: macA, NoDAD: true,
		Addrs:            []netip.Prefix{netip.PrefixFrom(ipA, 24)},
		DeviceLink:       func(l link.Link) link.Link { cl = &countingLink{Link: l}; return cl },
		DeviceLinkPasses: passes.Load})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	e1, e2 := connectRC(t, n, n, ipA, ipA)
	send := func(i int) {
		t.Helper()
		if _, err := e2.qp.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: e2.addr, Length: 64, LKey: e2.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		n.Settle(func() {
			if _, err := e1.qp.PostSend([]emu.SendWR{{WRID: uint64(i), Opcode: emu.WRSend,
				SGList: []emu.SGE{{Addr: e1.addr, Length: 64, LKey: e1.mr.LKey()}}}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	before := cl.frames.Load()
	for i := range 10 {
		send(i)
		var wc [2]emu.WC
		if k := e2.cq.Poll(wc[:]); k != 1 || wc[0].WRID != uint64(i) {
			t.Fatalf("message %d: receive completions %+v after Settle", i, wc[:k])
		}
		if k := e1.cq.Poll(wc[:]); k != 1 || wc[0].Status != emu.WCSuccess {
			t.Fatalf("message %d: send completions %+v after Settle", i, wc[:k])
		}
	}
	if d := cl.frames.Load() - before; d != 0 {
		t.Errorf("%d frames passed the DeviceLink while it passes frames unchanged", d)
	}
	passes.Store(false)
	send(10)
	deadline := time.Now().Add(5 * time.Second)
	var wc [2]emu.WC
	for e2.cq.Poll(wc[:]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no receive completion through the DeviceLink")
		}
		time.Sleep(time.Millisecond)
	}
	if cl.frames.Load() == before {
		t.Error("no frame passed the DeviceLink once it has rules")
	}
}
