// Package emu is the core verbs layer of the emulated HCA: the Go
// counterpart of drivers/infiniband/core. It owns the objects a consumer
// sees (Device, PD, MR, MW, CQ, SRQ, QP, AH), the argument checks the core
// makes before a driver is called (via package qpstate for the QP state
// machine), reference counts and destroy rules, the GID table and events,
// and it calls a DeviceOps implementation (struct ib_device_ops) for
// everything a driver does. Package emu/rxe is that driver: an emulated
// device behaving like the kernel's rxe; rxe.New returns the device and
// its Close removes it. Drivers reach the core through package
// emu/internal/driver, users never need to; the kernel's helpers that only
// mirror ib_verbs.h one to one are in package emu/kverbs, the vocabulary
// shared with the QP state machine (access flags, MTU, AH attributes) in
// package ib.
//
// Every error wraps the kernel's errno (errors.Is(err, unix.EBUSY)) with
// the call and the reason in its message. Nothing here reads the wall
// clock or a global random source: the Device takes a clock.Clock, the
// driver a seed.
package emu

import (
	"context"
	"iter"
	"net"
	"net/netip"
	"sync"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// NetDev is the Go stand-in for the struct net_device a RoCE device is
// bound to: its name, MAC, MTU, addresses, speed and link state.
type NetDev struct {
	// Name is the interface name (e.g. "tap0").
	Name string
	// MAC is the hardware address; it gives the node GUID and the default
	// GID.
	MAC net.HardwareAddr
	// MTU is the netdev MTU; 0 means 1500.
	MTU int
	// Addrs are the interface's IP addresses, in the order they were
	// added; each becomes a RoCEv2 GID.
	Addrs []netip.Addr
	// SpeedMbps is the ethtool speed; 0 or less counts as 1000 (as
	// ib_get_eth_speed does for an unknown speed).
	SpeedMbps int
	// Down marks the interface administratively down; NoCarrier marks it
	// up without carrier. The zero value is up with carrier.
	Down, NoCarrier bool
	// VLANID is the 802.1Q VLAN ID when the interface is a VLAN device
	// (is_vlan_dev; `ip link add link IF name IF.ID type vlan id ID`),
	// 0 otherwise. The GIDs carry it and receive completions report it.
	VLANID uint16
}

// Config configures a Device. Every zero value has a documented default.
type Config struct {
	// Name is the device name; "" means "rxe0".
	Name string
	// NetDev is the interface the device is bound to; a nil MAC means
	// 52:54:00:12:34:56.
	NetDev NetDev
	// Clock provides time; nil means clock.Real{}.
	Clock clock.Clock
	// Memory is the address space DMA addresses and SGE addresses refer
	// to; nil means a fresh dma.NewMemory(0).
	Memory *dma.Memory
	// DMA configures the device's DMA mapper (strict mode); nil means the
	// kernel's virtual-DMA behaviour.
	DMA *dma.Config
	// Resolver resolves a destination MAC for user AHs and user modifies
	// (the IP stack's ARP/ND); nil means unicast resolution fails with
	// EHOSTUNREACH. The host/tap layer provides the real one.
	Resolver Resolver
	// Recorder, if set, sees every modify QP, completion, async event and
	// failed verb of the device (a coverage profile); nil records nothing.
	Recorder Recorder
}

// Resolver answers which MAC has an IP address: the neighbour layer (ARP,
// ND) of the host a device is bound to, as the kernel's
// rdma_addr_find_l2_eth_by_grh asks it. It is the one shape every layer
// takes: the device resolves user AHs and user modifies with it, the driver
// its per-packet destinations, workload and cma their address vectors.
type Resolver interface {
	// Resolve returns the Ethernet address of ip (IPv4 unmapped). It may
	// send requests and wait until ctx ends; with an already cancelled
	// ctx it answers from its cache only (a miss may start a resolution
	// in the background and fails).
	Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error)
}

// ResolverFunc adapts a function to a Resolver.
type ResolverFunc func(ctx context.Context, ip netip.Addr) ([6]byte, error)

// Resolve calls f(ctx, ip).
func (f ResolverFunc) Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error) { return f(ctx, ip) }

// routeHopLimit is the hop limit of a resolved unicast route: the default
// IPv4 TTL and IPv6 hop limit (64) that rdma_addr_find_l2_eth_by_grh
// reports for a route without its own.
const routeHopLimit = 64

