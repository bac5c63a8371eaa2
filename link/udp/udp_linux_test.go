package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/wire"
)

// pair is two network namespaces joined by a veth, with an IPv4 and an
// IPv6 address each.
type pair struct {
	ns     [2]*testenv.NetNS
	v4, v6 [2]netip.Addr
	ifname [2]string
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{ifname: [2]string{"ve0", "ve1"}}
	p.ns[0], p.ns[1] = testenv.NewNetNS(t), testenv.NewNetNS(t)
	p.ns[0].Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", "netns", p.ns[1].Name)
	for i := range 2 {
		p.v4[i] = netip.MustParseAddr([]string{"10.99.0.1", "10.99.0.2"}[i])
		p.v6[i] = netip.MustParseAddr([]string{"fd99::1", "fd99::2"}[i])
		p.ns[i].Run(t, "ip", "addr", "add", p.v4[i].String()+"/24", "dev", p.ifname[i])
		p.ns[i].Run(t, "ip", "addr", "add", p.v6[i].String()+"/64", "dev", p.ifname[i], "nodad")
		p.ns[i].Run(t, "ip", "link", "set", p.ifname[i], "up")
	}
	return p
}

// open opens a link in namespace i.
func (p *pair) open(t *testing.T, i int, cfg *Config) *Link {
	t.Helper()
	var l *Link
	if err := p.ns[i].Do(func() (err error) { l, err = Open(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// frame builds a RoCEv2 RC SEND ONLY frame from src to dst.
func frame(t *testing.T, src, dst netip.Addr, tc, hop uint8, payload []byte) []byte {
	t.Helper()
	f := &wire.Frame{Src: src, Dst: dst, TrafficClass: tc, HopLimit: hop, IPID: 0x1234, SrcPort: 0xc123,
		BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, DestQP: 0x11, PSN: 7, PKey: 0xffff},
		Payload: payload}
	b := make([]byte, 2048)
	n, err := wire.Build(b, f)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// read reads one frame from l, failing after a few seconds.
func read(t *testing.T, l *Link) []byte {
	t.Helper()
	ch := make(chan []byte, 1)
	go func() {
		b := make([]byte, 4096)
		sizes := make([]int, 1)
		if n, err := l.ReadPackets([][]byte{b}, sizes); err == nil && n == 1 {
			ch <- b[:sizes[0]]
		}
		close(ch)
	}()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("read failed")
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame within 5s")
	}
	return nil
}

// transport returns the frame's bytes from the BTH on.
func transport(t *testing.T, f []byte) []byte {
	t.Helper()
	p, err := wire.Parse(f)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return f[p.BTHOffset():]
}

func TestFramesCrossWithTheirPayloadTrafficClassAndHopLimit(t *testing.T) {
	p := newPair(t)
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) {
			a, b := p.v4, p.v6
			addrs := a
			if fam == "IPv6" {
				addrs = b
			}
			la := p.open(t, 0, &Config{Addrs: []netip.Addr{addrs[0]}})
			lb := p.open(t, 1, &Config{Addrs: []netip.Addr{addrs[1]}})
			sent := frame(t, addrs[0], addrs[1], 0x2a, 33, []byte("hello over udp"))
			if n, err := la.WritePackets([][]byte{sent}); n != 1 || err != nil {
				t.Fatalf("WritePackets = %d, %v", n, err)
			}
			got := read(t, lb)
			pk, err := wire.Parse(got)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if err := wire.VerifyICRC(got, wire.EthernetSize); err != nil {
				t.Errorf("received frame: %v", err)
			}
			if !bytes.Equal(transport(t, got)[:len(transport(t, got))-4], transport(t, sent)[:len(transport(t, sent))-4]) {
				t.Errorf("transport headers and payload differ:\n got %x\nsent %x", transport(t, got), transport(t, sent))
			}
			if pk.Src() != addrs[0] || pk.Dst() != addrs[1] {
				t.Errorf("addresses %v -> %v, want %v -> %v", pk.Src(), pk.Dst(), addrs[0], addrs[1])
			}
			if pk.TrafficClass() != 0x2a || pk.HopLimit() != 33 {
				t.Errorf("traffic class %#x hop limit %d, want 0x2a 33", pk.TrafficClass(), pk.HopLimit())
			}
			if pk.UDPSrcPort() != Port {
				t.Errorf("source port %d, want the socket's %d", pk.UDPSrcPort(), Port)
			}
			if s := lb.Stats(); s.Unverifiable != 0 || s.RxFrames != 1 {
				t.Errorf("receiver stats %+v, want 1 frame, none unverifiable", s)
			}
		})
	}
}

