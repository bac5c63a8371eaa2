package cma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// PortSpace is enum rdma_ucm_port_space.
type PortSpace uint16

// The port spaces.
const (
	PSIPoIB PortSpace = mad.PortSpaceIPoIB
	PSIB    PortSpace = mad.PortSpaceIB
	PSTCP   PortSpace = mad.PortSpaceTCP
	PSUDP   PortSpace = mad.PortSpaceUDP
)

// UDPQKey is RDMA_UDP_QKEY, the Q_Key of the UD QPs of RDMA_PS_UDP.
const UDPQKey = mad.RDMAUDPQKey

// State is enum rdma_cm_state.
type State int

// The rdma_cm states, with the kernel's values.
const (
	StateIdle State = iota
	StateAddrQuery
	StateAddrResolved
	StateRouteQuery
	StateRouteResolved
	StateConnect
	StateDisconnect
	StateAddrBound
	StateListen
	StateDeviceRemoval
	StateDestroying
)

func (s State) String() string {
	names := [...]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
		"DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}
	if s >= 0 && int(s) < len(names) {
		return "RDMA_CM_" + names[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// cmState is enum ib_cm_state, the IB CM half of a connected ID.
type cmState int

const (
	cmIdle cmState = iota
	cmREQSent
	cmREQRcvd // with rdma_cm's delayed MRA: MRA_REQ_SENT
	cmREPSent
	cmREPRcvd // with rdma_cm's delayed MRA: MRA_REP_SENT
	cmEstablished
	cmDREQSent
	cmDREQRcvd
	cmTimewait
	cmSIDRReqSent
	cmSIDRReqRcvd
)

// EventType is enum rdma_cm_event_type.
type EventType uint32

// The events, with the kernel's values.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

func (e EventType) String() string {
	names := [...]string{"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
		"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED", "DISCONNECTED",
		"DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT"}
	if int(e) < len(names) {
		return "RDMA_CM_EVENT_" + names[e]
	}
	return fmt.Sprintf("EventType(%d)", uint32(e))
}

// ConnParam is struct rdma_conn_param.
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                uint8
	QPNum              uint32
	QKey               uint32
}

// UDParam is struct rdma_ud_param.
type UDParam struct {
	PrivateData []byte
	AH          ib.AHAttr
	QPNum       uint32
	QKey        uint32
}

// Event is struct rdma_cm_event: what happened to ID. Status is 0, a
// negative errno, or (REJECTED) the REJ reason.
type Event struct {
	Type      EventType
	Status    int32
	ID        *ID
	Conn      ConnParam
	UD        UDParam
	Multicast *Multicast // MULTICAST_JOIN and MULTICAST_ERROR: the join
}

// Handler receives an ID's events. For CONNECT_REQUEST it is the
// listener's handler and Event.ID the new ID (whose Context is still the
// listener's); an error refuses the request silently, as a full backlog
// does (the peer's retransmission may find room later).
type Handler func(ev *Event) error

// ID is an rdma_cm_id.
type ID struct {
	cm      *CM
	handler Handler
	ctx     atomic.Value
	ps      PortSpace
	qpType  qpstate.Type

	state     State
	src, dst  netip.AddrPort
	bound     bool
	hasDev    bool // the ID is attached to the device (a local address or a connection)
	gidIdx    int
	dgid      emu.GID
	tos       uint8
	reuseAddr bool
	afOnly    bool
	afOnlySet bool  // RDMA_OPTION_ID_AFONLY was given (CMA_OPTION_AFONLY)
	netdev    bool  // the ID has a bound netdev (dev_addr.bound_dev_if): its route can be resolved
	ackTO     uint8 // RDMA_OPTION_ID_ACK_TIMEOUT, 0 if unset
	numPaths  int
	flowLabel uint32
	backlog   int
	listener  *ID // the listener a passive ID came from
	seqNum    uint32
	resolving context.CancelFunc

	// The IB CM half.
	cm_         cmState
	localID     uint32
	remoteID    uint32
	remoteGUID  uint64
	tid         uint64
	drepTID     uint64 // the TID of the peer's DREQ, which our DREP echoes
	qpNum       uint32 // our QP number from the connect or accept parameters
	remoteQPN   uint32
	req, rep    mad.MAD
	last        mad.MAD // what the timer resends
	lastTimeout time.Duration
	tries       int
	maxRetries  int
	timer       clock.Timer
	respRes     uint8 // our responder resources (max_dest_rd_atomic)
	initDepth   uint8 // our initiator depth (max_rd_atomic)
	destroyed   bool
	mcs         []*Multicast
	serial      uint64 // creation order (RemoveDevice's walk)
}

// CreateID is rdma_create_id: a new ID in port space ps for QPs of type
// qpType, whose events go to h. context is the consumer's (Context).
func (c *CM) CreateID(ps PortSpace, qpType qpstate.Type, h Handler, context any) (*ID, error) {
	switch ps {
	case PSTCP, PSUDP, PSIPoIB, PSIB:
	default:
		return nil, fmt.Errorf("cma: port space %#x: %w", uint16(ps), unix.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("cma: closed: %w", unix.ENODEV)
	}
	id := c.newIDLocked(ps, qpType, h)
	id.ctx.Store(ctxBox{context})
	return id, nil
}

func (c *CM) newIDLocked(ps PortSpace, qpType qpstate.Type, h Handler) *ID {
	id := &ID{cm: c, handler: h, ps: ps, qpType: qpType, seqNum: c.rnd.Uint32() & ib.PSNMask}
	c.serial++
	id.serial = c.serial
	c.ids[id] = struct{}{}
	return id
}

type ctxBox struct{ v any }

// Context returns the consumer's context of the ID (rdma_cm_id.context).
// It may be called from a Handler.
func (id *ID) Context() any {
	b, _ := id.ctx.Load().(ctxBox)
	return b.v
}

// SetContext replaces the consumer's context.
func (id *ID) SetContext(v any) { id.ctx.Store(ctxBox{v}) }

// CM returns the CM the ID belongs to.
func (id *ID) CM() *CM { return id.cm }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QPType returns the type of QP the ID connects.
func (id *ID) QPType() qpstate.Type { return id.qpType }

// Info is what rdma_cm's queries report of an ID.
type Info struct {
	State     State
	Src, Dst  netip.AddrPort
	HasDevice bool
	NodeGUID  uint64
	PortNum   uint8
	PKey      uint16
	SGID      emu.GID
	DGID      emu.GID
	NumPaths  int
	Path      PathRecord
	QPNum     uint32 // the QP that connect or accept named (id_priv->qp_num); 0 before
}

// PathRecord is the route of a resolved ID (struct sa_path_rec, RoCE).
type PathRecord struct {
	DGID, SGID   emu.GID
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
	PKey         uint16
	SL           uint8
	MTU          ib.MTU
	Rate         uint8
	PacketLife   uint8
	ServiceID    uint64
}

// Info returns the ID's addresses, device and route.
func (id *ID) Info() Info {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	in := Info{State: id.state, Src: id.src, Dst: id.dst, HasDevice: id.hasDev, NumPaths: id.numPaths, QPNum: id.qpNum}
	if id.hasDev {
		in.NodeGUID, in.PortNum, in.PKey = c.guid, 1, 0xffff
		in.SGID = c.gidAt(id.gidIdx)
		in.DGID = id.dgid
		if in.DGID.IsZero() && id.dst.Addr().IsValid() {
			in.DGID = emu.GIDFromAddr(id.dst.Addr())
		}
		in.Path = PathRecord{DGID: in.DGID, SGID: in.SGID, FlowLabel: id.flowLabel, HopLimit: defaultHopLimit,
			TrafficClass: id.tos, PKey: 0xffff, MTU: c.mtu, Rate: 0, PacketLife: packetLifeTime,
			ServiceID: serviceID(id.ps, id.dst.Port())}
	}
	return in
}

func serviceID(ps PortSpace, port uint16) uint64 { return mad.ServiceID(uint16(ps), port) }

// event delivers an event of id to its handler; c.mu held.
func (id *ID) event(ev Event) error {
	if id.destroyed || id.handler == nil {
		return nil
	}
	if id.state == StateDeviceRemoval && ev.Type != EventDeviceRemoval {
		// The kernel's handlers (cma_ib_handler, addr_handler,
		// cma_ib_mc_handler...) want the state they started in: a
		// removed ID hears nothing more.
		return nil
	}
	ev.ID = id
	return id.handler(&ev)
}

// SetTOS is rdma_set_service_type.
func (id *ID) SetTOS(tos uint8) {
	id.cm.mu.Lock()
	id.tos = tos
	id.cm.mu.Unlock()
}

// SetReuseAddr is rdma_set_reuseaddr: reuse may be turned on in any
// state but LISTEN, and off only while IDLE (EINVAL).
func (id *ID) SetReuseAddr(on bool) error {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if on && id.state != StateListen || id.state == StateIdle {
		id.reuseAddr = on
		return nil
	}
	return fmt.Errorf("cma: reuseaddr %v in %v: %w", on, id.state, unix.EINVAL)
}

// SetAFOnly is rdma_set_afonly: only while IDLE or ADDR_BOUND (EINVAL).
// Without it, a bind makes an IPv4 ID AF-only and an IPv6 one not (the
// net.ipv6.bindv6only sysctl's default).
func (id *ID) SetAFOnly(on bool) error {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if id.state != StateIdle && id.state != StateAddrBound {
		return fmt.Errorf("cma: afonly in %v: %w", id.state, unix.EINVAL)
	}
	id.afOnly, id.afOnlySet = on, true
	return nil
}

// SetAckTimeout is rdma_set_ack_timeout: the QP timeout INIT_QP_ATTR
// gives for RTS.
func (id *ID) SetAckTimeout(t uint8) error {
	if t > 31 {
		return fmt.Errorf("cma: ack timeout %d: %w", t, unix.EINVAL)
	}
	id.cm.mu.Lock()
	id.ackTO = t
	id.cm.mu.Unlock()
	return nil
}

// Bind is rdma_bind_addr: the ID takes a local address (or the wildcard of
// its family) and a port (0: an ephemeral one). Only an IDLE ID binds
// (EINVAL). As cma_any_addr, a loopback address binds as the wildcard
// does: the ID stays without a device until it resolves an address or
// listens (on every device). An IPv6 link-local address needs its scope
// (the address's zone: EINVAL without, cma_check_linklocal); another
// address that is not the device's is EADDRNOTAVAIL (ENODEV with a scope:
// the interface is known, the device has no such GID). A port another ID
// holds is EADDRINUSE, or EADDRNOTAVAIL where either address is a
// wildcard (cma_check_port).
func (id *ID) Bind(a netip.AddrPort) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state != StateIdle {
		return fmt.Errorf("cma: bind in %v: %w", id.state, unix.EINVAL)
	}
	if err := id.bindLocked(a); err != nil {
		return err
	}
	id.state = StateAddrBound
	return nil
}

// anyAddr is cma_any_addr: the wildcard or a loopback address, neither of
// which names a device (whatever its zone, the sockaddr's scope).
func anyAddr(a netip.Addr) bool {
	a = a.WithZone("")
	return a.IsUnspecified() || a.IsLoopback()
}

// unspecified reports the wildcard, whatever its zone.
func unspecified(a netip.Addr) bool { return a.WithZone("").IsUnspecified() }

// router is what a device's resolver may also know: whether the host has
// a route to an address (package node's Node).
type router interface{ HasRoute(dst netip.Addr) bool }

func (id *ID) bindLocked(a netip.AddrPort) error {
	c := id.cm
	addr := a.Addr()
	if !addr.IsValid() {
		return fmt.Errorf("cma: bind: no address: %w", unix.EAFNOSUPPORT)
	}
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	if addr.Is6() && addr.IsLinkLocalUnicast() && addr.Zone() == "" {
		return fmt.Errorf("cma: bind %v: link-local address without a scope: %w", addr, unix.EINVAL)
	}
	hasDev := false
	idx := 0
	if !anyAddr(addr) {
		i, err := c.localGIDIndex(addr)
		if err != nil {
			if addr.Zone() != "" {
				return fmt.Errorf("cma: bind: %v: %w", err, unix.ENODEV)
			}
			return fmt.Errorf("cma: bind: %w", err)
		}
		idx, hasDev = i, true
	}
	afOnly := id.afOnly
	if !id.afOnlySet {
		afOnly = addr.Is4()
	}
	port := a.Port()
	if port == 0 {
		p, err := c.ephemeralPortLocked(id.ps, addr)
		if err != nil {
			return err
		}
		port = p
	} else if err := c.portConflictLocked(id, netip.AddrPortFrom(addr, port), afOnly, id.reuseAddr); err != nil {
		return err
	}
	id.src = netip.AddrPortFrom(addr, port)
	id.bound, id.hasDev, id.gidIdx, id.afOnly = true, hasDev, idx, afOnly
	id.netdev = hasDev || addr.Zone() != ""
	k := portKey{id.ps, port}
	c.ports[k] = append(c.ports[k], id)
	return nil
}

// portConflictLocked is cma_check_port: whether id may take a (its own
// AF-only setting afOnly) beside the IDs bound to that port.
func (c *CM) portConflictLocked(id *ID, a netip.AddrPort, afOnly, reuse bool) error {
	for _, o := range c.ports[portKey{id.ps, a.Port()}] {
		if o == id || reuse && o.reuseAddr {
			continue
		}
		oa := o.src.Addr()
		if afOnly && o.afOnly && oa.Is4() != a.Addr().Is4() {
			continue
		}
		if anyAddr(oa) || anyAddr(a.Addr()) {
			return fmt.Errorf("cma: bind %v: %v holds the port: %w", a, o.src, unix.EADDRNOTAVAIL)
		}
		if oa == a.Addr() {
			return fmt.Errorf("cma: bind %v: %w", a, unix.EADDRINUSE)
		}
	}
	return nil
}

func (c *CM) ephemeralPortLocked(ps PortSpace, addr netip.Addr) (uint16, error) {
	n := ephemeralPortLast - ephemeralPortFirst + 1
	start := c.rnd.IntN(n)
	for i := range n {
		p := uint16(ephemeralPortFirst + (start+i)%n)
		if len(c.ports[portKey{ps, p}]) == 0 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("cma: no free port: %w", unix.EADDRNOTAVAIL)
}

func (id *ID) unbindLocked() {
	if !id.bound {
		return
	}
	c := id.cm
	k := portKey{id.ps, id.src.Port()}
	l := c.ports[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(c.ports, k)
	} else {
		c.ports[k] = l
	}
	id.bound = false
}

// ResolveAddr is rdma_resolve_addr: bind to src (or, if src is not
// valid, to the wildcard of dst's family, with dst's zone, on an ephemeral
// port) if the ID is IDLE, then find the local address and the neighbour
// that reach dst. A bound ID of another family than dst's stays bound
// (EINVAL). The answer comes as ADDR_RESOLVED or ADDR_ERROR (status
// −errno) within timeout. A wildcard or loopback destination resolves at
// once to the device itself (cma_resolve_loopback): an ID without a
// device takes port 1's GID 0 and a loopback source address
// (cma_bind_loopback), and has no netdev to resolve a route on.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	d := dst.Addr()
	if d.Is4In6() {
		d = d.Unmap()
	}
	if !d.IsValid() {
		return fmt.Errorf("cma: resolve: destination %v: %w", dst, unix.EINVAL)
	}
	// resolve_prepare_src.
	switch id.state {
	case StateAddrBound:
	case StateIdle:
		s := src
		if !s.Addr().IsValid() {
			u := unspecifiedOf(d)
			if d.Is6() {
				u = u.WithZone(d.Zone())
			}
			s = netip.AddrPortFrom(u, 0)
		}
		if err := id.bindLocked(s); err != nil {
			return err
		}
		id.state = StateAddrBound
		if s.Addr().Zone() != "" {
			id.netdev = true
		}
	default:
		return fmt.Errorf("cma: resolve in %v: %w", id.state, unix.EINVAL)
	}
	if id.src.Addr().Is4() != d.Is4() {
		return fmt.Errorf("cma: resolve %v from %v: %w", d, id.src, unix.EINVAL)
	}
	id.dst = netip.AddrPortFrom(d, dst.Port())
	if anyAddr(d) {
		return id.resolveLoopbackLocked()
	}
	// addr_resolve: without a bound netdev (a wildcard or loopback
	// source) the route lookup fails at once for a destination the host
	// has no route to; with one the destination is taken as on the link
	// (flowi4_oif) and its neighbour is asked.
	if r, ok := c.dev.Resolver().(router); ok && !id.netdev && !r.HasRoute(d) {
		return fmt.Errorf("cma: resolve %v: no route: %w", d, unix.ENETUNREACH)
	}
	id.state = StateAddrQuery
	if id.src.Addr().IsLoopback() {
		// A loopback source reaches the host's own addresses only
		// (ip_route_output_key refuses an IPv4 one leaving the host,
		// EINVAL); the route it finds goes through the loopback
		// device, which has no RDMA device (cma_acquire_dev_by_src_ip:
		// ADDR_ERROR, ENODEV).
		if _, err := c.localGIDIndex(d); err != nil && d.Is4() {
			id.state = StateAddrBound
			return fmt.Errorf("cma: resolve %v from %v: %w", d, id.src, unix.EINVAL)
		}
		c.answerAddrQuery(id, StateAddrBound, Event{Type: EventAddrError, Status: -int32(unix.ENODEV)})
		return nil
	}
	if timeout <= 0 || timeout > time.Minute {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	id.resolving = cancel
	srcAddr := id.src.Addr()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		idx, err := c.resolve(ctx, srcAddr.WithZone(""), d.WithZone(""))
		c.mu.Lock()
		defer c.mu.Unlock()
		if id.state != StateAddrQuery || id.destroyed {
			return
		}
		id.resolving = nil
		if err != nil {
			id.state = StateAddrBound
			id.event(Event{Type: EventAddrError, Status: -int32(errnoOf(err, unix.EHOSTUNREACH))})
			return
		}
		id.gidIdx, id.hasDev, id.netdev = idx, true, true
		if unspecified(id.src.Addr()) {
			id.src = netip.AddrPortFrom(c.gidAt(idx).Addr().WithZone(id.src.Addr().Zone()), id.src.Port())
		}
		id.dgid = emu.GIDFromAddr(d)
		id.state = StateAddrResolved
		id.event(Event{Type: EventAddrResolved})
	}()
	return nil
}

// resolveLoopbackLocked is cma_resolve_loopback: the destination is the
// device's own GID; ADDR_RESOLVED comes from another goroutine, as from
// the kernel's work queue.
func (id *ID) resolveLoopbackLocked() error {
	c := id.cm
	if !id.hasDev {
		// cma_bind_loopback: port 1's first GID.
		if _, err := c.dev.QueryGID(1, 0); err != nil {
			return fmt.Errorf("cma: resolve loopback: %w", err)
		}
		id.hasDev, id.gidIdx = true, 0
		lo := netip.IPv6Loopback()
		if id.src.Addr().Is4() {
			lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		id.src = netip.AddrPortFrom(lo, id.src.Port())
	}
	id.dgid = c.gidAt(id.gidIdx)
	id.state = StateAddrQuery
	c.answerAddrQuery(id, StateAddrResolved, Event{Type: EventAddrResolved})
	return nil
}

func unspecifiedOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// resolve finds the local GID to reach dst from src (unspecified: any)
// and makes sure the neighbour layer knows dst's MAC.
func (c *CM) resolve(ctx context.Context, src, dst netip.Addr) (int, error) {
	var idx int
	var err error
	if src.IsUnspecified() {
		idx, err = c.localGIDIndexFor(dst)
	} else {
		idx, err = c.localGIDIndex(src)
	}
	if err != nil {
		return 0, err
	}
	r := c.dev.Resolver()
	if r == nil || dst.IsMulticast() {
		return idx, nil
	}
	// addr_resolve_neigh: an unanswered neighbour is asked again until
	// the consumer's timeout, which ends the resolution with ETIMEDOUT.
	for {
		_, err := r.Resolve(ctx, dst)
		switch {
		case err == nil:
			return idx, nil
		case ctx.Err() != nil:
			return 0, unix.ETIMEDOUT
		case !errors.Is(err, unix.EHOSTUNREACH):
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, unix.ETIMEDOUT
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func errnoOf(err error, dflt unix.Errno) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return dflt
}

// ResolveRoute is rdma_resolve_route: on RoCE the route follows from the
// resolved addresses; ROUTE_RESOLVED comes at once (from another
// goroutine, as from the kernel's work queue).
func (id *ID) ResolveRoute(timeout time.Duration) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state != StateAddrResolved {
		return fmt.Errorf("cma: resolve route in %v: %w", id.state, unix.EINVAL)
	}
	if !id.netdev {
		// cma_resolve_iboe_route: no bound netdev (a wildcard or
		// loopback ID resolved to the loopback).
		return fmt.Errorf("cma: resolve route: no netdev: %w", unix.ENODEV)
	}
	id.state = StateRouteQuery
	// cma_iboe_set_path_rec_l2_fields: the flow label of a RoCEv2 path
	// hashes the ports (rdma_get_udp_sport's input).
	id.flowLabel = (uint32(id.src.Port())*31 + uint32(id.dst.Port())) & 0xfffff
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if id.state != StateRouteQuery || id.destroyed {
			return
		}
		id.numPaths = 1
		id.state = StateRouteResolved
		id.event(Event{Type: EventRouteResolved})
	}()
	return nil
}

// Listen is rdma_listen: an IDLE ID binds to the IPv4 wildcard on an
// ephemeral port first; then REQs for its port space and port (and
// address, unless it is a wildcard) reach its handler. backlog bounds the
// requests not yet taken (0: the maximum).
func (id *ID) Listen(backlog int) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state == StateListen {
		id.backlog = clampBacklog(backlog)
		return nil
	}
	if id.state == StateIdle {
		if err := id.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
		id.state = StateAddrBound
	}
	if id.state != StateAddrBound {
		return fmt.Errorf("cma: listen in %v: %w", id.state, unix.EINVAL)
	}
	if id.reuseAddr {
		// A listener shares its port with no one: the check again,
		// without reuse, and reuse off.
		if err := c.portConflictLocked(id, id.src, id.afOnly, false); err != nil {
			return fmt.Errorf("cma: listen: %w", err)
		}
		id.reuseAddr = false
	}
	id.backlog = clampBacklog(backlog)
	id.state = StateListen
	return nil
}

func clampBacklog(b int) int {
	if b <= 0 || b > maxBacklog {
		return maxBacklog
	}
	return b
}

// Connect is rdma_connect on a route-resolved ID: for a connected QP type
// the REQ goes out (p.QPNum is the consumer's QP); the answer comes as
// CONNECT_RESPONSE, REJECTED or UNREACHABLE.
func (id *ID) Connect(p *ConnParam) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state != StateRouteResolved {
		return fmt.Errorf("cma: connect in %v: %w", id.state, unix.EINVAL)
	}
	if id.qpType == qpstate.TypeUD {
		return id.resolveServiceLocked(p)
	}
	max := mad.REQPrivateDataSize - mad.CMAHeaderSize
	if len(p.PrivateData) > max {
		return fmt.Errorf("cma: connect: %d bytes of private data, at most %d: %w", len(p.PrivateData), max, unix.EINVAL)
	}
	id.state = StateConnect
	id.localID = c.newCommIDLocked()
	id.tid = formTID(id.localID)
	id.qpNum = p.QPNum & 0xffffff
	id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
	sgid := c.gidAt(id.gidIdx)
	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: id.src.Port(),
		Src: id.src.Addr(), Dst: id.dst.Addr()})
	copy(pd[mad.CMAHeaderSize:], p.PrivateData)
	req := mad.NewCM(mad.AttrREQ, id.tid)
	mad.REQ(req).Encode(&mad.REQFields{LocalCommID: id.localID, ServiceID: serviceID(id.ps, id.dst.Port()),
		LocalCAGUID: c.guid, LocalQPN: id.qpNum, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, RemoteCMResponseTimeout: cmResponseTimeout, TransportServiceType: mad.TransportRC,
		EndToEndFlowControl: p.FlowControl != 0, StartingPSN: id.seqNum, LocalCMResponseTimeout: cmResponseTimeout,
		RetryCount: min(p.RetryCount, 7), PartitionKey: 0xffff, PathMTU: uint8(c.mtu), RNRRetryCount: min(p.RNRRetryCount, 7),
		MaxCMRetries: uint8(min(c.cfg.MaxRetries, 15)), SRQ: p.SRQ != 0,
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff, PrimaryLocalGID: sgid, PrimaryRemoteGID: id.dgid,
		PrimaryFlowLabel: id.flowLabel, PrimaryTrafficClass: id.tos, PrimaryHopLimit: defaultHopLimit,
		PrimaryLocalACKTimeout: cmAckTimeout(caACKDelay, packetLifeTime), PrivateData: pd})
	id.req = req
	id.cm_ = cmREQSent
	c.conns[id.localID] = id
	id.sendTimedLocked(req, c.cfg.REQTimeout, c.cfg.MaxRetries)
	return nil
}