// Device is an RDMA device: the Go counterpart of struct ib_device. A
// driver creates it (emu/rxe.New, whose rxe.Device embeds it and removes
// it with Close); it is used through its methods and the objects they
// create. It is safe for concurrent use.
type Device struct {
	name   string
	ops    DeviceOps
	cfg    Config
	clock  clock.Clock
	mapper *dma.Mapper

	mu        sync.Mutex
	cond      *sync.Cond
	refs      int
	gone      bool
	netdev    NetDev
	gids      []GIDEntry // port 1's table, GIDTblLen slots
	handlers  []func(Event)
	clients   []*Client
	clientDat map[*Client]any
}

// newDevice registers a device driven by ops (ib_alloc_device +
// ib_register_device): it reads the port's immutable data, builds the GID
// table from the netdev's addresses and returns the device with one
// reference held by its registration. Drivers reach it through package
// emu/internal/driver.
func newDevice(ops DeviceOps, cfg Config) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = "rxe0"
	}
	if cfg.NetDev.MAC == nil {
		cfg.NetDev.MAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	}
	if len(cfg.NetDev.MAC) != 6 {
		return nil, errorf(unix.EINVAL, "new device %s: MAC %v is not 6 bytes", cfg.Name, cfg.NetDev.MAC)
	}
	if cfg.NetDev.MTU == 0 {
		cfg.NetDev.MTU = 1500
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Memory == nil {
		cfg.Memory = dma.NewMemory(0)
	}
	d := &Device{name: cfg.Name, ops: ops, cfg: cfg, clock: cfg.Clock, netdev: cfg.NetDev,
		mapper: dma.NewMapper(cfg.Memory, cfg.DMA), refs: 1, clientDat: map[*Client]any{}}
	d.cond = sync.NewCond(&d.mu)
	imm, err := ops.PortImmutable(1)
	if err != nil {
		return nil, err
	}
	d.gids = make([]GIDEntry, imm.GIDTblLen)
	d.fillGIDs()
	return d, nil
}

// Name returns the device name (ib_device.name).
func (d *Device) Name() string { return d.name }

// Clock returns the device's clock.
func (d *Device) Clock() clock.Clock { return d.clock }

// DMA returns the device's DMA mapper: the ib_dma_* calls of a virtual-DMA
// device (package emu/dma).
func (d *Device) DMA() *dma.Mapper { return d.mapper }

// Memory returns the device's address space: every buffer an MR registers
// (PD.RegUserMR's start) is allocated there, and the data of completed
// receives, READs and WRITEs is read back from there.
func (d *Device) Memory() *dma.Memory { return d.cfg.Memory }

// NetDev returns a copy of the bound interface's current state.
func (d *Device) NetDev() NetDev {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.netdev
	n.Addrs = append([]netip.Addr(nil), n.Addrs...)
	return n
}

// Resolver returns the configured MAC resolver (nil if none).
func (d *Device) Resolver() Resolver { return d.cfg.Resolver }

// ProcessMAD is the driver's process_mad for a MAD port received on its
// GSI QP: the reply and true, or false where the driver has no such op or
// leaves the MAD to the MAD layer's agents.
func (d *Device) ProcessMAD(port uint32, in mad.MAD) (mad.MAD, bool) {
	p, ok := d.ops.(MADProcessor)
	if !ok || !d.IsPortValid(port) {
		return nil, false
	}
	return p.ProcessMAD(port, in)
}

// TakeMADLayer makes the caller the device's MAD layer, as ib_mad's
// ib_mad_port_open is on a running kernel: the next GSI QP created (by a
// kernel consumer, QP.Modify without udata) takes the QP the device
// reserved for that layer and receives what arrives for QPN 1. Package
// cma's CM uses it to run the Communication Manager on the device. On
// rxe it fails with EINVAL on a device made with Config.NoMADLayer (create
// the GSI QP directly there) and with EBUSY once taken; a driver without a
// MAD layer of its own gives EOPNOTSUPP.
func (d *Device) TakeMADLayer() error {
	t, ok := d.ops.(MADLayerTaker)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "take MAD layer: the driver keeps no GSI QP for a MAD layer")
	}
	return t.TakeMADLayer()
}

