// Package rxe is the emulated RDMA device: an implementation of
// emu.DeviceOps that behaves like the Linux kernel's rxe driver
// (drivers/infiniband/sw/rxe, Linux 6.12) — its defaults (rxe_param.h),
// its capacity rounding (rxe_qp_chk_init, rxe_cq_chk_attr), its key and
// QP-number generation, its QP context and the state side effects of a
// modify (rxe_qp_from_attr), its SRQ,
// MR, MW, AH and multicast rules and its hardware counters.
//
// The transport moves real RoCEv2 frames (built and parsed by package wire)
// over a link.Link (Config.Link): the requester (runSQ, req.go) segments
// work requests into packets, the receive pipeline (receive, recv.go)
// applies rxe's drop rules and hands requests to the responder (resp.go)
// and responses to the completer (comp.go), which retires WQEs in order.
// Timers (retransmission, RNR) run on the device's injected clock. All of
// it runs under one device lock, like rxe's serialized tasks; when it is
// released, events and completion handlers are delivered and then the
// frames built under it are written to the link, requests and responses
// each in their order (two streams, as rxe's requester and responder
// tasks transmit independently). On a link whose writes never wait
// (NonBlockingWriter) the reading goroutine processes what it reads. The
// responder answers every packet that asks for an ACK with one, as rxe's
// acknowledge; Config.CoalesceACKs instead defers and merges them, as
// hfi1 does (ackhold.go). With Config.Synchronous nothing runs on its own:
// Poll processes what arrived, so tests on a clock.Manual replay exactly.
package rxe

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// Config configures an emulated rxe device. The zero value is the rxe of
// the newest kernel (DefaultKernel) on a default interface, on-demand
// paging MRs included.
type Config struct {
	// Device is the core configuration: name, bound interface, clock,
	// memory, DMA strictness, MAC resolver.
	Device emu.Config
	// Seed seeds the generator of key bytes; every seed (0 included)
	// gives a reproducible device.
	Seed uint64
	// Kernel is the Linux release whose rxe the device is (Kernel); the
	// zero value is DefaultKernel, the newest.
	Kernel Kernel
	// Policy selects whose modify_qp checks apply; the zero value is
	// the Kernel's (Kernel.Policy: qpstate.PolicyRxe from 6.4,
	// qpstate.PolicyRxePre64 before).
	Policy qpstate.Policy
	// Tune, if non-nil, adjusts the device attributes after the Kernel's
	// defaults are filled in — for example an older kernel's max_qp_wr of
	// 0x4000. The driver's checks (QP, CQ, SRQ, MR, multicast and modify
	// limits) follow the tuned values, and so do its object counts:
	// creating a QP, CQ, SRQ, PD, MR, MW or AH past MaxQP, MaxCQ, MaxSRQ,
	// MaxPD, MaxMR, MaxMW or MaxAH fails with EINVAL, as rxe's pools do.
	Tune func(*emu.DeviceAttr)
	// NoMADLayer leaves QP index 16 free. By default it is taken by the
	// MAD layer's GSI QP, as on a running kernel, so the first QP created
	// is 17 (0x11) and creating another GSI QP fails with EINVAL.
	NoMADLayer bool

	// Link is the wire the device sends and receives RoCEv2 frames on
	// (its Ethernet source MAC is Device.NetDev.MAC, its IP addresses the
	// GID table). Nil means no transport: posted network work requests
	// stay in flight as to a silent peer and no timers run.
	Link link.Link
	// Synchronous makes the device process received frames only in Poll,
	// never in a goroutine of its own, so that a test with a clock.Manual
	// replays exactly; by default a goroutine processes them as they come.
	// A synchronous device writes whole bursts (up to a READ's worth of
	// responses) while nobody reads the other end, so its link must not
	// block on them: give a link.Pipe a QueueLen above the largest burst,
	// or DropWhenFull. On a link that is a Pender it reads in Poll itself
	// and runs no goroutine at all; on others a goroutine only moves
	// frames into the device's inbox, and Received tells how many it has.
	Synchronous bool
	// Quirks selects IBTA behaviour instead of rxe's where they differ;
	// the zero value is rxe 6.12.
	Quirks Quirks
	// Loopback delivers the frames addressed to the device's own MAC
	// straight to its receive side instead of writing them to the link,
	// as rxe_net.c rxe_send hands a packet for the netdev's own address to
	// rxe_loopback: they are not on the link (nor in a capture of it).
	// Frames looped back are processed by the device's goroutine, or by a
	// caller of Device.Settle in its own goroutine.
	Loopback bool
	// LoopbackWhile, if set with Loopback, is asked before each batch of
	// frames the device sends: its own frames loop back only while it
	// returns true, and go to the link like any other when it returns
	// false (a link that must see every frame while it has rules for
	// them, as package fault's Link).
	LoopbackWhile func() bool
	// Neighbor, if set, gives the Ethernet destination of each packet's
	// IP address (the host's neighbour table), asked with a cancelled
	// context: a cache answer or none, in which case the address vector's
	// DMAC is used.
	Neighbor emu.Resolver
	// McastFilter, if set, is told when a multicast group gets its first
	// QP (add true) and loses its last one (add false): the netdev's
	// multicast address filter rxe programs with dev_mc_add and
	// dev_mc_del (rxe_mcast_add, rxe_mcast_del). An error fails the
	// attach. It is called with the device's lock held and must not call
	// back into the device.
	McastFilter func(gid emu.GID, add bool) error
	// CoalesceACKs defers and merges the responder's ACKs, as the
	// kernel's hfi1 and qib drivers do (rc_defered_ack): a departure from
	// rxe, which sends one ACK for every packet that asks for one, at once
	// (rxe_resp.c acknowledge). With it, on a link whose writes never wait
	// (NonBlockingWriter) the ACKs of a receive that woke a completion
	// handler are held for a moment, and a plain ACK replaces the one
	// queued before it to the same QP while both are unwritten (ackhold.go);
	// on a bare link.PipeEnd the ACKs of one batch read are merged. A peer
	// then receives fewer ACKs, later, each covering several messages. The
	// zero value is rxe's: no holding, no merging.
	CoalesceACKs bool
	// NoInline keeps an asynchronous device on a bare link.PipeEnd from
	// processing its peer's frames in the goroutine that posts (inline.go):
	// every frame then goes through the reading goroutines, as on any
	// other link. For measurements and tests of that path.
	NoInline bool
	// NoODP gives the device no on-demand paging, as rxe before Linux
	// 6.15 (Kernel.HasODP): no odp_caps, and IB_ACCESS_ON_DEMAND refused
	// with EOPNOTSUPP. Otherwise a kernel from 6.15 has rxe 7.3's
	// (odpCaps): ON_DEMAND MRs whose pages are resolved each time the
	// device touches them (mr.go).
	NoODP bool
}

