package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/tap"
	"github.com/softroce/softroce/wire"
)

var (
	brA   = netip.MustParseAddr("10.78.0.10")
	brB   = netip.MustParseAddr("10.78.0.11")
	brA6  = netip.MustParseAddr("fd78::a")
	brB6  = netip.MustParseAddr("fd78::b")
	injMA = net.HardwareAddr{0x02, 0x78, 0, 0, 0, 0xee} // the injector's source MAC
)

// bridgeNS makes a namespace holding bridge br0 with the kernel's
// addresses 10.78.0.1/24 and fd78::1/64 on it.
func bridgeNS(t *testing.T) *testenv.NetNS {
	t.Helper()
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "addr", "add", "10.78.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "addr", "add", "fd78::1/64", "dev", "br0", "nodad")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	return ns
}

// newOnTAP starts a node on a new TAP tapName attached to br0, with MTU
// mtu unless 0 (call it inside the namespace).
func newOnTAP(cfg Config, tapName string, mtu int) (*Node, error) {
	l, err := OpenTAP(tapName, "br0", mtu)
	if err != nil {
		return nil, err
	}
	cfg.Link = l
	return New(context.Background(), cfg)
}

// bridgeNode starts a node on a new TAP attached to br0 in ns, capturing
// to a pcap file in dir.
func bridgeNode(t *testing.T, ns *testenv.NetNS, name, tapName string, mac net.HardwareAddr, ips []netip.Addr, pcap string) *Node {
	t.Helper()
	cfg := Config{Name: name, MAC: mac, PcapPath: pcap, NoDAD: true}
	for _, ip := range ips {
		bits := 24
		if ip.Is6() {
			bits = 64
		}
		cfg.Addrs = append(cfg.Addrs, netip.PrefixFrom(ip, bits))
	}
	var n *Node
	if err := ns.Do(func() (err error) { n, err = newOnTAP(cfg, tapName, 1500); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestNodesOnABridge: two softroce nodes on two TAPs of one bridge in a
// fresh namespace. The kernel pings both; they resolve each other by ARP
// and ND and run RC SEND and WRITE over IPv4 and IPv6 with the data
// checked; junk injected into the bridge from a third TAP is dropped and
// counted by the receiving device while the traffic runs undisturbed; the
// kernel's UDP port 4791 sees none of it; the captures decode with every
// ICRC good and without a malformed frame in tshark.
func TestNodesOnABridge(t *testing.T) {
	ns := bridgeNS(t)
	dir := t.TempDir()
	pcapA := filepath.Join(dir, "a.pcap")
	a := bridgeNode(t, ns, "softroce0", "srn0", macA, []netip.Addr{brA, brA6}, pcapA)
	b := bridgeNode(t, ns, "softroce1", "srn1", macB, []netip.Addr{brB, brB6}, filepath.Join(dir, "b.pcap"))

	var kernelUDP net.PacketConn
	if err := ns.Do(func() (err error) { kernelUDP, err = net.ListenPacket("udp", ":4791"); return err }); err != nil {
		t.Fatal(err)
	}
	defer kernelUDP.Close()

	t.Run("kernel pings", func(t *testing.T) {
		_, err := exec.LookPath("ping")
		testenv.Require(t, err == nil, "ping is not installed (apt-get install iputils-ping)")
		for _, ip := range []netip.Addr{brA, brB, brA6, brB6} {
			out, err := ns.Command("ping", "-c", "2", "-i", "0.2", "-W", "3", ip.String()).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "2 received") {
				t.Errorf("ping %v: %v\n%s", ip, err, out)
			}
		}
		_, err = exec.LookPath("arping")
		testenv.Require(t, err == nil, "arping is not installed (apt-get install arping)")
		for _, n := range []*Node{a, b} {
			ip := n.Host().Addrs()[1].Addr() // the IPv4 address, after the link-local one
			out, err := ns.Command("arping", "-c", "2", "-W", "0.2", "-i", "br0", ip.String()).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "2 packets received") ||
				!strings.Contains(strings.ToLower(string(out)), n.MAC().String()) {
				t.Errorf("arping %v (MAC %v): %v\n%s", ip, n.MAC(), err, out)
			}
		}
	})

	var ea4, eb4 *end
	for _, tc := range []struct {
		name   string
		ia, ib netip.Addr
	}{
		{"RC IPv4", brA, brB},
		{"RC IPv6", brA6, brB6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := connectRC(t, a, b, tc.ia, tc.ib)
			for _, size := range []int{1, 1024, 4000, bufSize} {
				sendRecv(t, ea, eb, size, byte(size))
				sendRecv(t, eb, ea, size, byte(size+1))
				write(t, ea, eb, size, 0, byte(size+2))
				write(t, eb, ea, size/2, 7, byte(size+3))
			}
			if tc.ia.Is4() {
				ea4, eb4 = ea, eb
			}
		})
	}
	if ea4 == nil {
		t.Fatal("no IPv4 connection")
	}

	t.Run("junk is dropped and counted", func(t *testing.T) {
		var inj *tap.Device
		if err := ns.Do(func() (err error) { inj, err = tap.Open("srinj", &tap.Config{Bridge: "br0"}); return err }); err != nil {
			t.Fatal(err)
		}
		defer inj.Close()
		junk := junkFrames(t, eb4)
		before := counters(t, b)
		hostBefore := b.Stats().Host
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // inject while the traffic runs
			defer wg.Done()
			for _, j := range junk {
				time.Sleep(5 * time.Millisecond)
				if _, err := inj.WritePackets([][]byte{j.frame}); err != nil {
					t.Errorf("inject %s: %v", j.name, err)
				}
			}
		}()
		for i := range 40 {
			sendRecv(t, ea4, eb4, 3000, byte(i))
			write(t, ea4, eb4, 2000, 0, byte(i))
		}
		wg.Wait()
		want := map[string]uint64{"softroce_icrc_err": 1, "softroce_dropped_pkts": 4}
		var after map[string]uint64
		var host uint64
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			after = counters(t, b)
			h := b.Stats().Host
			host = h.Malformed - hostBefore.Malformed + h.Unhandled - hostBefore.Unhandled
			if after["softroce_icrc_err"]-before["softroce_icrc_err"] >= 1 &&
				after["softroce_dropped_pkts"]-before["softroce_dropped_pkts"]+host >= 4 {
				break
			}
		}
		// The truncated frame is dropped by the host (malformed IP) or by
		// the device (a short RoCE datagram): either way, once.
		if got := after["softroce_dropped_pkts"] - before["softroce_dropped_pkts"] + host; got != 4 {
			t.Errorf("dropped by device %d + host %d, want 4 in all (garbage, truncated, unknown QPN, wrong P_Key)",
				after["softroce_dropped_pkts"]-before["softroce_dropped_pkts"], host)
		}
		if got := after["softroce_icrc_err"] - before["softroce_icrc_err"]; got != want["softroce_icrc_err"] {
			t.Errorf("softroce_icrc_err +%d, want +1", got)
		}
		pa, err := b.Device().QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		if pa.BadPKeyCntr != 1 {
			t.Errorf("bad_pkey_cntr %d, want 1", pa.BadPKeyCntr)
		}
		for _, n := range []string{"duplicate_request", "out_of_seq_request", "rcvd_seq_err", "retry_exceeded_err", "completer_retry_err"} {
			if after[n] != before[n] {
				t.Errorf("%s changed %d -> %d: the junk disturbed the connection", n, before[n], after[n])
			}
		}
	})

	t.Run("kernel UDP 4791 sees nothing", func(t *testing.T) {
		kernelUDP.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		buf := make([]byte, 2048)
		n, from, err := kernelUDP.ReadFrom(buf)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("kernel socket on 4791 received %d bytes from %v (%v)", n, from, err)
		}
	})

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("capture decodes", func(t *testing.T) {
		data, err := os.ReadFile(pcapA)
		if err != nil {
			t.Fatal(err)
		}
		frames := readPcap(t, data)
		roce := 0
		for i, f := range frames {
			if bytes.Equal(f[6:12], injMA) || !isRoCE(f) {
				continue
			}
			roce++
			p, err := wire.Parse(f)
			if err != nil {
				t.Fatalf("frame %d: %v", i+1, err)
			}
			if err := p.VerifyICRC(); err != nil {
				t.Fatalf("frame %d: %v", i+1, err)
			}
		}
		if roce < 100 {
			t.Fatalf("capture of a holds %d RoCE frames", roce)
		}
		checkTshark(t, pcapA, roce)
	})
}