// cmAckTimeout is cm_ack_timeout: the local ACK timeout of a path from
// the CA's ACK delay and the packet life time.
func cmAckTimeout(caDelay, lifeTime uint8) uint8 {
	t := lifeTime + 1
	if t >= caDelay {
		if caDelay >= t-1 {
			t++
		}
	} else {
		t = caDelay
		if lifeTime+1 >= caDelay-1 {
			t++
		}
	}
	return min(t, 31)
}

// sendTimedLocked sends m and arms the retransmission timer.
func (id *ID) sendTimedLocked(m mad.MAD, timeout time.Duration, retries int) {
	id.last, id.tries, id.lastTimeout, id.maxRetries = m, 0, timeout, retries
	id.cm.send(id.dgid, m)
	id.armLocked()
}

func (id *ID) armLocked() {
	if id.timer != nil {
		id.timer.Stop()
	}
	t := id.lastTimeout
	id.timer = id.cm.clk.AfterFunc(t, func() { id.retransmit() })
}

func (id *ID) stopTimerLocked() {
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
	id.last = nil
}

// retransmit is the timer: send the last message again, or give up as
// the kernel's cm_process_send_error does.
func (id *ID) retransmit() {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.last == nil || c.closed {
		return
	}
	if id.tries < id.maxRetries {
		id.tries++
		c.count(CounterXmitRetries, id.last)
		c.send(id.dgid, id.last)
		id.timer = c.clk.AfterFunc(id.lastTimeout, func() { id.retransmit() })
		return
	}
	id.timer, id.last = nil, nil
	switch id.cm_ {
	case cmREQSent, cmREPSent, cmSIDRReqSent:
		id.cm_ = cmIdle
		id.forgetConnLocked()
		id.event(Event{Type: EventUnreachable, Status: -int32(unix.ETIMEDOUT)})
	case cmDREQSent:
		id.enterTimewaitLocked()
		if id.state == StateConnect {
			id.state = StateDisconnect
			id.event(Event{Type: EventDisconnected, Status: -int32(unix.ETIMEDOUT)})
		}
	}
}