// Limits of rxe 6.12 (rxe_param.h).
const (
	maxQPWR          = 1 << 20
	maxSGE           = 32
	maxInline        = 512
	maxCQE           = 1<<15 - 1
	maxSRQWR         = 1 << 20
	maxSRQSGE        = 27
	maxFastRegPages  = 512
	maxQPRdAtom      = 128
	minQPIndex       = 16
	maxQPIndex       = 1 << 20
	minMRIndex       = 1
	maxMRIndex       = 1 << 19
	minMWIndex       = maxMRIndex + 1
	maxMWIndex       = 1 << 20
	maxAHIndex       = 1<<15 - 1
	maxMcastGroups   = 8192
	maxMcastQPAttach = 56
	maxTotalAttach   = 0x70000
	maxMsgSize       = 1 << 31
	gsiQPN           = 1
)

// odpCaps is rxe's odp_caps from Linux 6.16 on (rxe_init_device_param
// with CONFIG_INFINIBAND_ON_DEMAND_PAGING): RC send, receive, write, read,
// atomic, SRQ receive, flush and atomic write; UD send, receive and SRQ
// receive; no implicit ODP, nothing for UC and XRC.
var odpCaps = emu.ODPCaps{
	General: emu.ODPSupport,
	RC: emu.ODPSupportSend | emu.ODPSupportRecv | emu.ODPSupportWrite | emu.ODPSupportRead |
		emu.ODPSupportAtomic | emu.ODPSupportSRQRecv | emu.ODPSupportFlush | emu.ODPSupportAtomicWrite,
	UD: emu.ODPSupportSend | emu.ODPSupportRecv | emu.ODPSupportSRQRecv,
}

// deviceCapFlags is rxe's device_cap_flags on a 64-bit build.
const deviceCapFlags = 0x1C001223C76