// TestSentICRCMatchesTheKernelsPackets captures what the link's sockets
// put on the veth and checks each frame's ICRC as a RoCE NIC or the
// kernel's rxe would: the IPv4 identification the kernel chose (0, with
// DF, for an unconnected socket with IP_PMTUDISC_DO) and the socket's
// source port must be what the ICRC was computed over.
func TestSentICRCMatchesTheKernelsPackets(t *testing.T) {
	p := newPair(t)
	var fd int
	err := p.ns[1].Do(func() error {
		ifi, err := net.InterfaceByName(p.ifname[1])
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})

	la := p.open(t, 0, nil) // the wildcard sockets: source chosen by IP_PKTINFO
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1], p.v6[1]}})
	const each = 20
	var frames [][]byte
	for i := range each {
		pay := bytes.Repeat([]byte{byte(i)}, 16*i)
		frames = append(frames, frame(t, p.v4[0], p.v4[1], uint8(i), 64, pay), frame(t, p.v6[0], p.v6[1], uint8(i), 64, pay))
	}
	if n, err := la.WritePackets(frames); n != len(frames) || err != nil {
		t.Fatalf("WritePackets = %d, %v", n, err)
	}
	var v4, v6 int
	buf := make([]byte, 4096)
	for v4+v6 < len(frames) {
		n, err := recvRetry(fd, buf)
		if err != nil {
			t.Fatalf("capture: %v after %d IPv4 and %d IPv6 frames", err, v4, v6)
		}
		f := buf[:n]
		pk, err := wire.Parse(f)
		if err != nil {
			continue // ND, MLD and the like
		}
		if err := wire.VerifyICRC(f, wire.EthernetSize); err != nil {
			t.Errorf("captured %v -> %v: %v", pk.Src(), pk.Dst(), err)
		}
		if pk.Src().Is4() {
			v4++
			id, flags := binary.BigEndian.Uint16(f[18:]), binary.BigEndian.Uint16(f[20:])
			if id != 0 || flags != 0x4000 {
				t.Errorf("IPv4 identification %#x flags %#x, want 0 and DF", id, flags)
			}
		} else {
			v6++
		}
	}
	if v4 != each || v6 != each {
		t.Errorf("captured %d IPv4 and %d IPv6 frames, want %d each", v4, v6, each)
	}
	for range frames {
		read(t, lb)
	}
	if s := lb.Stats(); s.RxFrames != uint64(len(frames)) || s.Unverifiable != 0 {
		t.Errorf("receiver stats %+v, want %d frames, none unverifiable", s, len(frames))
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestUnverifiableIPv4ICRCIsCountedAndResealed sends, from an ordinary
// socket, a datagram whose ICRC does not match identification 0: the link
// cannot tell a sender's other identification from corruption, counts it
// and delivers it with an ICRC the device accepts. A bad ICRC over IPv6,
// where every covered field is known, is not resealed.
func TestUnverifiableIPv4ICRCIsCountedAndResealed(t *testing.T) {
	p := newPair(t)
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1], p.v6[1]}})
	for _, fam := range []struct {
		src, dst netip.Addr
	}{{p.v4[0], p.v4[1]}, {p.v6[0], p.v6[1]}} {
		f := frame(t, fam.src, fam.dst, 0, 64, []byte("corrupt me"))
		pk, err := wire.Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		pay := append([]byte(nil), f[pk.BTHOffset():]...)
		pay[len(pay)-1] ^= 0x80 // a bad ICRC under any identification
		err = p.ns[0].Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.dst, Port)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(pay)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got := read(t, lb)
		err = wire.VerifyICRC(got, wire.EthernetSize)
		if fam.src.Is4() {
			if err != nil {
				t.Errorf("IPv4: delivered frame: %v, want a resealed ICRC", err)
			}
			if s := lb.Stats(); s.Unverifiable != 1 {
				t.Errorf("IPv4: Unverifiable = %d, want 1", s.Unverifiable)
			}
		} else {
			if !errors.Is(err, wire.ErrBadICRC) {
				t.Errorf("IPv6: delivered frame: %v, want %v (left for the device to count)", err, wire.ErrBadICRC)
			}
			if s := lb.Stats(); s.Unverifiable != 1 {
				t.Errorf("IPv6: Unverifiable = %d, want still 1", s.Unverifiable)
			}
		}
	}
}

