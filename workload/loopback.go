package workload

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pcap"
	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// LoopbackConfig configures a Loopback. The zero value is two devices on a
// fault-free pipe with an MTU that carries 4096-byte RoCE payloads.
type LoopbackConfig struct {
	// MTU is the netdev (and pipe) MTU of both ends; 0 means 4200, enough
	// for a 4096-byte path MTU plus the RoCEv2 headers.
	MTU int
	// Faults, if set, is applied to the frames each device writes; the
	// second device's injector uses Seed+1.
	Faults *link.FaultConfig
	// Capture, if set, receives a pcap of every frame the first device
	// writes and reads (that is, both directions), timestamped by the
	// wall clock.
	Capture io.Writer
	// Seed seeds each device's key generator (the second gets Seed+1).
	Seed uint64
	// CoalesceACKs makes both devices defer and merge their ACKs, as the
	// kernel's hfi1 does (rxe.Config.CoalesceACKs); by default they
	// answer as rxe, one ACK for every packet that asks for one.
	CoalesceACKs bool
	// Kernel is the Linux release whose rxe both devices are
	// (rxe.Config.Kernel); zero is rxe.DefaultKernel.
	Kernel rxe.Kernel
	// Wrap, if set, wraps the link of device i (0 or 1) outermost, after
	// the faults and the capture: a test's own injector.
	Wrap func(i int, l link.Link) link.Link
	// Recorders, if set, are the devices' recorders (emu.Config.Recorder):
	// Recorders[i] sees device i (a coverage profile).
	Recorders [2]emu.Recorder
}

// LoopbackSide is one emulated HCA of a Loopback.
type LoopbackSide struct {
	Dev  *emu.Device
	rxe  *rxe.Device // Dev's driver side, for Close
	IP   netip.Addr
	MAC  [6]byte
	Flt  *link.Faults // nil without faults
	end  *link.PipeEnd
	link link.Link
}

// Loopback is two emulated rxe devices, rxe0 (10.0.0.1, 02:00:00:00:00:01)
// and rxe1 (10.0.0.2, 02:00:00:00:00:02), on an in-memory link.Pipe in one
// process: no root, no TAP, no real network. Each knows the other's MAC
// through a static neighbour entry (rxe.Config.Neighbor). Their GID index
// 1 is their IPv4 address (RoCEv2).
type Loopback struct {
	A, B *LoopbackSide
	cap  *pcap.Capture
}

// LoopbackGIDIndex is the GID index of each Loopback device's IPv4
// address.
const LoopbackGIDIndex = 1

// NewLoopback builds the two devices.
func NewLoopback(cfg LoopbackConfig) (*Loopback, error) {
	if cfg.Faults != nil {
		if err := cfg.Faults.Validate(); err != nil {
			return nil, fmt.Errorf("loopback: %w", err)
		}
	}
	mtu := orDefault(cfg.MTU, 4200)
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: mtu, QueueLen: 1024})
	lb := &Loopback{
		A: &LoopbackSide{IP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), MAC: [6]byte{2, 0, 0, 0, 0, 1}, end: ea},
		B: &LoopbackSide{IP: netip.AddrFrom4([4]byte{10, 0, 0, 2}), MAC: [6]byte{2, 0, 0, 0, 0, 2}, end: eb},
	}
	neigh := map[netip.Addr][6]byte{lb.A.IP: lb.A.MAC, lb.B.IP: lb.B.MAC}
	for i, s := range []*LoopbackSide{lb.A, lb.B} {
		var l link.Link = s.end
		if i == 0 && cfg.Capture != nil {
			c, err := pcap.New(l, cfg.Capture, clock.Real{})
			if err != nil {
				ea.Close()
				eb.Close()
				return nil, fmt.Errorf("loopback: pcap: %w", err)
			}
			lb.cap = c
			l = c
		}
		if cfg.Faults != nil {
			fc := *cfg.Faults
			fc.Seed += uint64(i)
			s.Flt = link.NewFaults(l, fc)
			l = s.Flt
		}
		if cfg.Wrap != nil {
			l = cfg.Wrap(i, l)
		}
		s.link = l
		dev, err := rxe.New(rxe.Config{Seed: cfg.Seed + uint64(i), Link: l, CoalesceACKs: cfg.CoalesceACKs, Kernel: cfg.Kernel,
			Neighbor: emu.ResolverFunc(func(_ context.Context, ip netip.Addr) ([6]byte, error) {
				if m, ok := neigh[ip]; ok {
					return m, nil
				}
				return [6]byte{}, unix.EHOSTUNREACH
			}),
			Device: emu.Config{Name: fmt.Sprintf("rxe%d", i), NetDev: emu.NetDev{Name: fmt.Sprintf("veth%d", i),
				MAC: net.HardwareAddr(s.MAC[:]), MTU: mtu, Addrs: []netip.Addr{s.IP}},
				Recorder: cfg.Recorders[i]}})
		if err != nil {
			lb.Close()
			return nil, fmt.Errorf("loopback: %w", err)
		}
		s.Dev, s.rxe = dev.Device, dev
	}
	return lb, nil
}

