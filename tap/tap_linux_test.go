package tap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/host"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/tap"
)

// Addresses used only inside the namespaces these tests create.
var (
	kernelIP4 = netip.MustParseAddr("10.77.0.1")
	kernelIP6 = netip.MustParseAddr("fd77::1")
	srA       = hostSpec{net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x0a}, netip.MustParseAddr("10.77.0.10"), netip.MustParseAddr("fd77::a")}
	srB       = hostSpec{net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x0b}, netip.MustParseAddr("10.77.0.11"), netip.MustParseAddr("fd77::b")}
)

type hostSpec struct {
	mac      net.HardwareAddr
	ip4, ip6 netip.Addr
}

// bridgeNS makes a namespace holding bridge br0 with the kernel's
// addresses 10.77.0.1/24 and fd77::1/64 on it.
func bridgeNS(t *testing.T) *testenv.NetNS {
	t.Helper()
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "addr", "add", "10.77.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "addr", "add", "fd77::1/64", "dev", "br0", "nodad")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	return ns
}

func openTAP(t *testing.T, ns *testenv.NetNS, name string, cfg *tap.Config) *tap.Device {
	t.Helper()
	var d *tap.Device
	if err := ns.Do(func() (err error) { d, err = tap.Open(name, cfg); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// startHost runs a host.Host for spec on l until the test ends.
func startHost(t *testing.T, l link.Link, spec hostSpec, roce func([]byte)) *host.Host {
	t.Helper()
	h, err := host.New(l, host.Config{
		MAC:   spec.mac,
		NoDAD: true, // host and node test DAD
		Addrs: []netip.Prefix{netip.PrefixFrom(spec.ip4, 24), netip.PrefixFrom(spec.ip6, 64)},
		RoCE:  roce,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run() }()
	t.Cleanup(func() {
		h.Close()
		if err := <-done; err != nil {
			t.Errorf("Host.Run: %v", err)
		}
	})
	h.Announce()
	return h
}

// roceFrame builds a UDP-4791 frame from one softroce host to a MAC and IP.
func roceFrame(t testing.TB, from hostSpec, dstMAC net.HardwareAddr, dst netip.Addr, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: from.mac, DstMAC: dstMAC}
	udp := &layers.UDP{SrcPort: 0xc123, DstPort: ib.RoCEv2UDPPort}
	var net gopacket.NetworkLayer
	if dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		net = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: from.ip4.AsSlice(), DstIP: dst.AsSlice()}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		net = &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64, SrcIP: from.ip6.AsSlice(), DstIP: dst.AsSlice()}
	}
	udp.SetNetworkLayerForChecksum(net)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, net.(gopacket.SerializableLayer), udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// expectFrame waits for a frame on got and checks it equals want.
func expectFrame(t *testing.T, ctx context.Context, got <-chan []byte, want []byte, what string) {
	t.Helper()
	select {
	case g := <-got:
		if !bytes.Equal(g, want) {
			t.Errorf("%s: the frame changed in transit", what)
		}
	case <-ctx.Done():
		t.Fatalf("%s: not delivered", what)
	}
}

// TestKernelReachesSoftroce: the kernel's ping (IPv4, IPv6) and arping
// reach a softroce host on a TAP attached to the kernel's bridge.
func TestKernelReachesSoftroce(t *testing.T) {
	ns := bridgeNS(t)
	d := openTAP(t, ns, "srtap0", &tap.Config{Bridge: "br0", MTU: 1500, MAC: net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0xf0}})
	if d.Name() != "srtap0" || d.MTU() != 1500 || d.Queues() != 1 {
		t.Errorf("Device: name %q, MTU %d, %d queues", d.Name(), d.MTU(), d.Queues())
	}
	h := startHost(t, d, srA, nil)
	for _, tt := range []struct {
		name string
		cmd  []string
		want string
	}{
		{"ping", []string{"ping", "-c", "2", "-i", "0.2", "-W", "3", srA.ip4.String()}, "2 received"},
		{"ping6", []string{"ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", srA.ip6.String()}, "2 received"},
		{"ping6 link-local", []string{"ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", "-I", "br0", host.LinkLocal(srA.mac).String()}, "2 received"},
		{"arping", []string{"arping", "-c", "2", "-W", "0.2", "-i", "br0", srA.ip4.String()}, "2 packets received"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := exec.LookPath(tt.cmd[0]); err != nil {
				testenv.Require(t, false, tt.cmd[0]+" is not installed (apt-get install iputils-ping arping)")
			}
			out, err := ns.Command(tt.cmd[0], tt.cmd[1:]...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tt.want) {
				t.Fatalf("%s: %v\n%s", strings.Join(tt.cmd, " "), err, out)
			}
			if tt.name == "arping" && !strings.Contains(strings.ToLower(string(out)), srA.mac.String()) {
				t.Errorf("arping replies do not name softroce's MAC %v:\n%s", srA.mac, out)
			}
		})
	}
	// The kernel's neighbour table holds softroce's MAC, not the TAP's.
	out := ns.Run(t, "ip", "neigh", "show", srA.ip4.String())
	if !strings.Contains(out, srA.mac.String()) {
		t.Errorf("kernel neighbour entry: %q, want lladdr %v", out, srA.mac)
	}
	if s := h.Stats(); s.EchoReplies < 6 || s.ARPReplies == 0 || s.NeighborAdverts == 0 {
		t.Errorf("host stats %+v", s)
	}
}