// TestPortTakenNamesTheLikelyHolder binds UDP 4791 first with an ordinary
// socket (as the kernel's rxe or another softroce would) and expects
// EADDRINUSE with a message that says who likely holds the port.
func TestPortTakenNamesTheLikelyHolder(t *testing.T) {
	p := newPair(t)
	for _, tc := range []struct {
		name   string
		holder string
		cfg    *Config
	}{
		{"same address", "10.99.0.1", &Config{Addrs: []netip.Addr{p.v4[0]}}},
		{"wildcard held", "0.0.0.0", &Config{Addrs: []netip.Addr{p.v4[0]}}},
		{"wildcard wanted", "10.99.0.1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.ns[0].Do(func() error {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(tc.holder), Port: Port})
				if err != nil {
					return err
				}
				defer c.Close()
				l, err := Open(tc.cfg)
				if err == nil {
					l.Close()
				}
				return err
			})
			if !errors.Is(err, unix.EADDRINUSE) {
				t.Fatalf("Open with %s holding the port: %v, want EADDRINUSE", tc.holder, err)
			}
			if !strings.Contains(err.Error(), "kernel's rxe") || !strings.Contains(err.Error(), "another softroce") {
				t.Errorf("message %q does not name the likely holders", err)
			}
		})
	}
}

func TestClosedLinkFailsReadsAndWrites(t *testing.T) {
	p := newPair(t)
	l := p.open(t, 0, &Config{Addrs: []netip.Addr{p.v4[0]}})
	errc := make(chan error, 1)
	go func() {
		_, err := l.ReadPackets([][]byte{make([]byte, 100)}, []int{0})
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked read: %v, want net.ErrClosed", err)
	}
	if _, err := l.WritePackets([][]byte{frame(t, p.v4[0], p.v4[1], 0, 64, nil)}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: %v, want net.ErrClosed", err)
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second close: %v, want net.ErrClosed", err)
	}
}

func TestOversizedFrameIsRefusedWithEMSGSIZE(t *testing.T) {
	p := newPair(t)
	l := p.open(t, 0, &Config{Addrs: []netip.Addr{p.v4[0]}, MTU: 576})
	ok := frame(t, p.v4[0], p.v4[1], 0, 64, make([]byte, 100))
	big := frame(t, p.v4[0], p.v4[1], 0, 64, make([]byte, 1000))
	n, err := l.WritePackets([][]byte{ok, big, ok})
	if n != 1 || !errors.Is(err, unix.EMSGSIZE) {
		t.Errorf("WritePackets = %d, %v; want 1, EMSGSIZE", n, err)
	}
}

// TestSendAndReceiveDoNotAllocate: in the steady state a batch written or
// read costs no allocation (the send path's scratch space and syscall
// closure are the link's, the receive buffers are pooled).
func TestSendAndReceiveDoNotAllocate(t *testing.T) {
	p := newPair(t)
	la := p.open(t, 0, &Config{Addrs: []netip.Addr{p.v4[0]}})
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1]}})
	out := [][]byte{frame(t, p.v4[0], p.v4[1], 0, 64, make([]byte, 1024))}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	la.WritePackets(out)
	read(t, lb) // warm: the peer's neighbour entry, the pool
	// Each write is read at once, so no queue fills and no call takes a
	// waiting path (under load, 100 unread frames did).
	if w := testing.AllocsPerRun(100, func() { la.WritePackets(out); lb.ReadPackets(bufs, sizes) }); w != 0 {
		t.Errorf("WritePackets+ReadPackets: %v allocations per batch, want 0", w)
	}
}