func (id *ID) forgetConnLocked() {
	c := id.cm
	if id.localID != 0 && c.conns[id.localID] == id {
		delete(c.conns, id.localID)
	}
	k := remoteKey{id.remoteGUID, id.remoteID}
	if c.remotes[k] == id {
		delete(c.remotes, k)
	}
}

// avTimeoutLocked is the kernel CM's ACK timeout of the connection's
// path (cm_id_priv->av.timeout): on the passive side the REQ's Primary
// Local ACK Timeout (cm_format_paths_from_req), on the active side the
// packet life time + 1 until the REP, then cm_ack_timeout of the REP's
// Target ACK Delay and the packet life time (cm_rep_handler).
func (id *ID) avTimeoutLocked() uint8 {
	switch {
	case id.listener != nil && id.req != nil:
		return max(mad.REQ(id.req).PrimaryLocalACKTimeout(), 1)
	case id.listener == nil && id.rep != nil:
		return cmAckTimeout(mad.REP(id.rep).Fields().TargetACKDelay, packetLifeTime)
	}
	return packetLifeTime + 1
}

// timewaitLocked is how long the connection stays in timewait:
// 2^(av.timeout−8) ms (cm_enter_timewait), or Config.Timewait.
func (id *ID) timewaitLocked() time.Duration {
	if t := id.cm.cfg.Timewait; t != 0 {
		return t
	}
	return cmTimeout(id.avTimeoutLocked())
}