// TestTwoSoftrocesOnABridge: two softroce hosts on two TAPs of one bridge
// resolve each other and exchange RoCE frames, and a kernel UDP socket on
// port 4791 in the same namespace sees none of them — while a RoCE frame
// addressed to the kernel (the control) does reach it.
func TestTwoSoftrocesOnABridge(t *testing.T) {
	ns := bridgeNS(t)
	da := openTAP(t, ns, "srtap0", &tap.Config{Bridge: "br0"})
	db := openTAP(t, ns, "srtap1", &tap.Config{Bridge: "br0"})
	var sock4, sock6 *net.UDPConn
	if err := ns.Do(func() (err error) {
		if sock4, err = net.ListenUDP("udp4", &net.UDPAddr{Port: ib.RoCEv2UDPPort}); err != nil {
			return err
		}
		sock6, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified, Port: ib.RoCEv2UDPPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer sock4.Close()
	defer sock6.Close()
	var kernelGot sync.Map // payload string -> true
	var wg sync.WaitGroup
	for _, s := range []*net.UDPConn{sock4, sock6} {
		wg.Go(func() {
			buf := make([]byte, 2000)
			for {
				n, _, err := s.ReadFromUDP(buf)
				if err != nil {
					return
				}
				kernelGot.Store(string(buf[:n]), true)
			}
		})
	}
	defer wg.Wait()
	defer sock6.Close()
	defer sock4.Close()

	got := make(chan []byte, 16)
	a := startHost(t, da, srA, nil)
	b := startHost(t, db, srB, func(f []byte) { got <- bytes.Clone(f) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ip := range []netip.Addr{srB.ip4, srB.ip6} {
		mac, err := a.Resolve(ctx, ip)
		if err != nil || !bytes.Equal(mac, srB.mac) {
			t.Fatalf("a.Resolve(%v) = %v, %v; want %v", ip, mac, err, srB.mac)
		}
	}
	if mac, err := b.Resolve(ctx, srA.ip4); err != nil || !bytes.Equal(mac, srA.mac) {
		t.Fatalf("b.Resolve = %v, %v", mac, err)
	}
	for _, dst := range []netip.Addr{srB.ip4, srB.ip6} {
		payload := []byte("softroce-to-softroce " + dst.String())
		f := roceFrame(t, srA, srB.mac, dst, payload)
		if err := a.Send(f); err != nil {
			t.Fatal(err)
		}
		expectFrame(t, ctx, got, f, "RoCE frame to "+dst.String()+" across the bridge")
	}
	// Control: the same kind of frame addressed to the kernel does reach
	// its socket, so the socket would have seen leaked frames.
	kmac, err := a.Resolve(ctx, kernelIP4)
	if err != nil {
		t.Fatalf("resolving the kernel's address: %v", err)
	}
	if err := a.Send(roceFrame(t, srA, kmac, kernelIP4, []byte("control"))); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := kernelGot.Load("control"); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the control frame addressed to the kernel never reached its UDP socket")
		}
		time.Sleep(5 * time.Millisecond)
	}
	kernelGot.Range(func(k, _ any) bool {
		if k.(string) != "control" {
			t.Errorf("the kernel's UDP 4791 socket received %q, meant for softroce", k)
		}
		return true
	})
}

// TestMultiQueue opens a two-queue TAP and checks each queue carries
// frames into the kernel.
func TestMultiQueue(t *testing.T) {
	ns := bridgeNS(t)
	d := openTAP(t, ns, "srmq0", &tap.Config{Queues: 2, Bridge: "br0"})
	if d.Queues() != 2 {
		t.Fatalf("Queues() = %d, want 2", d.Queues())
	}
	var l netlink.Link
	if err := ns.Do(func() (err error) { l, err = netlink.LinkByName("srmq0"); return err }); err != nil {
		t.Fatal(err)
	}
	if tt, ok := l.(*netlink.Tuntap); !ok || tt.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 {
		t.Errorf("link %T %+v is not a multi-queue TAP", l, l)
	}
	frame := roceFrame(t, srA, net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x99}, srB.ip4, []byte("mq"))
	before := l.Attrs().Statistics.RxPackets
	for i := range 2 {
		if n, err := d.Queue(i).WritePackets([][]byte{frame}); n != 1 || err != nil {
			t.Errorf("queue %d: WritePackets = %d, %v", i, n, err)
		}
	}
	ns.Do(func() (err error) { l, err = netlink.LinkByName("srmq0"); return err })
	if got := l.Attrs().Statistics.RxPackets - before; got != 2 {
		t.Errorf("kernel counted %d frames received on the TAP, want 2", got)
	}
}

// TestDeviceErrors covers the link contract at the edge: Close unblocks a
// read with net.ErrClosed, oversized frames are refused, not truncated.
func TestDeviceErrors(t *testing.T) {
	ns := bridgeNS(t)
	d := openTAP(t, ns, "srtap0", &tap.Config{MTU: 1280, Bridge: "br0"})
	if d.MTU() != 1280 {
		t.Errorf("MTU() = %d, want 1280", d.MTU())
	}
	var opErr *net.OpError
	big := roceFrame(t, srA, srB.mac, srB.ip4, make([]byte, 1280-28+1))
	if n, err := d.WritePackets([][]byte{big}); n != 0 || !errors.Is(err, syscall.EMSGSIZE) || !errors.As(err, &opErr) {
		t.Errorf("oversized write = %d, %v; want 0, *net.OpError wrapping EMSGSIZE", n, err)
	}
	done := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		for {
			if _, err := d.ReadPackets(bufs, sizes); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &opErr) {
			t.Errorf("read after Close: %v, want *net.OpError wrapping net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadPackets")
	}
	// The non-persistent TAP went away with its descriptor.
	if err := ns.Do(func() error { _, err := netlink.LinkByName("srtap0"); return err }); err == nil {
		t.Error("srtap0 still exists after Close")
	}
	if err := ns.Do(func() error {
		d, err := tap.Open("srtap1", &tap.Config{Bridge: "nonexistent-br"})
		if err == nil {
			d.Close()
		}
		return err
	}); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("Open with a missing bridge: %v, want ENODEV", err)
	}
	if err := ns.Do(func() error { _, err := netlink.LinkByName("srtap1"); return err }); err == nil {
		t.Error("a failed Open left srtap1 behind")
	}
}