// checkTshark runs tshark over a capture: no frame may be malformed, and
// every RoCE frame (not from the injector) must decode as InfiniBand with a
// good ICRC.
func checkTshark(t *testing.T, path string, roce int) {
	t.Helper()
	ts := testutil.Tshark(t)
	// RPC-over-RDMA's heuristic claims some SEND payloads; ours are
	// arbitrary bytes.
	cmd := exec.Command(ts, "-r", path, "--disable-protocol", "rpcordma", "-T", "fields", "-E", "occurrence=f",
		"-e", "frame.number", "-e", "eth.src", "-e", "frame.protocols", "-e", "_ws.malformed", "-e", "udp.dstport")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	ib := 0
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("tshark line %q", line)
		}
		if f[1] == injMA.String() {
			continue
		}
		if f[3] != "" {
			t.Errorf("frame %s malformed in tshark: %q", f[0], line)
		}
		if f[4] == "4791" {
			if !strings.Contains(f[2], "infiniband") {
				t.Errorf("frame %s: tshark does not decode it as RoCE: %q", f[0], f[2])
			}
			ib++
		}
	}
	if ib != roce {
		t.Errorf("tshark sees %d RoCE frames, softroce decode %d", ib, roce)
	}
}

// junk is one frame injected into the segment.
type junk struct {
	name  string
	frame []byte
}