// enterTimewaitLocked is cm_enter_timewait: after the timewait the ID is
// IDLE again and the consumer gets TIMEWAIT_EXIT.
func (id *ID) enterTimewaitLocked() {
	id.stopTimerLocked()
	id.cm_ = cmTimewait
	id.timer = id.cm.clk.AfterFunc(id.timewaitLocked(), func() {
		c := id.cm
		c.mu.Lock()
		defer c.mu.Unlock()
		if id.cm_ != cmTimewait {
			return
		}
		id.timer = nil
		id.cm_ = cmIdle
		id.forgetConnLocked()
		if id.state == StateDisconnect {
			id.event(Event{Type: EventTimewaitExit})
		}
	})
}

// Accept is rdma_accept. On a passive ID whose CONNECT_REQUEST the
// consumer took, p (required) gives the REP's QP number, depths and
// private data; the RTU brings ESTABLISHED. On an active ID after
// CONNECT_RESPONSE, p is nil and the RTU goes out: the connection is
// established. Anything else is EINVAL (and, like the kernel, rejects the
// connection).
func (id *ID) Accept(p *ConnParam) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.state != StateConnect {
		return fmt.Errorf("cma: accept in %v: %w", id.state, unix.EINVAL)
	}
	if id.qpType == qpstate.TypeUD {
		if id.cm_ != cmSIDRReqRcvd {
			return fmt.Errorf("cma: accept: no service request to answer: %w", unix.EINVAL)
		}
		var pd []byte
		var qpn uint32
		if p != nil {
			if len(p.PrivateData) > mad.SIDRREPPrivateDataSize {
				return fmt.Errorf("cma: accept: %d bytes of private data, at most %d: %w", len(p.PrivateData), mad.SIDRREPPrivateDataSize, unix.EINVAL)
			}
			if p.QKey != 0 && p.QKey != UDPQKey && (id.ps == PSUDP || id.ps == PSIB) {
				return fmt.Errorf("cma: accept: Q_Key %#x, the port space's is %#x: %w", p.QKey, UDPQKey, unix.EINVAL)
			}
			pd, qpn = p.PrivateData, p.QPNum&0xffffff
		}
		id.qpNum = qpn
		id.sidrReplyLocked(mad.SIDRSuccess, qpn, UDPQKey, pd)
		return nil
	}
	var err error
	switch {
	case p == nil && id.cm_ == cmREPRcvd:
		id.cm_ = cmEstablished
		c.send(id.dgid, buildRTU(id.tid, id.localID, id.remoteID))
		return nil
	case p != nil && id.cm_ == cmREQRcvd:
		if len(p.PrivateData) > mad.REPPrivateDataSize {
			err = fmt.Errorf("cma: accept: %d bytes of private data, at most %d: %w", len(p.PrivateData), mad.REPPrivateDataSize, unix.EINVAL)
			break
		}
		id.qpNum = p.QPNum & 0xffffff
		req := mad.REQ(id.req)
		id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
		rep := mad.NewCM(mad.AttrREP, id.tid)
		mad.REP(rep).Encode(&mad.REPFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, LocalQPN: id.qpNum,
			StartingPSN: id.seqNum, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
			TargetACKDelay: caACKDelay, EndToEndFlowControl: p.FlowControl != 0, RNRRetryCount: min(p.RNRRetryCount, 7),
			SRQ: p.SRQ != 0, LocalCAGUID: c.guid, PrivateData: p.PrivateData})
		id.rep = rep
		id.cm_ = cmREPSent
		timeout := c.cfg.REPTimeout
		if req.LocalCMResponseTimeout() != cmResponseTimeout {
			timeout = cmTimeout(req.LocalCMResponseTimeout())
		}
		id.sendTimedLocked(rep, timeout, min(int(req.MaxCMRetries()), c.cfg.MaxRetries))
		return nil
	default:
		err = fmt.Errorf("cma: accept in the CM's state %d: %w", id.cm_, unix.EINVAL)
	}
	id.rejectLocked(nil, mad.RejConsumerDefined)
	return err
}