// TestPacketSocket: softroce on an AF_PACKET socket bound to one end of
// a veth pair; the kernel, holding the other end, pings it and softroce
// resolves the kernel's MAC.
func TestPacketSocket(t *testing.T) {
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "srva", "type", "veth", "peer", "name", "srvb")
	ns.Run(t, "ip", "addr", "add", "10.77.1.1/24", "dev", "srvb")
	ns.Run(t, "ip", "addr", "add", "fd77:1::1/64", "dev", "srvb", "nodad")
	ns.Run(t, "ip", "link", "set", "srvb", "up")
	var d *tap.Device
	if err := ns.Do(func() (err error) { d, err = tap.OpenPacket("srva", nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name() != "srva" || d.MTU() != 1500 {
		t.Errorf("Device: name %q, MTU %d", d.Name(), d.MTU())
	}
	spec := hostSpec{net.HardwareAddr{0x02, 0x77, 0, 0, 1, 0x0a}, netip.MustParseAddr("10.77.1.10"), netip.MustParseAddr("fd77:1::a")}
	got := make(chan []byte, 4)
	h := startHost(t, d, spec, func(f []byte) { got <- bytes.Clone(f) })
	for _, ip := range []string{spec.ip4.String(), spec.ip6.String()} {
		if out, err := ns.Command("ping", "-c", "2", "-i", "0.2", "-W", "3", ip).CombinedOutput(); err != nil || !strings.Contains(string(out), "2 received") {
			t.Errorf("ping %s: %v\n%s", ip, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var kernelMAC net.HardwareAddr
	ns.Do(func() error {
		ifi, err := net.InterfaceByName("srvb")
		if err == nil {
			kernelMAC = ifi.HardwareAddr
		}
		return err
	})
	for _, ip := range []netip.Addr{netip.MustParseAddr("10.77.1.1"), netip.MustParseAddr("fd77:1::1")} {
		if mac, err := h.Resolve(ctx, ip); err != nil || !bytes.Equal(mac, kernelMAC) {
			t.Errorf("Resolve(%v) = %v, %v; want %v", ip, mac, err, kernelMAC)
		}
	}
	// A frame the kernel end sends to softroce's MAC (from a raw socket
	// on srvb) arrives through the AF_PACKET link.
	var peer *tap.Device
	if err := ns.Do(func() (err error) { peer, err = tap.OpenPacket("srvb", &tap.Config{NoPromisc: true}); return err }); err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	f := roceFrame(t, hostSpec{kernelMAC, netip.MustParseAddr("10.77.1.1"), netip.MustParseAddr("fd77:1::1")}, spec.mac, spec.ip4, []byte("over veth"))
	if _, err := peer.WritePackets([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	expectFrame(t, ctx, got, f, "RoCE frame over the veth")
}

// withoutNetAdmin runs f on the current OS thread (locked by the caller)
// with CAP_NET_ADMIN out of the thread's effective capabilities, as an
// unprivileged user runs, and puts it back afterwards.
func withoutNetAdmin(f func() error) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	saved := data
	data[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	defer unix.Capset(&hdr, &saved[0])
	return f()
}

// TestOpenConfiguredTAPWithoutNetAdmin: a persistent TAP made for its
// user (`ip tuntap add ... user U`) and already configured (MTU, bridge,
// up) opens without CAP_NET_ADMIN, as TUNSETIFF allows the owner; only a
// change of a setting needs the capability, and fails with EPERM.
func TestOpenConfiguredTAPWithoutNetAdmin(t *testing.T) {
	ns := bridgeNS(t)
	ns.Run(t, "ip", "tuntap", "add", "dev", "srtapu", "mode", "tap", "user", strconv.Itoa(os.Geteuid()))
	ns.Run(t, "ip", "link", "set", "srtapu", "mtu", "1400", "master", "br0", "up")
	err := ns.Do(func() error {
		return withoutNetAdmin(func() error {
			d, err := tap.Open("srtapu", &tap.Config{MTU: 1400, Bridge: "br0"})
			if err != nil {
				return fmt.Errorf("open as configured: %w", err)
			}
			if d.MTU() != 1400 {
				t.Errorf("MTU() = %d, want 1400", d.MTU())
			}
			if err := d.Close(); err != nil {
				return err
			}
			d, err = tap.Open("srtapu", &tap.Config{MTU: 1500})
			if err == nil {
				d.Close()
				return errors.New("changing the MTU without CAP_NET_ADMIN succeeded")
			}
			if !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("changing the MTU: %w, want EPERM", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The persistent TAP outlives its descriptors.
	if out := ns.Run(t, "ip", "-o", "link", "show", "srtapu"); !strings.Contains(out, "mtu 1400") || !strings.Contains(out, "master br0") {
		t.Errorf("srtapu after the opens: %s", out)
	}
}

// TestReadReady checks that ReadReady tells whether a frame waits without
// reading it: false on a TAP that is down (nothing can arrive); on a TAP
// of the bridge, every read it announces returns at once, and a frame
// flooded across the bridge is among them, still there to be read; false
// after Close.
func TestReadReady(t *testing.T) {
	ns := bridgeNS(t)
	down := openTAP(t, ns, "srrr2", &tap.Config{NoUp: true})
	if down.ReadReady() {
		t.Error("ReadReady on a TAP that is down: true")
	}
	a := openTAP(t, ns, "srrr0", &tap.Config{Bridge: "br0"})
	b := openTAP(t, ns, "srrr1", &tap.Config{Bridge: "br0"})
	// To a MAC the bridge has not learned: flooded to b. Sent again until
	// it arrives, as the bridge ports may not forward yet.
	// A payload long enough that the frame needs no Ethernet padding
	// (the bridge's netfilter hook would trim it).
	frame := roceFrame(t, srA, net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x98}, srB.ip4, bytes.Repeat([]byte("ready"), 13))
	buf, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	deadline := time.Now().Add(10 * time.Second)
	for found := false; !found; {
		if time.Now().After(deadline) {
			t.Fatal("the flooded frame never arrived")
		}
		if _, err := a.WritePackets([][]byte{frame}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		// Each read ReadReady announces returns without waiting (a
		// read with nothing waiting would block the test).
		for b.ReadReady() {
			if _, err := b.ReadPackets(buf, sizes); err != nil {
				t.Fatal(err)
			}
			found = found || bytes.Equal(buf[0][:sizes[0]], frame)
		}
	}
	b.Close()
	if b.ReadReady() {
		t.Error("ReadReady on a closed TAP: true")
	}
}
