// Package node assembles one softroce host: the pieces a real machine with
// a Soft-RoCE device has, in one process.
//
//	link.Link (a link.Pipe end, a TAP, or AF_PACKET on an interface)
//	   └─ optional pcap.Capture (pcap of every frame in and out)
//	        └─ host.Host: the IP host (ARP, ND, ICMP echo, neighbour cache)
//	             └─ RoCEv2 frames (UDP 4791 to its addresses)
//	                  └─ emu/rxe device (the emulated HCA)
//
// On a UDP link (OpenUDP, package link/udp) the kernel is the IP host: the
// device sits on the link directly, without a host.Host, and its GIDs
// follow the addresses the link binds (see OpenUDP).
//
// It mirrors `rdma link add softroce0 type rxe netdev DEV` on a machine
// whose netdev DEV holds the node's MAC and addresses: the Host plays the
// kernel's IP stack and netdev, the device is rxe on top of it. As with rxe,
//
//   - the device's GID table follows the host's addresses: slot 0 is the
//     link-local fe80::EUI-64, then each address (IPv4 as ::ffff:a.b.c.d) in
//     the order it was added; AddAddr and RemoveAddr rebuild it and raise
//     IB_EVENT_GID_CHANGE (rdma_roce_rescan_device on a netdev event). An
//     IPv6 address gets its GID only once duplicate address detection
//     passed (Config.NoDAD skips it); a duplicate never gets one;
//   - the Ethernet destination of every packet comes from the host's
//     neighbour table (rxe hands packets to the IP stack: rxe_net.c rxe_send);
//   - a user modify_qp to RTR resolves the destination MAC through the
//     host's neighbour layer (ib_resolve_eth_dmac, timeout 1000 ms) and
//     fails with EHOSTUNREACH when nobody answers. Callers that modify as a
//     kernel consumer (QP.Modify without udata) resolve first with
//     Node.Resolve, which is what the kernel's rdma_cm does before RTR;
//   - a packet to one of the node's own addresses (destination MAC its own)
//     never reaches the wire: it loops straight back into the device
//     (rxe_loopback), so two QPs of one node talk to each other even on
//     the in-memory default link. Such packets are not in the pcap
//     capture. A packet to a multicast group the node receives (a QP of
//     it attached, or JoinMulticast) goes to the link and loops back too,
//     as the kernel's IP multicast loopback delivers it to the sending
//     host's own rxe.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/host"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/pcap"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/tap"
)

// DefaultName is the device name of a Node whose Config leaves it empty.
const DefaultName = "softroce0"

// ResolveTimeout bounds the neighbour resolution of a user modify_qp, as
// the kernel's ib_resolve_eth_dmac (rdma_addr_find_l2_eth_by_grh) waits at
// most 1000 ms.
const ResolveTimeout = time.Second

// Config configures New. The node sits on Link; nil gives the in-memory
// default: one end of a link.Pipe with nobody on the other end (enough
// for devinfo and stats).
type Config struct {
	// Name is the device name; "" means DefaultName.
	Name string

	// Link is the link the node sits on: one end of a link.Pipe, or a
	// TAP or AF_PACKET link from OpenTAP or OpenPacket. The Node owns it
	// from New on and closes it, also when New fails. The device's
	// netdev takes the link's name when it has one (a Name method).
	Link link.Link

	// MAC is the node's own Ethernet address (the netdev MAC: node GUID and
	// GID 0 derive from it); nil means a random locally administered MAC
	// drawn from Seed.
	MAC net.HardwareAddr
	// Addrs are the node's IP addresses (IPv4 or IPv6); each becomes a
	// RoCEv2 GID after the link-local one.
	Addrs []netip.Prefix
	// NoDAD skips IPv6 duplicate address detection (host.Config.NoDAD).
	// Without it, New waits for the detection of the configured IPv6
	// addresses (up to host.DADDelay plus a second, on the node's Clock:
	// with a manual clock, set NoDAD) and fails with the duplicate's
	// error, wrapping EADDRINUSE; a GID exists only for an address that
	// passed. The link-local address's detection goes on in the
	// background (slot 0, the default GID from the MAC, exists from the
	// start, as in the kernel). The default in-memory link, with nobody
	// else on it, never runs DAD.
	NoDAD bool
	// OnDADFailure, if set, is told of each address added later (with
	// Host().AddAddr) that turned out to be a duplicate and was dropped.
	OnDADFailure func(p netip.Prefix, err error)
	// MTU is the default pipe's MTU (0 means 1500). It must be 0 with
	// Link, whose MTU is its own.
	MTU int

	// PcapPath, if set, names a pcap file written with every frame the
	// node sends or receives. Pcap is the same for a writer the caller
	// owns; at most one of them may be set.
	PcapPath string
	// Pcap is a writer for the pcap capture; the caller closes it after
	// Close.
	Pcap io.Writer

	// Clock drives the device's timers, the neighbour cache and capture
	// timestamps; nil means clock.Real.
	Clock clock.Clock
	// Seed seeds the device's key generator and a random MAC.
	Seed uint64
	// Rxe, if set, adjusts the rxe configuration (quirks, tuning, policy)
	// before the device is created; Device, Link, Neighbor and
	// McastFilter are the Node's and must be left alone, except
	// Device.Recorder, which the device keeps (a coverage recorder).
	Rxe func(*rxe.Config)
	// DeviceLink, if set, wraps the link the rxe device reads and writes
	// (behind the host, and behind the loopback of the device's own
	// addresses): every RoCE frame the device sends passes the returned
	// link (e.g. a link.Faults). The device closes it.
	DeviceLink func(link.Link) link.Link
	// DeviceLinkPasses, if set with DeviceLink, reports whether the
	// DeviceLink passes frames on unchanged (a fault injector with no
	// rule for frames): while it does, the device loops its own frames
	// back past it (and a Settle caller does their work) as without a
	// DeviceLink; while it does not, they pass it.
	DeviceLinkPasses func() bool
}

