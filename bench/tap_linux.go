//go:build linux

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/tap"
	"github.com/vishvananda/netns"
)

// tapMTU is the MTU of the TAP interfaces and so of the bridge: room for a
// 4096-byte RoCE payload, so that the devices' active MTU is 4096.
const tapMTU = 4200

// udpA and udpB are the kernel UDP pingpong's addresses, on the bridge.
var udpA, udpB = netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")

// benchNS is a network namespace made for one run, with a bridge.
type benchNS struct {
	name   string
	handle netns.NsHandle
}

// newBenchNS creates a namespace with IPv6 off (no router or neighbour
// solicitations on the TAPs), loopback up and a bridge br0 carrying the
// UDP baseline's two addresses.
func newBenchNS() (*benchNS, error) {
	name := fmt.Sprintf("softroce-bench-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &benchNS{name: name}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("opening netns %s: %w", name, err), ns.close())
	}
	ns.handle = h
	if err := ns.do(disableIPv6); err != nil {
		return nil, errors.Join(err, ns.close())
	}
	for _, c := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "set", "br0", "up"},
		{"ip", "addr", "add", udpA.String() + "/24", "dev", "br0"},
		{"ip", "addr", "add", udpB.String() + "/24", "dev", "br0"},
	} {
		args := append([]string{"netns", "exec", name}, c...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("in netns %s: %q: %v: %s", name, c, err, out), ns.close())
		}
	}
	return ns, nil
}

// disableIPv6 turns IPv6 off in the calling thread's namespace
// (net.ipv6.conf.{all,default}.disable_ipv6=1); a kernel without IPv6 has
// nothing to turn off.
func disableIPv6() error {
	for _, f := range []string{"all", "default"} {
		err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/disable_ipv6", []byte("1\n"), 0)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("disabling IPv6: %w", err)
		}
	}
	return nil
}

func (ns *benchNS) close() error {
	if ns.handle.IsOpen() {
		ns.handle.Close()
	}
	if out, err := exec.Command("ip", "netns", "del", ns.name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", ns.name, err, out)
	}
	return nil
}