// cmTimeout is a 5-bit IBA time as the kernel's CM waits it: 2^(t−8) ms.
func cmTimeout(t uint8) time.Duration {
	if t < 8 {
		t = 8
	}
	return time.Millisecond << (t - 8)
}

// Reject is rdma_reject: a REJ with reason (0: consumer defined) and pd
// for a request the consumer took (passive) or a REP it cannot use.
func (id *ID) Reject(pd []byte, reason mad.RejReason) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.cm_ == cmSIDRReqRcvd {
		if len(pd) > mad.SIDRREPPrivateDataSize {
			return fmt.Errorf("cma: reject: %d bytes of private data: %w", len(pd), unix.EINVAL)
		}
		id.sidrReplyLocked(mad.SIDRReject, 0, 0, pd)
		return nil
	}
	if len(pd) > mad.REJPrivateDataSize {
		return fmt.Errorf("cma: reject: %d bytes of private data: %w", len(pd), unix.EINVAL)
	}
	if id.cm_ != cmREQRcvd && id.cm_ != cmREPRcvd {
		return fmt.Errorf("cma: reject: no request to reject: %w", unix.EINVAL)
	}
	if reason == 0 {
		reason = mad.RejConsumerDefined
	}
	id.rejectLocked(pd, reason)
	return nil
}