// Node is one softroce host: a link, an IP host on it and an emulated rxe
// device. It is safe for concurrent use.
type Node struct {
	name    string
	link    link.Link // the link the host reads and writes (maybe a Capture)
	capture *pcap.Capture
	pcap    *os.File
	peer    *link.PipeEnd // the far end of the default pipe
	host    *host.Host
	roce    *roceLink
	udp     *udpNode // on a UDP link: no host, the kernel routes
	dev     *rxe.Device
	clk     clock.Clock
	runErr  chan error
	// stopCarrier ends the watch of the link's carrier (nil: none).
	stopCarrier func()

	mu      sync.Mutex
	closed  bool
	created bool // the device exists: address changes reach it
}

// carrierWatcher is a link that reports its interface's link state
// (tap.Device: TAP devices and AF_PACKET sockets).
type carrierWatcher interface {
	WatchCarrier(f func(up, carrier bool)) (stop func(), err error)
}

// OpenTAP creates (or attaches to) the TAP device name for Config.Link,
// attached to bridge when it is not "", with MTU mtu when it is not 0
// (tap.Open). It fails with EPERM without CAP_NET_ADMIN and ENODEV for a
// missing bridge.
func OpenTAP(name, bridge string, mtu int) (link.Link, error) {
	d, err := tap.Open(name, &tap.Config{MTU: mtu, Bridge: bridge})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return d, nil
}

// OpenPacket opens the existing interface iface through an AF_PACKET
// socket for Config.Link, attached to bridge when it is not "", with MTU
// mtu when it is not 0 (tap.OpenPacket). It fails with ENODEV for a
// missing interface or bridge.
func OpenPacket(iface, bridge string, mtu int) (link.Link, error) {
	d, err := tap.OpenPacket(iface, &tap.Config{MTU: mtu, Bridge: bridge})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return d, nil
}