// BenchmarkBatchSize measures what recvmmsg/sendmmsg batching gives: b.N
// 1024-byte RC SEND frames from one link to another over the loopback
// (127.0.0.1 to 127.0.0.2, no privilege needed), in batches of 1 (one
// datagram per system call) up to the default 64, reporting the
// datagrams the receiver got per second and the share lost to a full
// socket buffer.
func BenchmarkBatchSize(b *testing.B) {
	src, dst := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	f := &wire.Frame{Src: src, Dst: dst, HopLimit: 64, BTH: wire.BTHFields{Opcode: wire.RCSendOnly, DestQP: 0x11, PKey: 0xffff},
		Payload: make([]byte, 1024)}
	fb := make([]byte, 2048)
	n, err := wire.Build(fb, f)
	if err != nil {
		b.Fatal(err)
	}
	const port = 47911 // not 4791: the kernel's rxe may hold it
	binary.BigEndian.PutUint16(fb[wire.EthernetSize+wire.IPv4Size+2:], port)
	for _, batch := range []int{1, 8, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			la, err := Open(&Config{Addrs: []netip.Addr{src}, Port: port, BatchSize: batch})
			if err != nil {
				b.Skip(err)
			}
			defer la.Close()
			lb, err := Open(&Config{Addrs: []netip.Addr{dst}, Port: port, BatchSize: batch})
			if err != nil {
				b.Skip(err)
			}
			defer lb.Close()
			out := make([][]byte, batch)
			for i := range out {
				out[i] = fb[:n]
			}
			got := make(chan int)
			go func() {
				bufs, sizes := make([][]byte, batch), make([]int, batch)
				for i := range bufs {
					bufs[i] = make([]byte, 2048)
				}
				total := 0
				for {
					k, err := lb.ReadPackets(bufs, sizes)
					if err != nil {
						got <- total
						return
					}
					total += k
				}
			}()
			b.SetBytes(int64(n))
			b.ResetTimer()
			start := time.Now()
			for sent := 0; sent < b.N; {
				k := min(batch, b.N-sent)
				w, err := la.WritePackets(out[:k])
				if err != nil {
					b.Fatal(err)
				}
				sent += w
			}
			time.Sleep(20 * time.Millisecond) // the last datagrams land
			lb.Close()
			rx := <-got
			el := time.Since(start)
			b.ReportMetric(float64(rx)/el.Seconds(), "rx-datagrams/s")
			b.ReportMetric(100*float64(b.N-rx)/float64(b.N), "%lost")
		})
	}
}

// TestZeroChecksumIPv6IsReceived: an IPv6 datagram with a zero UDP
// checksum, as the kernel's rxe sends them (its tunnel socket does not
// compute IPv6 UDP checksums), reaches the link with its frame intact.
func TestZeroChecksumIPv6IsReceived(t *testing.T) {
	p := newPair(t)
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v6[1]}})
	f := frame(t, p.v6[0], p.v6[1], 0, 64, []byte("no checksum"))
	pk, err := wire.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	pay := f[pk.BTHOffset():]
	err = p.ns[0].Do(func() error {
		c, err := net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.v6[1], Port)))
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1)
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		_, err = c.Write(pay)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := read(t, lb)
	if !bytes.Equal(transport(t, got), pay) {
		t.Errorf("received transport % x, want % x", transport(t, got), pay)
	}
}