func (id *ID) rejectLocked(pd []byte, reason mad.RejReason) {
	kind := mad.MsgREQ
	switch id.cm_ {
	case cmREQRcvd:
	case cmREPRcvd:
		kind = mad.MsgREP
	case cmREPSent:
	default:
		return
	}
	rej := mad.NewCM(mad.AttrREJ, id.tid)
	mad.REJ(rej).Encode(&mad.REJFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageREJected: kind,
		Reason: reason, PrivateData: pd})
	id.stopTimerLocked()
	id.cm.send(id.dgid, rej)
	id.cm_ = cmIdle
	id.forgetConnLocked()
}

// Disconnect is rdma_disconnect: a DREQ from an established connection,
// the DREP to the peer's DREQ. An ID that never connected is EINVAL.
func (id *ID) Disconnect() error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.localID == 0 {
		return fmt.Errorf("cma: disconnect: not connected: %w", unix.EINVAL)
	}
	id.disconnectLocked()
	return nil
}

func (id *ID) disconnectLocked() {
	c := id.cm
	switch id.cm_ {
	case cmREPSent, cmEstablished:
		id.sendDREQLocked()
	case cmDREQRcvd:
		c.send(id.dgid, buildDREP(id.drepTID, id.localID, id.remoteID))
		id.enterTimewaitLocked()
	}
}

