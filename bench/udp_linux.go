//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// udpCountLink counts the frames written to a UDP link, as countLink does,
// and keeps the link's WriteNoICRC and ReadNoICRC (which countLink's
// link.Link would hide), so the device seals and checks no ICRC the link
// seals and checks itself, as on a bare UDP link.
type udpCountLink struct {
	*udp.Link
	n atomic.Uint64
}

func (c *udpCountLink) WritePackets(bufs [][]byte) (int, error) {
	n, err := c.Link.WritePackets(bufs)
	c.n.Add(uint64(n))
	return n, err
}

func (c *udpCountLink) WriteNoICRC(bufs [][]byte) (int, error) {
	n, err := c.Link.WriteNoICRC(bufs)
	c.n.Add(uint64(n))
	return n, err
}

// udpMTU is the veth MTU of the UDP rows, as tapMTU.
const udpMTU = tapMTU

// udpPath is where the UDP rows run: two hosts' namespaces and addresses.
type udpPath struct {
	na, nb   *benchNS // nil: the process's own namespace
	ipA, ipB netip.Addr
	lo       bool // the two addresses are on the loopback
}

// runUDP measures the UDP link: RC WRITE between two devices on UDP links,
// against a raw UDP socket blast of the same datagram size between the
// same addresses, in the same run. As root the two hosts are two
// namespaces joined by a veth; without root, where no namespace can be
// made, two addresses of the loopback (the link itself needs no
// privilege, so its rows measure for every user).
func runUDP(ctx context.Context, o *Options) ([]Row, error) {
	if euid() != 0 {
		return udpMeasure(ctx, o, loopbackPath())
	}
	a, b, err := newVethNS()
	if err != nil {
		return nil, err
	}
	rows, err := udpMeasure(ctx, o, udpPath{na: a, nb: b,
		ipA: netip.AddrFrom4([4]byte{10, 0, 0, 1}), ipB: netip.AddrFrom4([4]byte{10, 0, 0, 2})})
	return rows, errors.Join(err, a.close(), b.close())
}

// loopbackPath returns two addresses of 127.0.0.0/8 (which the loopback
// answers whole) chosen by the process id, so that runs in parallel
// processes (the test packages) do not bind the same port 4791.
func loopbackPath() udpPath {
	n := byte(os.Getpid()%250 + 1)
	return udpPath{ipA: netip.AddrFrom4([4]byte{127, 79, n, 1}), ipB: netip.AddrFrom4([4]byte{127, 79, n, 2}), lo: true}
}

// newVethNS makes two namespaces joined by a veth of MTU udpMTU with
// 10.0.0.1/24 and 10.0.0.2/24, the addresses newPeer gives devices 1 and 2.
func newVethNS() (a, b *benchNS, err error) {
	var nss [2]*benchNS
	for i := range nss {
		name := fmt.Sprintf("softroce-bench-udp%d-%d", i, os.Getpid())
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("ip netns add %s: %v: %s", name, err, out), closeNS(nss[:i]))
		}
		nss[i] = &benchNS{name: name}
		h, err := netns.GetFromName(name)
		if err != nil {
			return nil, nil, errors.Join(err, closeNS(nss[:i+1]))
		}
		nss[i].handle = h
	}
	cmds := [][]string{
		{"netns", "exec", nss[0].name, "ip", "link", "add", "ve0", "mtu", fmt.Sprint(udpMTU), "type", "veth",
			"peer", "name", "ve1", "mtu", fmt.Sprint(udpMTU), "netns", nss[1].name},
	}
	for i, ns := range nss {
		dev := fmt.Sprintf("ve%d", i)
		cmds = append(cmds,
			[]string{"netns", "exec", ns.name, "ip", "link", "set", "lo", "up"},
			[]string{"netns", "exec", ns.name, "ip", "addr", "add", fmt.Sprintf("10.0.0.%d/24", i+1), "dev", dev},
			[]string{"netns", "exec", ns.name, "ip", "link", "set", dev, "up"})
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("ip %q: %v: %s", c, err, out), closeNS(nss[:]))
		}
	}
	return nss[0], nss[1], nil
}

func closeNS(nss []*benchNS) error {
	var err error
	for _, ns := range nss {
		if ns != nil {
			err = errors.Join(err, ns.close())
		}
	}
	return err
}

// openUDP opens a UDP link in ns bound to ip.
func openUDP(ns *benchNS, ip netip.Addr, gso bool) (l *udp.Link, err error) {
	err = ns.do(func() error {
		l, err = udp.Open(&udp.Config{Addrs: []netip.Addr{ip}, MTU: udpMTU, GSO: gso})
		return err
	})
	return l, err
}