// TryGet takes a reference on the device unless it is being unregistered
// and reports whether it did (ib_device_try_get). Each successful TryGet is
// paired with Put.
func (d *Device) TryGet() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return false
	}
	d.refs++
	return true
}

// Put drops a reference taken by TryGet (ib_device_put).
func (d *Device) Put() {
	d.mu.Lock()
	d.refs--
	d.cond.Broadcast()
	d.mu.Unlock()
}

// unregister removes the device (ib_unregister_device): TryGet fails from
// now on, clients are removed, and it waits until every reference taken by
// TryGet has been put. The driver calls it when the device goes away.
func (d *Device) unregister() {
	d.mu.Lock()
	if d.gone {
		d.mu.Unlock()
		return
	}
	d.gone = true
	clients := d.clients
	d.clients = nil
	d.mu.Unlock()
	for i := len(clients) - 1; i >= 0; i-- {
		c := clients[i]
		if c.Remove != nil {
			c.Remove(d, d.ClientData(c))
		}
		d.SetClientData(c, nil)
	}
	d.mu.Lock()
	d.refs--
	for d.refs > 0 {
		d.cond.Wait()
	}
	d.mu.Unlock()
}

// Query returns the device attributes (ib_query_device / the cached
// ib_device.attrs).
func (d *Device) Query() DeviceAttr { return d.ops.QueryDevice() }

// QueryPort returns a port's attributes (ib_query_port); an invalid port
// fails with EINVAL.
func (d *Device) QueryPort(port uint32) (PortAttr, error) {
	if !d.IsPortValid(port) {
		return PortAttr{}, errorf(unix.EINVAL, "query port %d of %s: no such port", port, d.name)
	}
	return d.ops.QueryPort(port)
}

// QueryPKey returns the P_Key at index of port's table (ib_query_pkey).
func (d *Device) QueryPKey(port uint32, index uint16) (uint16, error) {
	if !d.IsPortValid(port) {
		return 0, errorf(unix.EINVAL, "query pkey: port %d of %s: no such port", port, d.name)
	}
	return d.ops.QueryPKey(port, index)
}

// immutable returns a port's immutable data; the port must be valid.
func (d *Device) immutable(port uint32) PortImmutable {
	imm, err := d.ops.PortImmutable(port)
	if err != nil {
		return PortImmutable{}
	}
	return imm
}

// Event is struct ib_event: an asynchronous event and the object it
// concerns (exactly one of QP, CQ, SRQ, or Port for port events).
type Event struct {
	Device *Device   // the device that raised the event (ib_event.device)
	Type   EventType // IB_EVENT_* (ib_event.event)
	QP     *QP       // the QP of a QP event, else nil (element.qp)
	CQ     *CQ       // the CQ of IB_EVENT_CQ_ERR, else nil (element.cq)
	SRQ    *SRQ      // the SRQ of an SRQ event, else nil (element.srq)
	Port   uint32    // the port number of a port event, else 0 (element.port_num)
}

// RegisterEventHandler adds h to the handlers called for device and port
// events (ib_register_event_handler). QP, CQ and SRQ events go to the
// handler given when the object was created.
func (d *Device) RegisterEventHandler(h func(Event)) {
	d.mu.Lock()
	d.handlers = append(d.handlers, h)
	d.mu.Unlock()
}

// dispatch delivers ev to its object's handler, or, for device and port
// events, to every registered handler (ib_dispatch_event). Drivers call it
// outside their locks.
func (d *Device) dispatch(ev Event) {
	ev.Device = d
	if d.cfg.Recorder != nil {
		d.cfg.Recorder.Event(ev.Type)
	}
	switch {
	case ev.QP != nil:
		if h := ev.QP.EventHandler; h != nil {
			h(ev)
		}
	case ev.CQ != nil:
		if h := ev.CQ.EventHandler; h != nil {
			h(ev)
		}
	case ev.SRQ != nil:
		if h := ev.SRQ.EventHandler; h != nil {
			h(ev)
		}
	default:
		d.mu.Lock()
		hs := append([]func(Event){}, d.handlers...)
		d.mu.Unlock()
		for _, h := range hs {
			h(ev)
		}
	}
}

// Client is struct ib_client: a consumer that attaches per-device data
// when added to a device.
type Client struct {
	Name string // the client's name (ib_client.name)
	// Add is called by AddClient; its result becomes the client data.
	Add func(d *Device) (any, error)
	// Remove is called when the client or the device goes away.
	Remove func(d *Device, data any)
}