// do runs f on an OS thread inside the namespace; a nil ns is the
// process's own namespace.
func (ns *benchNS) do(f func() error) error {
	if ns == nil {
		return f()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns.handle); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// openTAPs opens the TAPs nameA and nameB on br0.
func (ns *benchNS) openTAPs(nameA, nameB string) (a, b *tap.Device, err error) {
	err = ns.do(func() error {
		cfg := &tap.Config{MTU: tapMTU, Bridge: "br0"}
		if a, err = tap.Open(nameA, cfg); err != nil {
			return err
		}
		if b, err = tap.Open(nameB, cfg); err != nil {
			a.Close()
			return err
		}
		return nil
	})
	return a, b, err
}

// countLink counts the frames written through it.
type countLink struct {
	link.Link
	n atomic.Uint64
}

func (c *countLink) WritePackets(bufs [][]byte) (int, error) {
	n, err := c.Link.WritePackets(bufs)
	c.n.Add(uint64(n))
	return n, err
}

// NonBlockingWrites is the wrapped link's (rxe.NonBlockingWriter), so
// that counting does not change how the device reads.
func (c *countLink) NonBlockingWrites() bool {
	nb, ok := c.Link.(rxe.NonBlockingWriter)
	return ok && nb.NonBlockingWrites()
}

// ReadReady is the wrapped link's (rxe.ReadReadier), so that counting
// does not change when a retransmission timeout resends.
func (c *countLink) ReadReady() bool {
	rr, ok := c.Link.(rxe.ReadReadier)
	return ok && rr.ReadReady()
}

// euid is os.Geteuid; tests replace it to check the rows without root even
// when they run as root.
var euid = os.Geteuid

// runTAP measures the TAP path: RC WRITE between two devices on two TAPs
// on a bridge against the raw TAP frame rate at the same frame size, and
// RC SEND pingpong latency against a kernel UDP pingpong on the bridge.
// Without root it reports its rows as skipped.
func runTAP(ctx context.Context, o *Options) ([]Row, error) {
	if euid() != 0 {
		return tapRows("needs root"), nil
	}
	ns, err := newBenchNS()
	if err != nil {
		return nil, err
	}
	rows, err := tapMeasure(ctx, o, ns)
	return rows, errors.Join(err, ns.close())
}

// tapMeasure takes, per round and case, one RC WRITE sample between two
// raw TAP samples on a second pair of TAPs on the same bridge, and
// reports the sample whose ratio to the mean of its two raw neighbours is
// the median: on a shared machine the rates move with the load from one
// second to the next, and only samples taken side by side compare.
func tapMeasure(ctx context.Context, o *Options, ns *benchNS) ([]Row, error) {
	samples := make([][]rateSample, len(writeCases))
	var mallocs, frames uint64
	var ms runtime.MemStats
	for range o.rounds() {
		for _, mtu := range []ib.MTU{ib.MTU1024, ib.MTU4096} {
			ra, rb, err := ns.openTAPs("srr0", "srr1")
			if err != nil {
				return nil, err
			}
			rawRate := func() (float64, error) {
				r, err := rawTAP(ra, rb, mtu.Bytes(), o.round())
				if err != nil {
					return 0, fmt.Errorf("raw TAP mtu=%d: %w", mtu.Bytes(), err)
				}
				return r, nil
			}
			closeRaw := func() error { return errors.Join(ra.Close(), rb.Close()) }
			ta, tb, err := ns.openTAPs("srb0", "srb1")
			if err != nil {
				closeRaw()
				return nil, err
			}
			la, lb := &countLink{Link: ta}, &countLink{Link: tb}
			p, err := newPair(o, la, lb, tapMTU, mtu)
			if err != nil {
				ta.Close()
				tb.Close()
				closeRaw()
				return nil, err
			}
			fail := func(err error) ([]Row, error) { return nil, errors.Join(err, p.close(), closeRaw()) }
			for i, c := range writeCases {
				if c.mtu != mtu {
					continue
				}
				if err := warmUp(o, p, c, la.n.Load, lb.n.Load); err != nil {
					return fail(err)
				}
				before, err := rawRate()
				if err != nil {
					return fail(err)
				}
				r0, d0 := p.retries() // before the allocation count: it allocates
				runtime.ReadMemStats(&ms)
				m0, a0, b0 := ms.Mallocs, la.n.Load(), lb.n.Load()
				n, el, err := p.writeLoop(c.msg, c.depth, o.round())
				runtime.ReadMemStats(&ms)
				if err != nil {
					return fail(fmt.Errorf("RC WRITE mtu=%d msg=%s: %w", mtu.Bytes(), sizeName(c.msg), err))
				}
				mallocs += ms.Mallocs - m0
				ab, ba := la.n.Load()-a0, lb.n.Load()-b0
				frames += ab + ba
				r1, d1 := p.retries()
				after, err := rawRate()
				if err != nil {
					return fail(err)
				}
				s := rateSample{rc: gbps(n, el), raw: (before + after) / 2}
				samples[i] = append(samples[i], s)
				o.logf("tap RC WRITE mtu=%d msg=%s: %.2f Gb/s (raw %.2f before, %.2f after); frames %d requests, %d ACKs; %d retries, %d duplicates",
					mtu.Bytes(), sizeName(c.msg), s.rc, before, after, ab, ba, r1-r0, d1-d0)
			}
			if err := errors.Join(p.close(), closeRaw()); err != nil {
				return nil, err
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	var rows []Row
	for i, c := range writeCases {
		s := medianSample(samples[i])
		rows = append(rows, Row{Group: "tap", Name: fmt.Sprintf("RC WRITE mtu=%d msg=%s", c.mtu.Bytes(), sizeName(c.msg)),
			Value: s.rc, Unit: "Gb/s", Baseline: "raw TAP frames", BaseValue: s.raw, BaseUnit: "Gb/s",
			Ratio: ratio(s.rc, s.raw)}.atLeast(0.8))
	}
	rows = append(rows, allocRow("tap", "all TAP RC WRITE runs", ratio(float64(mallocs), float64(frames))))
	lat, err := tapLatency(o, ns)
	return append(rows, lat...), err
}

// rawRuns numbers rawTAP's runs.
var rawRuns atomic.Uint32

// rawStopFrame is the frame that ends rawTAP's run number run. It
// carries the number in its PSN: the stop frames an earlier run on the
// same TAPs sent after its reader ended are still queued, and must not
// end this one.
func rawStopFrame(run uint32) ([]byte, error) {
	f := benchFrame(8)
	f.SrcMAC, f.DstMAC = rawMACs()
	f.BTH.PSN = run & ib.PSNMask
	return buildFrame(f)
}

// rawMACs are the source and destination MACs of rawTAP's frames,
// others than the RC devices' (newPeer's), which share the bridge.
func rawMACs() (src, dst [6]byte) { return [6]byte{2, 0, 0, 0, 1, 1}, [6]byte{2, 0, 0, 0, 1, 2} }

// rawTAP writes RDMA WRITE MIDDLE frames carrying mtu bytes into a from
// one goroutine and reads them from b in another for d, and returns the
// payload rate of the frames that arrived, in Gb/s. No RDMA processing
// happens: this is what the TAP path can carry at that frame size.
func rawTAP(a, b *tap.Device, mtu int, d time.Duration) (float64, error) {
	f := benchFrame(mtu)
	f.SrcMAC, f.DstMAC = rawMACs()
	frame, err := buildFrame(f)
	if err != nil {
		return 0, err
	}
	stop, err := rawStopFrame(rawRuns.Add(1))
	if err != nil {
		return 0, err
	}
	// Teach the bridge where the destination MAC is, so that it forwards
	// rather than floods.
	hello := benchFrame(8)
	hello.SrcMAC, hello.DstMAC = f.DstMAC, f.SrcMAC
	hf, err := buildFrame(hello)
	if err != nil {
		return 0, err
	}
	if _, err := b.WritePackets([][]byte{hf}); err != nil {
		return 0, err
	}
	var got atomic.Uint64
	done := make(chan error, 1)
	go func() {
		buf := [][]byte{make([]byte, link.MaxFrameSize(tapMTU))}
		sz := []int{0}
		for {
			if _, err := b.ReadPackets(buf, sz); err != nil {
				done <- err
				return
			}
			switch {
			case sz[0] == len(frame):
				got.Add(1)
			case bytes.Equal(buf[0][:sz[0]], stop):
				done <- nil
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var quit atomic.Bool
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		bufs := [][]byte{frame}
		for !quit.Load() {
			if _, err := a.WritePackets(bufs); err != nil {
				werr = err
				return
			}
		}
	}()
	time.Sleep(d / 10) // warm up
	n0, t0 := got.Load(), time.Now()
	time.Sleep(d)
	n1, el := got.Load(), time.Since(t0)
	quit.Store(true)
	wg.Wait()
	if werr != nil {
		return 0, werr
	}
	for {
		if _, err := a.WritePackets([][]byte{stop}); err != nil {
			return 0, err
		}
		select {
		case err := <-done:
			if err != nil {
				return 0, err
			}
			return gbps(int64(n1-n0)*int64(mtu), el), nil
		case <-time.After(time.Millisecond):
		}
	}
}

// tapLatency runs RC SEND pingpongs over the TAPs, alternating with kernel
// UDP pingpongs between two sockets on the bridge's addresses.
func tapLatency(o *Options, ns *benchNS) ([]Row, error) {
	iters := 5000
	if o.Quick {
		iters = 200
	}
	ta, tb, err := ns.openTAPs("srb0", "srb1")
	if err != nil {
		return nil, err
	}
	p, err := newPair(o, ta, tb, tapMTU, ib.MTU1024)
	if err != nil {
		ta.Close()
		tb.Close()
		return nil, err
	}
	defer p.close()
	ua, ub, err := ns.udpPair()
	if err != nil {
		return nil, err
	}
	defer ua.Close()
	defer ub.Close()
	if _, err := p.pingpong(64, iters/10); err != nil { // warm up
		return nil, fmt.Errorf("RC pingpong: %w", err)
	}
	if _, err := udpPingpong(ua, ub, 64, iters/10); err != nil {
		return nil, fmt.Errorf("UDP pingpong: %w", err)
	}
	var rc, udp []time.Duration
	for range o.rounds() {
		r, err := p.pingpong(64, iters)
		if err != nil {
			return nil, fmt.Errorf("RC pingpong: %w", err)
		}
		rc = append(rc, r...)
		u, err := udpPingpong(ua, ub, 64, iters)
		if err != nil {
			return nil, fmt.Errorf("UDP pingpong: %w", err)
		}
		udp = append(udp, u...)
	}
	sortDur(rc)
	sortDur(udp)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	var rows []Row
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		a, b := us(percentile(rc, q.q)), us(percentile(udp, q.q))
		r := Row{Group: "latency", Name: "RC SEND 64 B pingpong RTT " + q.name, Value: a, Unit: "us",
			Baseline: "kernel UDP pingpong " + q.name, BaseValue: b, BaseUnit: "us", Ratio: ratio(a, b)}
		if q.name == "p50" {
			r = r.atMost(1.5)
		}
		rows = append(rows, r)
	}
	o.logf("pingpong: RC p50 %v p99 %v, UDP p50 %v p99 %v", percentile(rc, 0.5), percentile(rc, 0.99),
		percentile(udp, 0.5), percentile(udp, 0.99))
	return rows, nil
}

func sortDur(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// udpPair opens two UDP sockets in the namespace, on the bridge's two
// addresses.
func (ns *benchNS) udpPair() (a, b *net.UDPConn, err error) {
	err = ns.do(func() error {
		if a, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpA, 0))); err != nil {
			return err
		}
		if b, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpB, 0))); err != nil {
			a.Close()
			return err
		}
		return nil
	})
	return a, b, err
}

// udpPingpong sends size-byte datagrams from a to b and back iters times
// and returns the round-trip times.
func udpPingpong(a, b *net.UDPConn, size, iters int) ([]time.Duration, error) {
	baddr := b.LocalAddr().(*net.UDPAddr).AddrPort()
	aaddr := a.LocalAddr().(*net.UDPAddr).AddrPort()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		for range iters {
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _, err := b.ReadFromUDPAddrPort(buf)
			if err != nil {
				errc <- err
				return
			}
			if _, err := b.WriteToUDPAddrPort(buf[:n], aaddr); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	msg, buf := make([]byte, size), make([]byte, 2048)
	rtts := make([]time.Duration, 0, iters)
	for range iters {
		t0 := time.Now()
		if _, err := a.WriteToUDPAddrPort(msg, baddr); err != nil {
			return nil, err
		}
		a.SetReadDeadline(t0.Add(5 * time.Second))
		if _, _, err := a.ReadFromUDPAddrPort(buf); err != nil {
			return nil, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, <-errc
}