// sendDREQLocked sends the DREQ of a connection on its timer
// (ib_send_cm_dreq); the DREP, or the retries running out, ends it.
func (id *ID) sendDREQLocked() {
	c := id.cm
	id.cm_ = cmDREQSent
	d := mad.NewCM(mad.AttrDREQ, id.dreqTID())
	mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN})
	timeout := c.cfg.REPTimeout
	if id.listener == nil {
		timeout = c.cfg.REQTimeout
	}
	id.sendTimedLocked(d, timeout, c.cfg.MaxRetries)
}

// dreqTID is the DREQ's TID, cm_form_tid's of the sender's ID: the
// active side's equals its REQ's, the passive side's is its own.
func (id *ID) dreqTID() uint64 { return formTID(id.localID) }

// Notify is rdma_notify with IB_EVENT_COMM_EST (2): data arrived on a
// passive connection before the RTU; it becomes established.
func (id *ID) Notify(ev int) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	const commEst = 2
	if ev != commEst {
		return nil
	}
	if id.cm_ == cmREPSent {
		id.stopTimerLocked()
		id.cm_ = cmEstablished
		id.event(Event{Type: EventEstablished})
		return nil
	}
	if id.cm_ == cmEstablished {
		return nil
	}
	return fmt.Errorf("cma: notify in the CM's state %d: %w", id.cm_, unix.EINVAL)
}

// Destroy is rdma_destroy_id: what the ID has outstanding is ended as the
// kernel's cm_destroy_id does (a request in flight is rejected, an
// established connection gets one DREQ), and no event comes any more.
func (id *ID) Destroy() {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	id.destroyLocked()
}

func (id *ID) destroyLocked() {
	if id.destroyed {
		return
	}
	c := id.cm
	switch id.cm_ {
	case cmREQSent:
		rej := mad.NewCM(mad.AttrREJ, id.tid)
		var ari [8]byte
		for i := range 8 {
			ari[i] = byte(c.guid >> (56 - 8*i))
		}
		// cm_format_rej outside REQ_RCVD and REP_RCVD: the kind is
		// "other".
		mad.REJ(rej).Encode(&mad.REJFields{LocalCommID: id.localID, MessageREJected: mad.MsgOther,
			RejectInfoLength: 8, Reason: mad.RejTimeout, ARI: ari[:]})
		c.send(id.dgid, rej)
	case cmREQRcvd, cmREPRcvd, cmREPSent:
		id.rejectLocked(nil, mad.RejConsumerDefined)
	case cmEstablished:
		d := mad.NewCM(mad.AttrDREQ, id.dreqTID())
		mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN})
		c.send(id.dgid, d)
	case cmDREQRcvd:
		c.send(id.dgid, buildDREP(id.drepTID, id.localID, id.remoteID))
	case cmSIDRReqRcvd:
		id.sidrReplyLocked(mad.SIDRReject, 0, 0, nil)
	}
	id.stopTimerLocked()
	id.cm_ = cmIdle
	id.forgetConnLocked()
	if id.resolving != nil {
		id.resolving()
	}
	id.unbindLocked()
	for _, m := range id.mcs {
		m.leaveLocked()
	}
	id.mcs = nil
	id.destroyed = true
	id.state = StateDestroying
	delete(c.ids, id)
}