// device is the rxe driver: the emu.DeviceOps (and optional ops) behind
// the emu.Device a Device embeds, with all of the driver's state.
type device struct {
	dev    *emu.Device
	cfg    Config
	attr   emu.DeviceAttr // defaults after Config.Tune; NodeGUID/SysImageGUID filled at query
	limits qpstate.Limits

	mu         sync.Mutex
	rnd        *rand.Rand
	qpPool     pool
	mrPool     pool
	mwPool     pool
	ahPool     pool
	numPD      counter // PDs, CQs and SRQs have no index, only a count
	numCQ      counter
	numSRQ     counter
	qps        map[uint32]*qp                 // by QPN
	lastQP     *qp                            // the QP qpByNum found last (recv.go); nil after any QP is destroyed
	cqFault    func(*emu.CQ, *emu.WC) CQFault // SetCQFault; nil: none
	mrs        map[uint32]*mr                 // by index
	lastMR     *mr                            // the MR mrByIdx found last (sge.go); nil after any MR is deregistered
	mws        map[uint32]*mw                 // by index
	mcgs       map[emu.GID]*mcg
	attached   int
	gsi        bool
	madSlot    madSlot // the MAD layer's reserved QP index
	counters   [numCounters]uint64
	stats      kernelStats // the counters the Config.Kernel shows
	badPKey    uint32
	badQKey    uint32
	deferred   []deferredCall
	deferSpare []deferredCall // deferred's other half, reused

	// Transport state (nil tp: no link).
	tp       *transport
	detached bool
	rxNoICRC bool                 // the frame being received carries no ICRC (rxFrame)
	rxRef    link.PayloadRef      // the payload of the frame being received, by reference (rxFrame)
	txq      [numStreams][][]byte // frames to write, per stream (transport.go)
	// txRefs[i] is the payload of txq[streamReq][i] by reference (on a
	// bare link.PipeEnd, see payloadRef), and txRef the one emitIn
	// queues with the next request.
	txRefs  []link.PayloadRef
	txRef   link.PayloadRef
	hold    ackHold // held ACKs (ackhold.go)
	fr      wire.Frame
	ipID    uint16
	scratch []byte
	txFree  [][]byte     // frame buffers at hand for the frames to send (txGet)
	refSGE  refSGE       // the SGE payloadRef looked up last, while sendPackets runs
	wdst    writeDest    // where the RDMA WRITE being received goes (resp.go), until unlock
	addrs   []netip.Addr // cached netdev addresses (recv.go)
	// lastLocal is the destination address of the last unicast frame
	// localAddr accepted, one of addrs (none when addrs is refreshed), so
	// that a stream's frames are checked by a compare.
	lastLocal addrBytes
	mac       [6]byte
	wqeFree   []*sendWQE
	wb        writeBehind // RDMA WRITE payload not yet in a client's memory (writebehind.go)
	// QPs with READ replies to send (readjob.go); readsPending is its
	// length, read without r.mu by the work loop.
	readQPs      []*qp
	readsPending atomic.Int32
	// inlining is set while a goroutine runs runInline for this device
	// (inline.go); inlineFrames counts the frames of this device that a
	// runInline processed.
	inlining     atomic.Bool
	inlineFrames atomic.Uint64
}

// New creates an emulated rxe device (rdma link add rxe0 type rxe netdev
// DEV) and registers it with the core. Close removes it.
func New(cfg Config) (*Device, error) {
	if !cfg.Policy.IsValid() {
		return nil, errorf(unix.EINVAL, "rxe: policy %v", cfg.Policy)
	}
	if cfg.Kernel = cfg.Kernel.orDefault(); !cfg.Kernel.IsValid() {
		return nil, errorf(unix.EINVAL, "rxe: %v", cfg.Kernel)
	}
	if cfg.Policy == qpstate.PolicyRxe {
		cfg.Policy = cfg.Kernel.Policy()
	}
	attr := defaultAttr()
	attr.DeviceCapFlags = cfg.Kernel.deviceCapFlags()
	if cfg.Kernel.HasODP() && !cfg.NoODP {
		attr.KernelCapFlags |= emu.KernelCapOnDemandPaging
		attr.ODPCaps = odpCaps
	}
	if cfg.Tune != nil {
		cfg.Tune(&attr)
	}
	r := &device{cfg: cfg, attr: attr,
		rnd:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		qpPool: newPool(minQPIndex, maxQPIndex-1), mrPool: newPool(minMRIndex, maxMRIndex),
		mwPool: newPool(minMWIndex, maxMWIndex), ahPool: newPool(1, uint32(max(1, attr.MaxAH))),
		qps: map[uint32]*qp{}, mrs: map[uint32]*mr{}, mws: map[uint32]*mw{}, mcgs: map[emu.GID]*mcg{},
		stats: statsOf(cfg.Kernel)}
	if !cfg.NoMADLayer {
		r.qpPool.alloc(nil) // index 16: the MAD layer's GSI QP (QPN 1)
		r.gsi = true
		r.madSlot = madReserved
	}
	v, err := driver.NewDevice(r, cfg.Device)
	if err != nil {
		return nil, err
	}
	d := v.(*emu.Device)
	r.dev = d
	copy(r.mac[:], d.NetDev().MAC)
	if cfg.Link != nil {
		r.attach()
	}
	r.limits = qpstate.RxeLimits()
	r.limits.MaxQPRdAtom, r.limits.MaxQPInitRdAtom = uint32(attr.MaxQPRdAtom), uint32(attr.MaxQPInitRdAtom)
	r.limits.MaxQPWR, r.limits.MaxInlineData = uint32(attr.MaxQPWR), uint32(attr.MaxInlineData)
	r.limits.MaxSendSGE, r.limits.MaxRecvSGE = uint32(attr.MaxSendSGE), uint32(attr.MaxRecvSGE)
	r.limits.GID = func(port, index uint32) (ib.GIDType, bool) {
		e, err := d.QueryGID(port, int(index))
		return e.Type, err == nil
	}
	return &Device{Device: d, r: r}, nil
}