// TestGSOSegmentsCarryTheirOwnICRC sends runs of equal-sized frames (the
// last shorter) with Config.GSO, one GSO send per run, and checks each
// datagram as a RoCE NIC or the kernel's rxe would: segment k of an IPv4
// run carries identification k (the kernel numbers them), and its ICRC
// covers that identification. It runs twice: with the sending veth's UDP
// segmentation off, so the kernel cuts the datagrams before the veth and
// a capture on the other end sees each; and with it on, so the train
// crosses the veth whole and reaches the receiving socket, which has
// UDP_GRO on, as one message the link splits; there the sender's sockets
// are the wildcard ones. The receiving link
// verifies every frame, with the identification it had, and counts none
// unverifiable. The IPv4 and IPv6 runs reach the receiver through two
// sockets, each read by its own goroutine, so the test checks the order of
// the frames within each run only: the link does not order one socket's
// frames against another's, and RoCE needs no order across paths.
func TestGSOSegmentsCarryTheirOwnICRC(t *testing.T) {
	_, err := exec.LookPath("ethtool")
	testenv.Require(t, err == nil, "ethtool is not installed")
	for _, segOff := range []bool{true, false} {
		t.Run("segmentation-off="+strconv.FormatBool(segOff), func(t *testing.T) {
			p := newPair(t)
			state := "on"
			if segOff {
				state = "off"
			}
			p.ns[0].Run(t, "ethtool", "-K", p.ifname[0], "tx-udp-segmentation", state)
			var fd int
			err := p.ns[1].Do(func() error {
				ifi, err := net.InterfaceByName(p.ifname[1])
				if err != nil {
					return err
				}
				fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
				if err != nil {
					return err
				}
				return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})

			// The sender binds its addresses in one run and the
			// wildcard ones in the other (the source in IP_PKTINFO).
			cfg := &Config{GSO: true}
			if segOff {
				cfg.Addrs = []netip.Addr{p.v4[0], p.v6[0]}
			}
			la := p.open(t, 0, cfg)
			lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1], p.v6[1]}})
			// Frame k of a run has PSN k: the identification its
			// segment carries. The runs go to different QPs, so
			// that every frame's BTH is its own.
			const run = 12
			var frames [][]byte
			for f, fam := range [][2]netip.Addr{{p.v4[0], p.v4[1]}, {p.v6[0], p.v6[1]}} {
				for i := range run {
					size := 1000
					if i == run-1 {
						size = 333
					}
					b := make([]byte, 2048)
					n, err := wire.Build(b, &wire.Frame{Src: fam[0], Dst: fam[1], HopLimit: 64, SrcPort: 0xc123,
						BTH:     wire.BTHFields{Opcode: wire.RCSendMiddle, DestQP: 0x11 + uint32(f), PSN: uint32(i), PKey: 0xffff},
						Payload: bytes.Repeat([]byte{byte(i)}, size)})
					if err != nil {
						t.Fatal(err)
					}
					frames = append(frames, b[:n])
				}
			}
			if n, err := la.WritePackets(frames); n != len(frames) || err != nil {
				t.Fatalf("WritePackets = %d, %v", n, err)
			}
			if s := la.Stats(); s.TxFrames != uint64(len(frames)) || s.TxErrors != 0 {
				t.Errorf("sender stats %+v, want %d frames sent", s, len(frames))
			}
			if segOff {
				var v4, v6 int
				buf := make([]byte, 1<<16)
				for v4+v6 < len(frames) {
					n, err := recvRetry(fd, buf)
					if err != nil {
						t.Fatalf("capture: %v after %d IPv4 and %d IPv6 frames", err, v4, v6)
					}
					f := buf[:n]
					pk, err := wire.Parse(f)
					if err != nil {
						continue // ND, MLD and the like
					}
					if err := wire.VerifyICRC(f, wire.EthernetSize); err != nil {
						t.Errorf("captured PSN %d: %v", pk.BTH().PSN(), err)
					}
					if pk.Src().Is4() {
						if psn, id := pk.BTH().PSN(), pk.IPID(); uint32(id) != psn || psn != uint32(v4) {
							t.Errorf("captured IPv4 frame %d: PSN %d, identification %d; want both %d", v4, psn, id, v4)
						}
						v4++
					} else {
						v6++
					}
				}
			}
			var next [2]int // the next frame of each run to arrive
			for range frames {
				got := read(t, lb)
				pk, err := wire.Parse(got)
				if err != nil {
					t.Fatal(err)
				}
				f, fam := 0, "IPv4"
				if !pk.Src().Is4() {
					f, fam = 1, "IPv6"
				}
				k := next[f]
				next[f]++
				if k >= run {
					t.Fatalf("received more than %d %s frames", run, fam)
				}
				if err := wire.VerifyICRC(got, wire.EthernetSize); err != nil {
					t.Errorf("received %s frame %d: %v", fam, k, err)
				}
				if want := transport(t, frames[f*run+k])[:wire.BTHSize]; !bytes.Equal(transport(t, got)[:wire.BTHSize], want) {
					t.Errorf("received %s frame %d out of order: BTH %x, want %x", fam, k, transport(t, got)[:wire.BTHSize], want)
				}
				if f == 0 && pk.IPID() != uint16(k) {
					t.Errorf("received IPv4 frame %d: identification %d, want %d", k, pk.IPID(), k)
				}
			}
			if s := lb.Stats(); s.RxFrames != uint64(len(frames)) || s.Unverifiable != 0 || s.RxDropped != 0 {
				t.Errorf("receiver stats %+v, want %d frames, none unverifiable or dropped", s, len(frames))
			}
		})
	}
}