// udpMeasure takes, per round and case, one RC WRITE sample between two
// raw UDP samples and reports the sample whose ratio is the median.
func udpMeasure(ctx context.Context, o *Options, path udpPath) ([]Row, error) {
	na, nb, ipA, ipB := path.na, path.nb, path.ipA, path.ipB
	samples := make([][]rateSample, len(udpCases))
	for range o.rounds() {
		for i, c := range udpCases {
			rawRate := func() (float64, error) {
				r, err := rawUDP(na, nb, ipA, ipB, c.mtu.Bytes(), o.round(), c.gso)
				if err != nil {
					return 0, fmt.Errorf("%s mtu=%d: %w", udpBaseline(c), c.mtu.Bytes(), err)
				}
				return r, nil
			}
			before, err := rawRate()
			if err != nil {
				return nil, err
			}
			la, err := openUDP(na, ipA, c.gso)
			if err != nil {
				return nil, err
			}
			lb, err := openUDP(nb, ipB, c.gso)
			if err != nil {
				la.Close()
				return nil, err
			}
			ca, cb := &udpCountLink{Link: la}, &udpCountLink{Link: lb}
			p, err := newPairAt(o, ca, cb, udpMTU, c.mtu, ipA, ipB)
			if err != nil {
				la.Close()
				lb.Close()
				return nil, err
			}
			if err := warmUp(o, p, c.writeCase, ca.n.Load, cb.n.Load); err != nil {
				p.close()
				return nil, err
			}
			n, el, err := p.writeLoop(c.msg, c.depth, o.round())
			if err != nil {
				p.close()
				return nil, fmt.Errorf("%s: %w", udpRowName(c, path.lo), err)
			}
			statsA, statsB := la.Stats(), lb.Stats()
			if err := p.close(); err != nil {
				return nil, err
			}
			after, err := rawRate()
			if err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], rateSample{rc: gbps(n, el), raw: (before + after) / 2})
			o.logf("udp %s: %.2f Gb/s (%s %.2f before, %.2f after); link A %+v, link B %+v",
				udpRowName(c, path.lo), gbps(n, el), udpBaseline(c), before, after, statsA, statsB)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	var rows []Row
	for i, c := range udpCases {
		m := medianSample(samples[i])
		row := Row{Group: "udp", Name: udpRowName(c, path.lo), Value: m.rc, Unit: "Gb/s",
			Baseline: udpBaseline(c), BaseValue: m.raw, BaseUnit: "Gb/s", Ratio: ratio(m.rc, m.raw)}
		if !c.gso {
			row = row.atLeast(0.8)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// rawUDP sends datagrams the size of an RDMA WRITE MIDDLE frame's UDP
// payload carrying mtu bytes from an ordinary UDP socket in na to one in
// nb for d, and returns the payload rate of the datagrams that arrived,
// in Gb/s: what plain UDP carries at that size between the namespaces.
// Without gso it writes one datagram per sendto; with gso, each sendto
// is a UDP GSO send of as many datagrams as fit in 64 KiB (at most 64),
// to a receiving socket with UDP_GRO on: the same kernel help the link
// with udp.Config.GSO gets.
func rawUDP(na, nb *benchNS, ipA, ipB netip.Addr, mtu int, d time.Duration, gso bool) (float64, error) {
	size := wire.BTHSize + mtu + wire.ICRCSize
	var ca, cb *net.UDPConn
	err := na.do(func() (err error) {
		ca, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipA, 0)))
		return err
	})
	if err != nil {
		return 0, err
	}
	defer ca.Close()
	err = nb.do(func() (err error) {
		cb, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, 0)))
		return err
	})
	if err != nil {
		return 0, err
	}
	defer cb.Close()
	cb.SetReadBuffer(4 << 20)
	segs := 1
	var oob []byte
	if gso {
		segs = min(udp.MaxSegments, 65000/size)
		oob = make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = uint16(size)
		rc, err := cb.SyscallConn()
		if err != nil {
			return 0, err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil {
			return 0, err
		}
		if serr != nil {
			return 0, fmt.Errorf("UDP_GRO: %w", serr)
		}
	}
	dst := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	var got atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, _, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n%size == 0 { // one datagram, or a GRO train of them
				got.Add(uint64(n / size))
			}
		}
	}()
	var quit atomic.Bool
	werr := make(chan error, 1)
	go func() {
		msg := make([]byte, size*segs)
		for !quit.Load() {
			if _, _, err := ca.WriteMsgUDPAddrPort(msg, oob, dst); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				var errno interface{ Temporary() bool }
				if errors.As(err, &errno) && errno.Temporary() {
					continue // ENOBUFS from a full queue: a drop, go on
				}
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	// The path works once a datagram arrives: on a fresh veth the first
	// ARP request can go out before the carrier is up, and the next one
	// comes a second later, longer than a --quick run's windows.
	for deadline := time.Now().Add(5 * time.Second); got.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(d / 10) // warm up
	n0, t0 := got.Load(), time.Now()
	// A window in which the receiver never ran (a loaded machine, a
	// --quick window of 20 ms) measures nothing: extend it, up to 20
	// windows, until 100 datagrams arrived.
	var n1 uint64
	var el time.Duration
	for {
		time.Sleep(d)
		n1, el = got.Load(), time.Since(t0)
		if n1-n0 >= 100 || el >= 20*d {
			break
		}
	}
	quit.Store(true)
	if err := <-werr; err != nil {
		return 0, err
	}
	cb.Close()
	<-done
	return gbps(int64(n1-n0)*int64(mtu), el), nil
}