// errorf reports a failure of the driver as an *emu.Error whose message
// is "rxe: " and the formatted "op: reason".
func errorf(errno unix.Errno, format string, args ...any) error {
	op, reason, _ := strings.Cut(fmt.Sprintf(format, args...), ": ")
	return &emu.Error{Op: "rxe: " + op, Reason: reason, Errno: errno}
}

// lock and unlock bracket every driver entry point; unlock runs the
// callbacks (events, completion handlers) deferred under the lock.
func (r *device) lock() { r.mu.Lock() }

func (r *device) unlock() {
	r.wdst = writeDest{}
	r.flushWrites()
	fs := r.deferred
	if len(fs) > 0 {
		r.deferred, r.deferSpare = r.deferSpare, nil
	}
	r.endBatch(len(fs) > 0)
	if len(fs) == 0 {
		if r.tp != nil && r.txPending() {
			r.flushTx() // releases r.mu
		} else {
			r.mu.Unlock()
		}
		return
	}
	// Completion handlers and events run before the frames queued with
	// them are written, as rxe's responder posts the CQE (do_complete,
	// rxe_cq_post, which calls the handler) before it sends the ACK
	// (acknowledge, send_ack): the application woken can post its next
	// request while the ACK goes out.
	r.mu.Unlock()
	for _, d := range fs {
		if d.cq != nil {
			d.cq.CompHandler(d.cq)
		} else {
			d.f()
		}
	}
	// Hand the list back for reuse, so that a completion notification
	// allocates nothing.
	clear(fs)
	r.mu.Lock()
	if r.deferSpare == nil {
		r.deferSpare = fs[:0]
	}
	if r.tp != nil && r.txPending() {
		r.flushTx() // releases r.mu
	} else {
		r.mu.Unlock()
	}
}

// txPending reports whether frames wait to be written: requests, or
// responses that are not held (ackhold.go); r.mu held.
func (r *device) txPending() bool {
	return len(r.txq[streamReq]) > 0 || len(r.txq[streamRsp]) > 0 && !r.hold.held
}

// deferredCall is a callback run by unlock: f, or cq's completion
// handler (kept apart from f so that notifying allocates no closure).
type deferredCall struct {
	f  func()
	cq *emu.CQ
}

// later defers f until the device lock is released; r.mu held.
func (r *device) later(f func()) { r.deferred = append(r.deferred, deferredCall{f: f}) }

// laterComp defers a call of c's completion handler until the device lock
// is released, in order with later's callbacks; r.mu held.
func (r *device) laterComp(c *emu.CQ) { r.deferred = append(r.deferred, deferredCall{cq: c}) }

// event queues an async event; r.mu held.
func (r *device) event(ev emu.Event) { r.later(func() { driver.Dispatch(r.dev, ev) }) }

// madSlot is the state of the QP index a running kernel's MAD layer
// holds.
type madSlot int

const (
	madNone     madSlot = iota // Config.NoMADLayer, or the slot was used
	madReserved                // held by the (absent) kernel MAD layer
	madHandoff                 // TakeMADLayer was called: the next GSI QP gets it
)