// InitQPAttr is rdma_init_qp_attr: the attributes and mask with which the
// consumer moves its QP to state, from what the CM knows of the
// connection. An ID without a device is EINVAL.
func (id *ID) InitQPAttr(state qpstate.State) (qpstate.Attr, qpstate.AttrMask, error) {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	var a qpstate.Attr
	a.QPState = state
	if !id.hasDev {
		return a, 0, fmt.Errorf("cma: init QP attributes: no device: %w", unix.EINVAL)
	}
	if id.cm_ == cmIdle || id.qpType == qpstate.TypeUD || id.req == nil {
		// cma_ib_init_qp_attr.
		a.PKeyIndex, a.PortNum = 0, 1
		mask := qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort
		if id.qpType == qpstate.TypeUD {
			a.QKey = UDPQKey
			mask |= qpstate.AttrQKey
		} else {
			mask |= qpstate.AttrAccessFlags
		}
		if state == qpstate.StateRTR {
			a.RQPSN = id.seqNum
		}
		return a, mask, nil
	}
	req := mad.REQ(id.req)
	active := id.listener == nil
	var mask qpstate.AttrMask
	switch state {
	case qpstate.StateInit:
		if id.cm_ == cmTimewait || id.cm_ == cmDREQSent || id.cm_ == cmDREQRcvd {
			return a, 0, fmt.Errorf("cma: init QP attributes for INIT in the CM's state %d: %w", id.cm_, unix.EINVAL)
		}
		mask = qpstate.AttrState | qpstate.AttrAccessFlags | qpstate.AttrPKeyIndex | qpstate.AttrPort
		a.PortNum = 1
		a.QPAccessFlags = ib.AccessRemoteWrite
		if id.responderResources() > 0 {
			a.QPAccessFlags |= ib.AccessRemoteRead | ib.AccessRemoteAtomic
		}
	case qpstate.StateRTR:
		if id.cm_ == cmREQSent || id.cm_ == cmTimewait || id.cm_ == cmDREQSent || id.cm_ == cmDREQRcvd {
			return a, 0, fmt.Errorf("cma: init QP attributes for RTR in the CM's state %d: %w", id.cm_, unix.EINVAL)
		}
		mask = qpstate.AttrState | qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
			qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
		a.AHAttr = id.avLocked()
		a.PathMTU = min(ib.MTU(req.PathMTU()), c.mtu)
		a.DestQPNum = id.remoteQPN
		a.RQPSN = id.seqNum
		a.MaxDestRdAtomic = id.responderResources()
	case qpstate.StateRTS:
		if id.cm_ == cmREQSent || id.cm_ == cmTimewait || id.cm_ == cmDREQSent || id.cm_ == cmDREQRcvd {
			return a, 0, fmt.Errorf("cma: init QP attributes for RTS in the CM's state %d: %w", id.cm_, unix.EINVAL)
		}
		mask = qpstate.AttrState | qpstate.AttrSQPSN | qpstate.AttrTimeout | qpstate.AttrRetryCnt |
			qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
		a.RetryCnt = req.RetryCount()
		if active {
			rep := mad.REP(id.rep)
			a.SQPSN = rep.StartingPSN()
			a.Timeout = cmAckTimeout(rep.Fields().TargetACKDelay, packetLifeTime)
			a.RNRRetry = rep.Fields().RNRRetryCount
			a.MaxRdAtomic = rep.Fields().ResponderResources
		} else {
			a.SQPSN = req.StartingPSN()
			a.Timeout = req.PrimaryLocalACKTimeout()
			a.RNRRetry = req.RNRRetryCount()
			a.MaxRdAtomic = req.ResponderResources()
		}
		if id.ackTO != 0 {
			a.Timeout = id.ackTO
		}
	default:
		return a, 0, fmt.Errorf("cma: init QP attributes for %v: %w", state, unix.EINVAL)
	}
	return a, mask, nil
}

// responderResources is what the connection lets the peer have
// outstanding at us: the REP's initiator depth on the active side, the
// REQ's on the passive side.
func (id *ID) responderResources() uint8 {
	if id.listener == nil {
		if id.rep != nil {
			return mad.REP(id.rep).Fields().InitiatorDepth
		}
		return id.respRes
	}
	return mad.REQ(id.req).InitiatorDepth()
}

// avLocked is the connection's address vector: to the peer's GID from
// ours, with the path's flow label and traffic class.
func (id *ID) avLocked() ib.AHAttr {
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
		GRH: ib.GlobalRoute{DGID: id.dgid, FlowLabel: id.flowLabel, SGIDIndex: uint8(id.gidIdx),
			HopLimit: defaultHopLimit, TrafficClass: id.tos}}
}

func buildRTU(tid uint64, local, remote uint32) mad.MAD {
	m := mad.NewCM(mad.AttrRTU, tid)
	mad.RTU(m).Encode(&mad.CommIDs{LocalCommID: local, RemoteCommID: remote})
	return m
}

func buildDREP(tid uint64, local, remote uint32) mad.MAD {
	m := mad.NewCM(mad.AttrDREP, tid)
	mad.DREP(m).Encode(&mad.CommIDs{LocalCommID: local, RemoteCommID: remote})
	return m
}

const qpTypeUD = qpstate.TypeUD

// answerAddrQuery moves id to state and gives it ev from another
// goroutine, as the kernel's address resolution answers from its work
// queue, after the call that asked has returned: unless the ID left
// ADDR_QUERY (destroyed, or the device removed) meanwhile. c.mu held.
func (c *CM) answerAddrQuery(id *ID, state State, ev Event) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if id.state != StateAddrQuery || id.destroyed {
			return
		}
		id.state = state
		id.event(ev)
	}()
}