// New starts the host on the configured link and creates the device. It
// waits, within ctx, for the duplicate address detection of the IPv6
// addresses of cfg.Addrs (unless NoDAD); a ctx that ends first fails New
// with its error. It fails with EINVAL for a bad MAC, address or MTU.
func New(ctx context.Context, cfg Config) (*Node, error) {
	n := &Node{name: cfg.Name, clk: cfg.Clock, runErr: make(chan error, 1)}
	if n.name == "" {
		n.name = DefaultName
	}
	if n.clk == nil {
		n.clk = clock.Real{}
	}
	l, netdevName, err := n.openLink(&cfg)
	if err != nil {
		return nil, err
	}
	if u, ok := l.(*udp.Link); ok {
		n.udp = &udpNode{link: u}
	}
	fail := func(err error) (*Node, error) {
		if n.host != nil {
			n.host.Close()
		} else {
			l.Close()
		}
		if n.peer != nil {
			n.peer.Close()
		}
		if n.pcap != nil {
			n.pcap.Close()
		}
		return nil, err
	}
	if cfg.PcapPath != "" && cfg.Pcap != nil {
		return fail(fmt.Errorf("node: both PcapPath and Pcap set: %w", unix.EINVAL))
	}
	w := cfg.Pcap
	if cfg.PcapPath != "" {
		f, err := os.Create(cfg.PcapPath)
		if err != nil {
			return fail(fmt.Errorf("node: pcap: %w", err))
		}
		n.pcap, w = f, f
	}
	if w != nil {
		c, err := pcap.New(l, w, n.clk)
		if err != nil {
			return fail(fmt.Errorf("node: pcap: %w", err))
		}
		n.capture, l = c, c
	}
	n.link = l
	mac := cfg.MAC
	if mac == nil {
		mac = host.RandomMAC(rand.New(rand.NewPCG(cfg.Seed, 0x736f6674726f6365)))
	}
	if len(mac) != 6 {
		return fail(fmt.Errorf("node: MAC %v is not an Ethernet address: %w", mac, unix.EINVAL))
	}
	if n.udp != nil {
		if _, err := n.startUDP(&cfg, l, mac); err != nil {
			return fail(err)
		}
		return n, nil
	}
	n.roce = newRoCELink(l, [6]byte(mac))
	noDAD := cfg.NoDAD || n.peer != nil
	h, err := host.New(l, host.Config{MAC: mac, Addrs: cfg.Addrs, Clock: n.clk, Seed: cfg.Seed,
		NoDAD: noDAD, OnDADFailure: cfg.OnDADFailure,
		RoCE: n.roce.push, OnAddrChange: n.addrChanged})
	if err != nil {
		return fail(fmt.Errorf("node: %w", err))
	}
	n.host = h
	n.roce.member = h.HasGroup
	rc := rxe.Config{}
	if cfg.Rxe != nil {
		cfg.Rxe(&rc)
	}
	rc.Seed = cfg.Seed
	rc.Link = n.roce
	// The device loops its own frames back (and a Settle caller does their
	// work) unless a DeviceLink must see every frame the device sends.
	rc.Loopback = cfg.DeviceLink == nil || cfg.DeviceLinkPasses != nil
	if cfg.DeviceLink != nil {
		rc.LoopbackWhile = cfg.DeviceLinkPasses
	}
	if cfg.DeviceLink != nil {
		rc.Link = cfg.DeviceLink(n.roce)
	}
	rc.Neighbor = n
	rc.McastFilter = n.mcastFilter
	rc.Device = emu.Config{Name: n.name, Clock: n.clk, Resolver: deviceResolver{n}, Recorder: rc.Device.Recorder,
		NetDev: emu.NetDev{Name: netdevName, MAC: mac, MTU: l.MTU(), Addrs: n.addrs()}}
	if v, ok := cfg.Link.(interface{ VLANID() uint16 }); ok {
		rc.Device.NetDev.VLANID = v.VLANID()
	}
	n.mu.Lock()
	dev, err := rxe.New(rc)
	if err != nil {
		n.mu.Unlock()
		return fail(fmt.Errorf("node: %w", err))
	}
	n.dev, n.created = dev, true
	n.mu.Unlock()
	go func() { n.runErr <- h.Run() }()
	if w, ok := cfg.Link.(carrierWatcher); ok {
		// The port follows the interface: carrier or administrative
		// state changes give IB_EVENT_PORT_ERR / PORT_ACTIVE as rxe's
		// netdev notifier does.
		stop, err := w.WatchCarrier(dev.SetLinkState)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("node %s: %w", n.name, err)
		}
		n.stopCarrier = stop
	}
	tentative := h.Tentative()
	h.Announce()
	for _, p := range tentative {
		// The addresses asked for are usable (and their GIDs exist)
		// when New returns; the link-local address the host makes
		// itself finishes its detection in the background, as the
		// kernel's does after `ip link set up`, and its GID (index 0)
		// appears then, with a GID change event.
		if !slices.ContainsFunc(cfg.Addrs, func(a netip.Prefix) bool { return a.Addr() == p.Addr() }) {
			continue
		}
		if err := h.WaitDAD(ctx, p.Addr()); err != nil {
			n.Close()
			return nil, fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	return n, nil
}

// AddAddr adds an address to the host, as `ip addr add P dev DEV`, and
// waits for its duplicate address detection (IPv6, unless NoDAD): it
// returns once the address and its GID exist, or with the duplicate's
// error (wrapping EADDRINUSE), in which case no GID was created.
func (n *Node) AddAddr(ctx context.Context, p netip.Prefix) error {
	if n.host == nil {
		return fmt.Errorf("node %s: add %v: the kernel owns the addresses of a UDP link (ip addr add): %w", n.name, p, unix.EOPNOTSUPP)
	}
	if err := n.host.AddAddrWait(ctx, p); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}

// openLink returns the configured link (or the default pipe) with the
// name the device's netdev gets.
func (n *Node) openLink(cfg *Config) (link.Link, string, error) {
	if cfg.Link != nil {
		if cfg.MTU != 0 && cfg.MTU != cfg.Link.MTU() {
			cfg.Link.Close()
			return nil, "", fmt.Errorf("node: MTU %d given with a link of MTU %d: %w", cfg.MTU, cfg.Link.MTU(), unix.EINVAL)
		}
		if nl, ok := cfg.Link.(interface{ Name() string }); ok && nl.Name() != "" {
			return cfg.Link, nl.Name(), nil
		}
		return cfg.Link, "link0", nil
	}
	if cfg.MTU != 0 && (cfg.MTU < link.MinMTU || cfg.MTU > link.MaxMTU) {
		return nil, "", fmt.Errorf("node: MTU %d outside [%d, %d]: %w", cfg.MTU, link.MinMTU, link.MaxMTU, unix.EINVAL)
	}
	a, b := link.NewPipe(&link.PipeConfig{MTU: cfg.MTU, DropWhenFull: true})
	n.peer = b
	return a, "pipe0", nil
}

// addrs returns the host's addresses as the netdev's.
func (n *Node) addrs() []netip.Addr {
	if n.udp != nil {
		return n.udp.current()
	}
	ps := n.host.Addrs()
	as := make([]netip.Addr, len(ps))
	for i, p := range ps {
		as[i] = p.Addr()
	}
	return as
}

// addrChanged follows a host address change into the GID table, as the
// core's netdev notifier (netdevice_event / inetaddr_event) does.
func (n *Node) addrChanged(host.AddrChange) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.created || n.closed {
		return
	}
	n.dev.SetNetDevAddrs(n.addrs())
}