// TakeMADLayer is emu.MADLayerTaker (emu.Device.TakeMADLayer): the next
// GSI QP created takes the QP index the device reserved for the MAD layer
// (16, so other QPs still start at 17) and receives what arrives for QPN
// 1. EINVAL with Config.NoMADLayer, EBUSY once taken.
func (r *device) TakeMADLayer() error {
	r.lock()
	defer r.unlock()
	switch r.madSlot {
	case madReserved:
		r.madSlot = madHandoff
		return nil
	case madHandoff:
		return errorf(unix.EBUSY, "take MAD layer: already taken")
	}
	if r.cfg.NoMADLayer {
		return errorf(unix.EINVAL, "take MAD layer: the device has none (NoMADLayer)")
	}
	return errorf(unix.EBUSY, "take MAD layer: already taken")
}

// pool allocates indexes cyclically from [min, max] (rxe_pool: the next
// free index at or after the last one handed out).
type pool struct {
	min, max, next uint32
	used           map[uint32]any
}

func newPool(min, max uint32) pool {
	return pool{min: min, max: max, next: min, used: map[uint32]any{}}
}

// alloc returns a free index, or false when the pool is exhausted.
func (p *pool) alloc(v any) (uint32, bool) {
	n := p.max - p.min + 1
	if uint32(len(p.used)) >= n {
		return 0, false
	}
	i := p.next
	for {
		if _, taken := p.used[i]; !taken {
			break
		}
		i++
		if i > p.max {
			i = p.min
		}
	}
	p.used[i] = v
	p.next = i + 1
	if p.next > p.max {
		p.next = p.min
	}
	return i, true
}

func (p *pool) free(i uint32) { delete(p.used, i) }

// poolLimit is the object count check of rxe's pools (__rxe_add_to_pool):
// a pool holding n objects refuses another once n reaches its max_elem,
// here the device attribute (max_qp, max_mr ...) as Config.Tune left it,
// with EINVAL.
func poolLimit(op, attr string, n, max int) error {
	if n < max {
		return nil
	}
	return errorf(unix.EINVAL, "%s: %d objects exist, %s is %d", op, n, attr, max)
}

// counter counts the objects of a pool without indexes (rxe_pool's
// num_elem); it is safe for concurrent use.
type counter struct{ n atomic.Int64 }