// TestReadIntoShortBufferTruncates: a frame longer than the reader's
// buffer is cut to the buffer, as link.Link says, and a datagram larger
// than the receiving link's MTU allows is dropped and counted.
func TestReadIntoShortBufferTruncates(t *testing.T) {
	p := newPair(t)
	la := p.open(t, 0, &Config{Addrs: []netip.Addr{p.v4[0]}, MTU: 2000})
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1]}, MTU: 1000})
	big := frame(t, p.v4[0], p.v4[1], 0, 64, bytes.Repeat([]byte{7}, 1200)) // over lb's MTU
	sent := frame(t, p.v4[0], p.v4[1], 0, 64, bytes.Repeat([]byte{9}, 500))
	if n, err := la.WritePackets([][]byte{big, sent}); n != 2 || err != nil {
		t.Fatalf("WritePackets = %d, %v", n, err)
	}
	b := make([]byte, 100)
	sizes := make([]int, 1)
	if n, err := lb.ReadPackets([][]byte{b}, sizes); n != 1 || err != nil || sizes[0] != len(b) {
		t.Fatalf("ReadPackets = %d, %v, size %d; want 1 frame of %d bytes", n, err, sizes[0], len(b))
	}
	addrs := func(f []byte) []byte { return f[wire.EthernetSize+12 : wire.EthernetSize+wire.IPv4Size] }
	if !bytes.Equal(addrs(b), addrs(sent)) {
		t.Errorf("truncated frame's addresses %x, want %x", addrs(b), addrs(sent))
	}
	if got, want := b[wire.EthernetSize+wire.IPv4Size+wire.UDPSize:], transport(t, sent)[:len(b)-wire.EthernetSize-wire.IPv4Size-wire.UDPSize]; !bytes.Equal(got, want) {
		t.Errorf("truncated frame's transport %x, want %x", got, want)
	}
	if s := lb.Stats(); s.RxFrames != 1 || s.RxDropped != 1 || s.Unverifiable != 0 {
		t.Errorf("receiver stats %+v, want 1 frame, 1 dropped (over the MTU), none unverifiable", s)
	}
}

// TestReadNoICRCMarksWhatTheLinkVerified: ReadNoICRC marks a frame
// verified when the link checked its ICRC (IPv4: good, or unverifiable and
// resealed; IPv6: good), and leaves a bad IPv6 ICRC unmarked for the
// device to check and count.
func TestReadNoICRCMarksWhatTheLinkVerified(t *testing.T) {
	p := newPair(t)
	lb := p.open(t, 1, &Config{Addrs: []netip.Addr{p.v4[1], p.v6[1]}})
	la := p.open(t, 0, &Config{Addrs: []netip.Addr{p.v4[0], p.v6[0]}})
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
		corrupt  bool
		want     bool
	}{
		{"IPv4 good", p.v4[0], p.v4[1], false, true},
		{"IPv4 unverifiable", p.v4[0], p.v4[1], true, true},
		{"IPv6 good", p.v6[0], p.v6[1], false, true},
		{"IPv6 bad", p.v6[0], p.v6[1], true, false},
	} {
		f := frame(t, tc.src, tc.dst, 0, 64, []byte("mark me"))
		if tc.corrupt {
			pk, err := wire.Parse(f)
			if err != nil {
				t.Fatal(err)
			}
			pay := append([]byte(nil), f[pk.BTHOffset():]...)
			pay[len(pay)-1] ^= 0x80
			err = p.ns[0].Do(func() error {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(tc.dst, Port)))
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Write(pay)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			// Built without its ICRC, as the device builds for a link
			// with WriteNoICRC: the link seals it.
			b := make([]byte, 2048)
			n, err := wire.Build(b, &wire.Frame{Src: tc.src, Dst: tc.dst, HopLimit: 64, SrcPort: 0xc123, NoICRC: true,
				BTH: wire.BTHFields{Opcode: wire.RCSendOnly, DestQP: 0x11, PSN: 7, PKey: 0xffff}, Payload: []byte("mark me")})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := la.WriteNoICRC([][]byte{b[:n]}); n != 1 || err != nil {
				t.Fatalf("%s: WriteNoICRC = %d, %v", tc.name, n, err)
			}
		}
		bufs, sizes, verified := [][]byte{make([]byte, 4096)}, make([]int, 1), make([]bool, 1)
		if n, err := lb.ReadNoICRC(bufs, sizes, verified); n != 1 || err != nil {
			t.Fatalf("%s: ReadNoICRC = %d, %v", tc.name, n, err)
		}
		if verified[0] != tc.want {
			t.Errorf("%s: verified %v, want %v", tc.name, verified[0], tc.want)
		}
		got := bufs[0][:sizes[0]]
		if err := wire.VerifyICRC(got, wire.EthernetSize); (err == nil) != tc.want {
			t.Errorf("%s: the frame's ICRC: %v", tc.name, err)
		}
	}
}

// recvRetry is recvfrom(2) on a capture socket, again when a signal
// (the Go runtime's preemption) interrupted it.
func recvRetry(fd int, buf []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != unix.EINTR {
			return n, err
		}
	}
}