// deviceResolver is the device's resolver: resolveBounded, and the
// host's routes (HasRoute) for the CM's address resolution.
type deviceResolver struct{ n *Node }

func (r deviceResolver) Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	return r.n.resolveBounded(ctx, ip)
}

func (r deviceResolver) HasRoute(dst netip.Addr) bool { return r.n.HasRoute(dst) }

// resolveBounded is the device's resolver (ib_resolve_eth_dmac): Resolve
// waiting up to ResolveTimeout, a timeout reported as EHOSTUNREACH.
func (n *Node) resolveBounded(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	mac, err := n.Resolve(ctx, ip)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", err, unix.EHOSTUNREACH)
	}
	return mac, err
}

// Resolve returns the Ethernet address of ip (a peer GID's address,
// IPv4-mapped or not), sending ARP requests or neighbour solicitations
// until it answers, ctx ends, or host.DefaultSolicitations tries went
// unanswered (EHOSTUNREACH). With a cancelled ctx it answers from the
// neighbour cache only, starting a resolution in the background on a miss
// as neigh_event_send does for a packet to an unresolved neighbour (the
// driver asks so for each packet: a miss goes to the AV's DMAC and rxe's
// retries recover). Call it for the remote GID before moving a QP to RTR
// (the kernel resolves at that point, in modify_qp or rdma_cm) and put the
// result in the AV's DMAC; afterwards every packet follows the neighbour
// cache. A Node is the emu.Resolver of its device's driver.
func (n *Node) Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	var m [6]byte
	if n.udp != nil {
		return n.resolveUDP(ctx, ip)
	}
	mac, err := n.host.Resolve(ctx, ip.Unmap())
	if err != nil {
		return m, err
	}
	if len(mac) != 6 {
		return m, fmt.Errorf("resolve %v: %v is not an Ethernet address: %w", ip, mac, unix.EHOSTUNREACH)
	}
	copy(m[:], mac)
	return m, nil
}

// HasRoute reports whether the node's host has a route to dst: dst lies
// in the prefix of one of its addresses, or is link-local (the host has no
// gateway). On a UDP link the kernel routes, and HasRoute answers true.
// Package cma asks it where the kernel's ip_route_output_key would fail
// with ENETUNREACH.
func (n *Node) HasRoute(dst netip.Addr) bool {
	if n.udp != nil {
		return true
	}
	dst = dst.Unmap().WithZone("")
	if dst.IsLinkLocalUnicast() {
		return true
	}
	for _, p := range n.host.Addrs() {
		if p.Contains(dst) {
			return true
		}
	}
	return false
}