// AddClient attaches c to the device and stores what c.Add returns as its
// client data (the per-device half of ib_register_client).
func (d *Device) AddClient(c *Client) error {
	var data any
	if c.Add != nil {
		v, err := c.Add(d)
		if err != nil {
			return err
		}
		data = v
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		return errorf(unix.ENODEV, "add client %s to %s: device unregistered", c.Name, d.name)
	}
	d.clients = append(d.clients, c)
	d.clientDat[c] = data
	return nil
}

// ClientData returns the data c stored on the device, nil if none
// (ib_get_client_data).
func (d *Device) ClientData(c *Client) any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clientDat[c]
}

// SetClientData replaces c's data on the device (ib_set_client_data).
func (d *Device) SetClientData(c *Client, data any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if data == nil {
		delete(d.clientDat, c)
		return
	}
	d.clientDat[c] = data
}

// RDMANetdev is the Go stand-in for struct rdma_netdev: the offload hooks
// an upper-layer netdev (IPoIB) gets from a device that accelerates it.
type RDMANetdev struct {
	Hca         *Device                                         // the accelerating device (rdma_netdev.hca)
	PortNum     uint32                                          // the device port the netdev runs on (rdma_netdev.port_num)
	MTU         int                                             // the netdev MTU in bytes (rdma_netdev.mtu)
	Send        func(dest *AH, dqpn uint32, frame []byte) error // sends frame to QP dqpn behind dest (rdma_netdev.send)
	AttachMcast func(gid GID, mlid uint16) error                // joins the multicast group gid/mlid (rdma_netdev.attach_mcast)
	DetachMcast func(gid GID, mlid uint16) error                // leaves the multicast group gid/mlid (rdma_netdev.detach_mcast)
}

// RDMANetdevAllocator is the optional driver op behind AllocRDMANetdev
// (rdma_netdev_get_params).
type RDMANetdevAllocator interface {
	// AllocRDMANetdev returns an accelerated netdev for port.
	AllocRDMANetdev(port uint32) (*RDMANetdev, error)
}

// AllocRDMANetdev returns an accelerated netdev for port
// (rdma_alloc_netdev); a driver without the op (rxe) gives EOPNOTSUPP.
func (d *Device) AllocRDMANetdev(port uint32) (*RDMANetdev, error) {
	a, ok := d.ops.(RDMANetdevAllocator)
	if !ok {
		return nil, errorf(unix.EOPNOTSUPP, "alloc rdma netdev on %s port %d: driver has no rdma_netdev_get_params", d.name, port)
	}
	return a.AllocRDMANetdev(port)
}

// StartPort returns the first port number (rdma_start_port): 0 for a
// switch, else 1.
func (d *Device) StartPort() uint32 {
	if d.ops.QueryDevice().IsSwitch {
		return 0
	}
	return 1
}

// EndPort returns the last port number (rdma_end_port): 0 for a switch,
// else the physical port count.
func (d *Device) EndPort() uint32 {
	if d.ops.QueryDevice().IsSwitch {
		return 0
	}
	return uint32(d.ops.QueryDevice().PhysPortCnt)
}

// Ports iterates the ports from StartPort to EndPort inclusive
// (rdma_for_each_port).
func (d *Device) Ports() iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		for p := d.StartPort(); p <= d.EndPort(); p++ {
			if !yield(p) {
				return
			}
		}
	}
}

// IsPortValid reports StartPort <= port <= EndPort (rdma_is_port_valid).
func (d *Device) IsPortValid(port uint32) bool {
	return port >= d.StartPort() && port <= d.EndPort()
}

// qpstate re-exports used in signatures.
var _ = qpstate.StateReset

// setNetDevState records the bound interface's state: administratively
// down, or up without carrier (rxe.Device.SetLinkState).
func (d *Device) setNetDevState(down, noCarrier bool) {
	d.mu.Lock()
	d.netdev.Down, d.netdev.NoCarrier = down, noCarrier && !down
	d.mu.Unlock()
}

// setNetDevLink records the bound interface going up (with carrier) or
// down; drivers call it from their link notifier (rxe.Device.SetLink).
func (d *Device) setNetDevLink(up bool) {
	d.mu.Lock()
	d.netdev.Down, d.netdev.NoCarrier = !up, false
	d.mu.Unlock()
}