// take counts one more object unless max are counted already.
func (c *counter) take(max int) bool {
	for {
		n := c.n.Load()
		if n >= int64(max) {
			return false
		}
		if c.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// put uncounts an object.
func (c *counter) put() { c.n.Add(-1) }

// keyByte returns a random key byte different from old (rxe regenerates
// the 8-bit key part so that it changes).
func (r *device) keyByte(old uint8) uint8 {
	for {
		b := uint8(r.rnd.Uint32())
		if b != old {
			return b
		}
	}
}

// defaultAttr returns rxe's device attributes (rxe_init_device_param)
// without the MAC-derived GUIDs, as of Linux 6.12 and 7.3; New adjusts
// them to the Config.Kernel.
func defaultAttr() emu.DeviceAttr {
	return emu.DeviceAttr{
		MaxMRSize: ^uint64(0), PageSizeCap: 0xFFFFF000,
		VendorID: 0xFFFFFF, MaxQP: maxQPIndex - minQPIndex, MaxQPWR: maxQPWR,
		DeviceCapFlags: deviceCapFlags, KernelCapFlags: emu.KernelCapAllowUserUnreg,
		MaxSendSGE: maxSGE, MaxRecvSGE: maxSGE, MaxSGERd: maxSGE, MaxCQ: 1 << 20, MaxCQE: maxCQE,
		MaxMR: maxMRIndex - 1, MaxMW: maxMRIndex - 1, MaxPD: 1 << 20, MaxQPRdAtom: maxQPRdAtom,
		MaxResRdAtom: 0x3F000, MaxQPInitRdAtom: maxQPRdAtom, AtomicCap: 1,
		MaxMcastGrp: maxMcastGroups, MaxMcastQPAttach: maxMcastQPAttach,
		MaxTotalMcastQPAttach: maxTotalAttach, MaxAH: maxAHIndex, MaxSRQ: 1<<20 - 0x20001,
		MaxSRQWR: maxSRQWR, MaxSRQSGE: maxSRQSGE, MaxFastRegPageListLen: maxFastRegPages,
		MaxPKeys: 64, LocalCAAckDelay: 15, MaxInlineData: maxInline, PhysPortCnt: 1,
		NodeDesc: "rxe", NodeType: 1, NumCompVectors: 1, UverbsABIVer: 2,
	}
}

// QueryDevice returns the device attributes (rxe_query_device): rxe's
// defaults (or the tuned ones) with node and system image GUID the EUI-64
// of the interface MAC.
func (r *device) QueryDevice() emu.DeviceAttr {
	a := r.attr
	for _, b := range emu.EUI64(r.dev.NetDev().MAC) {
		a.NodeGUID = a.NodeGUID<<8 | uint64(b)
	}
	a.SysImageGUID = a.NodeGUID
	return a
}

// PortImmutable returns port 1's immutable data (rxe_port_immutable).
func (r *device) PortImmutable(port uint32) (emu.PortImmutable, error) {
	if port != 1 {
		return emu.PortImmutable{}, errorf(unix.EINVAL, "rxe: port %d", port)
	}
	return emu.PortImmutable{PKeyTblLen: 1, GIDTblLen: 1024,
		CoreCapFlags: emu.CorePortIBARoCEUDPEncap, MaxMADSize: emu.MgmtMADSize}, nil
}

// QueryPort returns port 1's attributes (rxe_query_port): state and
// physical state from the interface, active MTU from its MTU, width and
// speed from its ethtool speed.
func (r *device) QueryPort(port uint32) (emu.PortAttr, error) {
	nd := r.dev.NetDev()
	a := emu.PortAttr{State: emu.PortActive, PhysState: emu.PhysLinkUp, MaxMTU: ib.MTU4096,
		ActiveMTU: emu.RxeMTU(nd.MTU), GIDTblLen: 1024, PortCapFlags: 0x10000, MaxMsgSz: r.cfg.Kernel.PortMaxMsgSz(),
		PKeyTblLen: 1, MaxVLNum: 1}
	switch {
	case nd.Down:
		a.State, a.PhysState = emu.PortDown, emu.PhysDisabled
	case nd.NoCarrier:
		a.State, a.PhysState = emu.PortDown, emu.PhysPolling
	}
	a.ActiveWidth, a.ActiveSpeed = emu.EthSpeedToIB(nd.SpeedMbps)
	r.lock()
	a.BadPKeyCntr, a.QKeyViolCntr = r.badPKey, r.badQKey
	r.unlock()
	return a, nil
}

// QueryPKey returns 0xFFFF for index 0, EINVAL otherwise (the table has
// one entry).
func (r *device) QueryPKey(port uint32, index uint16) (uint16, error) {
	if index != 0 {
		return 0, errorf(unix.EINVAL, "rxe: query pkey index %d: table has 1 entry", index)
	}
	return emu.DefaultPKey, nil
}

// SetLink changes the bound interface's link state (netdev up/down,
// carrier) and raises IB_EVENT_PORT_ACTIVE or IB_EVENT_PORT_ERR like
// rxe_port_up / rxe_port_down; each down counts in link_downed.
func (r *device) SetLink(up bool) {
	r.lock()
	driver.SetNetDevLink(r.dev, up)
	t := emu.EventPortActive
	if !up {
		t = emu.EventPortErr
		r.counters[cntLinkDowned]++
	}
	r.event(emu.Event{Type: t, Port: 1})
	r.unlock()
}

// SetLinkState is SetLink with the interface's two states apart: up is
// its administrative state, carrier its carrier. The port is ACTIVE when
// both hold (IB_EVENT_PORT_ACTIVE), else DOWN (IB_EVENT_PORT_ERR, counted
// in link_downed), its physical state POLLING while the interface is up
// without carrier and DISABLED while it is down, as rxe_query_port
// reports them.
func (r *device) SetLinkState(up, carrier bool) {
	r.lock()
	driver.SetNetDevState(r.dev, !up, !carrier)
	t := emu.EventPortActive
	if !up || !carrier {
		t = emu.EventPortErr
		r.counters[cntLinkDowned]++
	}
	r.event(emu.Event{Type: t, Port: 1})
	r.unlock()
}

// AllocPD allocates a PD (rxe_alloc_pd).
func (r *device) AllocPD(pd *emu.PD) error {
	if !r.numPD.take(r.attr.MaxPD) {
		return poolLimit("alloc PD", "max_pd", r.attr.MaxPD, r.attr.MaxPD)
	}
	return nil
}

// DeallocPD frees a PD (rxe_dealloc_pd).
func (r *device) DeallocPD(pd *emu.PD) error {
	r.numPD.put()
	return nil
}