// Captured returns how many frames the capture recorded (0 without one)
// and the error that stopped it, if any.
func (lb *Loopback) Captured() (uint64, error) {
	if lb.cap == nil {
		return 0, nil
	}
	return lb.cap.Frames(), lb.cap.Err()
}

// Close detaches both devices from the link (closing it) and unregisters
// them.
func (lb *Loopback) Close() error {
	var errs []error
	for _, s := range []*LoopbackSide{lb.A, lb.B} {
		if s.Dev != nil {
			if err := s.rxe.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
			s.Dev, s.rxe = nil, nil
		} else if s.end != nil {
			s.end.Close()
		}
	}
	return errors.Join(errs...)
}

// Counters returns the device's nonzero hardware counters in descriptor
// order (the names of `rdma statistic show`).
func Counters(dev *emu.Device) ([]Counter, error) {
	s, err := dev.AllocHWPortStats(1)
	if err != nil {
		return nil, err
	}
	dev.GetHWStats(s, 1)
	var out []Counter
	for i, d := range s.Descs {
		if s.Value[i] != 0 {
			out = append(out, Counter{Name: d.Name, Value: s.Value[i]})
		}
	}
	return out, nil
}

// Counter is one named hardware counter value.
type Counter struct {
	Name  string
	Value uint64
}

// Pingpong creates a pingpong client on A and a server on B (the server's
// PSN seed is cfg.Seed+1) and connects them as the tools do: the server
// first, then the client. cfg.Client is ignored; cfg.Fill fills the
// client's buffer only (the server starts with the tool's fill), so that
// after a run the server's buffer equal to the client's proves the data
// crossed.
func (lb *Loopback) Pingpong(cfg PingpongConfig) (client, server *Pingpong, err error) {
	return connectPair(func(isClient bool) (*Pingpong, error) {
		c := cfg
		c.Client = isClient
		if !isClient {
			c.Seed++
			c.Fill = nil
			return NewPingpong(lb.B.Dev, c)
		}
		return NewPingpong(lb.A.Dev, c)
	})
}

// Perf creates a perftest client on A and a server on B (the server's seed
// is cfg.Seed+1) and connects them. cfg.Client is ignored. In a send test
// without an SRQ or a post list, each receiving side checks every message
// it receives against the one its peer sent (PerfConfig.CheckRecv), when
// the receive ring fits in MaxCheckRing; VerifyPerf then checks the
// count. Otherwise VerifyPerf can only see the last message.
func (lb *Loopback) Perf(cfg PerfConfig) (client, server *Perf, err error) {
	var sides [2]*Perf // client, server
	each := cfg.Test.Verb() == oob.VerbSend && !cfg.UseSRQ && cfg.PostList <= 1 && cfg.CheckRecv == nil &&
		alignUp(int(cfg.MaxSize)+cacheLineSize, cacheLineSize)*cmp.Or(cfg.RxDepth, 512)*max(cfg.NumQP, 1) <= MaxCheckRing
	return connectPair(func(isClient bool) (*Perf, error) {
		c := cfg
		c.Client = isClient
		me, peer := 0, 1
		if !isClient {
			me, peer = 1, 0
			c.Seed++
		}
		if each {
			c.CheckRecv = func(qp int, n uint64, msg []byte) error {
				if want := sides[peer].SentMessage(qp, n, uint64(len(msg))); !bytes.Equal(msg, want) {
					return fmt.Errorf("%s: QP %d: message %d received differs from the one sent: %w", c.Test, qp, n, unix.EIO)
				}
				return nil
			}
		}
		dev := lb.A.Dev
		if !isClient {
			dev = lb.B.Dev
		}
		p, err := NewPerf(dev, c)
		sides[me] = p
		return p, err
	})
}

// side is what connectPair needs of a Pingpong or a Perf.
type side[D any] interface {
	Local() []D
	Connect([]D) error
	Close() error
}

// connectPair makes a client and a server with mk and connects the server
// to the client, then the client to the server; on failure it closes what
// it made.
func connectPair[S side[D], D any](mk func(client bool) (S, error)) (client, server S, err error) {
	var zero S
	if client, err = mk(true); err != nil {
		return zero, zero, err
	}
	if server, err = mk(false); err != nil {
		client.Close()
		return zero, zero, err
	}
	if err = server.Connect(client.Local()); err == nil {
		err = client.Connect(server.Local())
	}
	if err != nil {
		client.Close()
		server.Close()
		return zero, zero, err
	}
	return client, server, nil
}