// Addrs returns the node's addresses in the order its GIDs follow them
// (the host's on TAP and AF_PACKET links, the bound or the host's ones on
// a UDP link).
func (n *Node) Addrs() []netip.Addr { return n.addrs() }

// Name returns the device name.
func (n *Node) Name() string { return n.name }

// Device returns the emulated rxe device.
func (n *Node) Device() *emu.Device { return n.dev.Device }

// Kernel returns the Linux release whose rxe the node's device is
// (rxe.Config.Kernel).
func (n *Node) Kernel() rxe.Kernel { return n.dev.Kernel() }

// Settle calls fn and processes, in the calling goroutine, the frames
// that the device sends to itself meanwhile and in answer to them
// (rxe.Device.Settle): a daemon runs each client command in it, so that
// the work a doorbell causes is done before the client's write() returns,
// as in the kernel. On a UDP link it only calls fn.
func (n *Node) Settle(fn func()) { n.dev.Settle(fn) }

// Host returns the IP host: its addresses (AddAddr, RemoveAddr, which the
// GID table follows), neighbours and counters. It is nil on a UDP link,
// where the kernel is the IP host.
func (n *Node) Host() *host.Host { return n.host }

// Link returns the link the node reads and writes (the Capture when one is
// configured).
func (n *Node) Link() link.Link { return n.link }

// MAC returns the node's Ethernet address.
func (n *Node) MAC() net.HardwareAddr {
	if n.udp != nil {
		return n.udp.mac
	}
	return n.host.MAC()
}

// Peer returns the far end of the default in-memory link (nil when
// Config.Link was given): whatever reads and writes it is the node's
// neighbour on the link, e.g. a link.Hub that connects it to a fabric.
func (n *Node) Peer() *link.PipeEnd { return n.peer }

// GID returns the GID table index holding ip (IPv4-mapped or not), as a
// user looks it up for ibv_rc_pingpong -g or perftest -x; ENOENT if the
// device has no such GID.
func (n *Node) GID(ip netip.Addr) (int, error) {
	e, err := n.dev.FindGID(emu.GIDFromAddr(ip), ib.GIDTypeRoCEv2, 1)
	if err != nil {
		return 0, err
	}
	return e.Index, nil
}

// Stats counts what the node dropped outside the device.
type Stats struct {
	// Host is the IP host's counters.
	Host host.Stats
	// RoCEQueueDrops counts RoCE frames dropped because the device's
	// receive queue was full.
	RoCEQueueDrops uint64
	// CaptureFrames is how many frames the pcap capture recorded.
	CaptureFrames uint64
	// UDP is the UDP link's counters (zero on other links).
	UDP udp.Stats
}

// Stats returns the node's counters (the device's are its hw counters).
func (n *Node) Stats() Stats {
	var s Stats
	if n.udp != nil {
		s.UDP = n.udp.link.Stats()
	} else {
		s.Host, s.RoCEQueueDrops = n.host.Stats(), n.roce.dropped.Load()
	}
	if n.capture != nil {
		s.CaptureFrames = n.capture.Frames()
	}
	return s
}

// Close removes the device, stops the host and closes the link and the
// pcap file. Closing twice fails with an error wrapping net.ErrClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("node %s: close: %w", n.name, net.ErrClosed)
	}
	n.closed = true
	n.mu.Unlock()
	if n.stopCarrier != nil {
		n.stopCarrier()
	}
	// Closes the RoCE adapter (on a UDP link, the link itself), waits for
	// the device's readers and unregisters the device.
	cerr := n.dev.Close()
	var err error
	if n.udp != nil {
		if n.udp.stop != nil {
			n.udp.stop()
		}
		err = cerr
	} else {
		err = n.host.Close()
		if rerr := <-n.runErr; err == nil {
			err = rerr
		}
	}
	if n.peer != nil {
		n.peer.Close()
	}
	if n.capture != nil && n.capture.Err() != nil && err == nil {
		err = fmt.Errorf("node %s: pcap: %w", n.name, n.capture.Err())
	}
	if n.pcap != nil {
		if cerr := n.pcap.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("node %s: pcap: %w", n.name, cerr)
		}
	}
	return err
}