// junkFrames returns the frames the junk test injects towards e's node,
// each of which its device (or host) must drop: garbage after UDP 4791,
// a truncated frame, a bad ICRC, an unknown QPN and a wrong P_Key. The
// valid-looking ones come from its peer's address with a PSN far from the
// expected one.
func junkFrames(t *testing.T, e *end) []junk {
	t.Helper()
	dst := e.n.MAC()
	build := func(mut func(*wire.Frame)) []byte {
		f := &wire.Frame{Src: brA, Dst: brB, HopLimit: 64, SrcPort: 0xc123,
			BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: e.qp.QPNum(), PSN: 0x800000, AckReq: true},
			Payload: []byte("junk from the injector")}
		copy(f.DstMAC[:], dst)
		copy(f.SrcMAC[:], injMA)
		mut(f)
		buf := make([]byte, f.Len())
		n, err := wire.Build(buf, f)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	badICRC := build(func(*wire.Frame) {})
	badICRC[len(badICRC)-1] ^= 0xff
	// A WRITE whose RETH is cut in half, with IP and UDP lengths that
	// agree (a frame cut short with inconsistent lengths does not even
	// cross a bridge that validates IPv4 headers, br_validate_ipv4).
	write := build(func(f *wire.Frame) {
		f.BTH.Opcode = wire.RCRDMAWriteOnly
		f.RETH = wire.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 22}
	})
	truncated := setIPv4Lengths(write[:link.EthernetHeaderSize+20+8+wire.BTHSize+wire.RETHSize/2])
	return []junk{
		{"garbage", garbageFrame(t, dst)},
		{"truncated", truncated},
		{"bad ICRC", badICRC},
		{"unknown QPN", build(func(f *wire.Frame) { f.BTH.DestQP = 0xabcde })},
		{"wrong P_Key", build(func(f *wire.Frame) { f.BTH.PKey = 0x1234 })},
	}
}

// setIPv4Lengths makes the IPv4 total length, header checksum and UDP
// length of an Ethernet/IPv4/UDP frame agree with its size.
func setIPv4Lengths(f []byte) []byte {
	ip := f[link.EthernetHeaderSize:]
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[10:], 0)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(ip[24:], uint16(len(ip)-20))
	return f
}

// garbageFrame is a UDP 4791 datagram to dst whose payload is no BTH.
func garbageFrame(t *testing.T, dst net.HardwareAddr) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: injMA, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: brA.AsSlice(), DstIP: brB.AsSlice()}
	udp := &layers.UDP{SrcPort: 0xc123, DstPort: 4791}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	payload := bytes.Repeat([]byte{0xff}, 9) // shorter than a BTH and an ICRC
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// TestNodeOnIface: a node on an existing interface through AF_PACKET (one
// end of a veth pair whose other end is a bridge port) is reachable by
// the kernel's ping and runs RC traffic with a node on a TAP of the same
// bridge.
func TestNodeOnIface(t *testing.T) {
	ns := bridgeNS(t)
	ns.Run(t, "ip", "link", "add", "srvb", "type", "veth", "peer", "name", "srvbk")
	ns.Run(t, "ip", "link", "set", "srvbk", "master", "br0", "up")
	a := bridgeNode(t, ns, "softroce0", "srn0", macA, []netip.Addr{brA}, "")
	var b *Node
	if err := ns.Do(func() (err error) {
		l, err := OpenPacket("srvb", "", 0)
		if err != nil {
			return err
		}
		b, err = New(context.Background(), Config{Name: "softroce1", Link: l, NoDAD: true, MAC: macB, Addrs: []netip.Prefix{netip.PrefixFrom(brB, 24)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err := exec.LookPath("ping")
	testenv.Require(t, err == nil, "ping is not installed (apt-get install iputils-ping)")
	if out, err := ns.Command("ping", "-c", "2", "-i", "0.2", "-W", "3", brB.String()).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "2 received") {
		t.Fatalf("ping %v: %v\n%s", brB, err, out)
	}
	ea, eb := connectRC(t, a, b, brA, brB)
	for _, size := range []int{1, 1500, bufSize} {
		sendRecv(t, ea, eb, size, byte(size))
		sendRecv(t, eb, ea, size, byte(size+1))
		write(t, ea, eb, size, 0, byte(size+2))
		write(t, eb, ea, size, 0, byte(size+3))
	}
}
