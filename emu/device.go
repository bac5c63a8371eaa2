// Package emu is the core verbs layer of the emulated HCA: the Go
// counterpart of drivers/infiniband/core. It owns the objects a consumer
// sees (Device, PD, MR, MW, CQ, SRQ, QP, AH), the argument checks the core
// makes before a driver is called (via package qpstate for the QP state
// machine), reference counts and destroy rules, the GID table and events,
// and it calls a DeviceOps implementation (struct ib_device_ops) for
// everything a driver does. Package emu/rxe is that driver: an emulated
// device behaving like the kernel's rxe.
//
// Every error wraps the kernel's errno (errors.Is(err, unix.EBUSY)) with
// the call and the reason in its message. Nothing here reads the wall
// clock or a global random source: the Device takes a clock.Clock, the
// driver a seed.
package emu

import (
	"iter"
	"net"
	"net/netip"
	"sync"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu/dma"
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

// Resolver resolves the Ethernet address for a destination GID from a
// source GID, as the kernel's rdma_addr_find_l2_eth_by_grh does through the
// routing table and neighbour cache. It returns the MAC and the route's hop
// limit.
type Resolver interface {
	// ResolveDMAC returns the MAC and hop limit for dgid, seen from sgid.
	ResolveDMAC(sgid, dgid GID) (mac [6]byte, hopLimit uint8, err error)
}

// Device is an RDMA device: the Go counterpart of struct ib_device. It is
// created by a driver (emu/rxe.New) through NewDevice and used through its
// methods and the objects they create. It is safe for concurrent use.
type Device struct {
	name   string
	ops    DeviceOps
	cfg    Config
	clock  clock.Clock
	mapper *dma.Mapper
	node   *DevNode

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

// NewDevice registers a device driven by ops (ib_alloc_device +
// ib_register_device): it reads the port's immutable data, builds the GID
// table from the netdev's addresses and returns the device with one
// reference held by its registration.
func NewDevice(ops DeviceOps, cfg Config) (*Device, error) {
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
	d.node = &DevNode{Name: cfg.Name, ibdev: d}
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

// Ops returns the driver's operations (ib_device.ops).
func (d *Device) Ops() DeviceOps { return d.ops }

// Clock returns the device's clock.
func (d *Device) Clock() clock.Clock { return d.clock }

// DMA returns the device's DMA mapper: the ib_dma_* calls of a virtual-DMA
// device (package emu/dma).
func (d *Device) DMA() *dma.Mapper { return d.mapper }

// Memory returns the address space SGE addresses refer to.
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

// Unregister removes the device (ib_unregister_device): TryGet fails from
// now on, clients are removed, and it waits until every reference taken by
// TryGet has been put.
func (d *Device) Unregister() {
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

// Dispatch delivers ev to its object's handler, or, for device and port
// events, to every registered handler (ib_dispatch_event). Drivers call it
// outside their locks.
func (d *Device) Dispatch(ev Event) {
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

// DevNode is the Go stand-in for the struct device embedded in an
// ib_device (what sysfs and the driver core see). RDMADeviceToIBDev and
// RDMADeviceToDrvDevice turn it back into the device, as the kernel's
// container_of helpers do.
type DevNode struct {
	Name  string // the device name, e.g. "rxe0" (dev_name of ib_device.dev)
	ibdev *Device
}

// Node returns the device's struct device stand-in.
func (d *Device) Node() *DevNode { return d.node }

// RDMADeviceToIBDev returns the Device a DevNode belongs to
// (rdma_device_to_ibdev).
func RDMADeviceToIBDev(n *DevNode) *Device { return n.ibdev }

// RDMADeviceToDrvDevice returns the driver's own device structure behind a
// DevNode when the driver is of type T (rdma_device_to_drv_device, which is
// container_of to the driver's struct): the DeviceOps value, asserted to T.
func RDMADeviceToDrvDevice[T any](n *DevNode) (T, bool) {
	t, ok := n.ibdev.ops.(T)
	return t, ok
}

// NUMANoNode is NUMA_NO_NODE.
const NUMANoNode = -1

// IBDevToNode returns the NUMA node of the device's parent device
// (ibdev_to_node). A software device has no parent bus device, so it is
// NUMANoNode.
func IBDevToNode(d *Device) int { return NUMANoNode }

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
	if d.CapIBSwitch() {
		return 0
	}
	return 1
}

// EndPort returns the last port number (rdma_end_port): 0 for a switch,
// else the physical port count.
func (d *Device) EndPort() uint32 {
	if d.CapIBSwitch() {
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

// SetNetDevLink records the bound interface going up (with carrier) or
// down; drivers call it from their link notifier.
func (d *Device) SetNetDevLink(up bool) {
	d.mu.Lock()
	d.netdev.Down, d.netdev.NoCarrier = !up, false
	d.mu.Unlock()
}
