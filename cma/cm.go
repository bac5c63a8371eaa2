package cma

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Timers of the kernel's CM for a RoCE path as of Linux 6.12 (packet life
// time 16, CM response timeout 20, the rxe CA ACK delay 15): a REQ waits
// 2·2^(16−8) + 2^(20−8) ms for its answer, a REP and a DREQ 2^(20−8) ms;
// each message is sent at most 16 times. The timewait lasts 2^(t−8) ms
// for the connection's ACK timeout t (ID.timewaitLocked): 17, so 512 ms,
// between two such CMs.
const (
	DefaultREQTimeout  = 4608 * time.Millisecond
	DefaultREPTimeout  = 4096 * time.Millisecond
	DefaultMaxRetries  = 15
	cmResponseTimeout  = 20 // CMA_CM_RESPONSE_TIMEOUT
	packetLifeTime     = 16 // CMA_IBOE_PACKET_LIFETIME (18 in Linux 6.1)
	caACKDelay         = 15 // rxe's local CA ACK delay
	mraServiceTimeout  = 24 // CMA_CM_MRA_SETTING
	defaultHopLimit    = 64
	maxBacklog         = 1024
	numRecvs           = 512 // ib_mad's mad_recvq_size
	numSends           = 128 // ib_mad's mad_sendq_size
	slotSize           = emu.GRHSize + mad.Size
	ephemeralPortFirst = 32768 // net.ipv4.ip_local_port_range
	ephemeralPortLast  = 60999
)

// Config configures a CM. Only Dev is required.
type Config struct {
	// Dev is the device whose port 1 the CM serves. Its GSI QP must not
	// exist yet: the CM creates it.
	Dev *emu.Device
	// Clock schedules retransmissions and the timewait; nil means the
	// device's clock.
	Clock clock.Clock
	// Seed seeds communication IDs, PSNs and ephemeral ports.
	Seed uint64
	// REQTimeout, REPTimeout and MaxRetries replace the defaults when
	// set, Timewait the timewait the connection's ACK timeout gives
	// (tests).
	REQTimeout, REPTimeout, Timewait time.Duration
	MaxRetries                       int
	// DropTx, if set, is asked about each outgoing MAD; true drops it
	// (tests of retransmission).
	DropTx func(mad.MAD) bool
	// Groups, if set, joins and leaves IP multicast groups on the link
	// (IGMP/MLD) for the full-member joins of IPv4 groups, as the
	// kernel's cma_igmp_send does (package node's Node).
	Groups GroupMembership
}

// GroupMembership is the host's IP multicast membership on the device's
// link.
type GroupMembership interface {
	JoinMulticast(group netip.Addr) error
	LeaveMulticast(group netip.Addr) error
}

// CM is the Communication Manager of one device. It is safe for
// concurrent use.
type CM struct {
	cfg  Config
	dev  *emu.Device
	clk  clock.Clock
	guid uint64
	mtu  ib.MTU

	pd   *emu.PD
	cq   *emu.CQ
	gsi  *emu.QP
	mr   *emu.MR
	addr uint64
	buf  []byte

	notify chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup

	ahMu sync.Mutex
	ahs  map[emu.GID]*emu.AH

	slotMu    sync.Mutex
	freeSlots []int
	overflow  []pendingSend // sends waiting for a slot (the MAD layer's overflow list)

	mu      sync.Mutex
	rnd     *rand.Rand
	ids     map[*ID]struct{}
	conns   map[uint32]*ID    // by local communication ID
	remotes map[remoteKey]*ID // by the peer's CA GUID and communication ID
	sidrs   map[sidrKey]*ID   // service requests being answered, by sender and request ID
	ports   map[portKey][]*ID // bound IDs by port space and port
	closed  bool
	removed bool   // RemoveDevice has run
	serial  uint64 // the last ID's serial
	stats   Stats

	counters [numCounterGroups][NumCMAttrs]atomic.Uint64
}

// The IB CM's per-port message counters (cm.c's cm_counter_groups), by
// group and by message: CounterXmit counts the messages sent (each
// retransmission too), CounterXmitRetries the retransmissions,
// CounterRecv the messages received, CounterRecvDuplicates those taken as
// duplicates.
const (
	CounterXmit = iota
	CounterXmitRetries
	CounterRecv
	CounterRecvDuplicates
	numCounterGroups
)

// NumCMAttrs is the number of CM messages with a counter: REQ, MRA, REJ,
// REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR (attribute IDs 0x10
// to 0x1A, in that order).
const NumCMAttrs = 11

// CMCounters are the message counters by group and by attribute ID −
// 0x10.
type CMCounters [numCounterGroups][NumCMAttrs]uint64

// count adds one to group's counter of m's message, if it is a CM message.
func (c *CM) count(group int, m mad.MAD) {
	if i := int(m.AttributeID()) - int(mad.AttrREQ); i >= 0 && i < NumCMAttrs {
		c.counters[group][i].Add(1)
	}
}

// Counters returns the CM's message counters.
func (c *CM) Counters() CMCounters {
	var out CMCounters
	for g := range out {
		for i := range out[g] {
			out[g][i] = c.counters[g][i].Load()
		}
	}
	return out
}

// pendingSend is a MAD waiting for a free send slot.
type pendingSend struct {
	ah *emu.AH
	m  mad.MAD
}

// maxOverflow bounds the sends that wait for a slot; beyond it a MAD is
// dropped as a lost datagram (the retransmission timers cover it).
const maxOverflow = 4096

type portKey struct {
	ps   PortSpace
	port uint16
}

// Stats counts what the CM received and refused.
type Stats struct {
	Received  uint64 // MADs received on QP1
	Malformed uint64 // not a CM MAD the CM understands: dropped, or answered (Unsupported)
	// Unsupported counts the Malformed MADs answered with a GetResp of
	// status "unsupported method/attribute": the Gets and Sets no agent
	// takes (mad.UnmatchedReply).
	Unsupported uint64
	Unmatched   uint64 // dropped: naming no ID
	RejSent     uint64 // REJs sent
	Duplicates  uint64 // duplicate REQs dropped or answered with a MRA
	// BacklogDrops counts the REQs dropped without an answer because the
	// listener's consumer refused them (a full backlog), so that the
	// peer's retransmission may find room (ib_cm's cm_destroy_id on
	// -ENOMEM).
	BacklogDrops uint64
}

// New creates the CM of cfg.Dev: a PD, a CQ and the GSI QP in RTS with
// receives posted, and the goroutine that reads it. Close undoes it.
func New(cfg Config) (*CM, error) {
	if cfg.Dev == nil {
		return nil, fmt.Errorf("cma: no device: %w", unix.EINVAL)
	}
	c := &CM{cfg: cfg, dev: cfg.Dev, clk: cfg.Clock, notify: make(chan struct{}, 1), done: make(chan struct{}),
		rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), ahs: map[emu.GID]*emu.AH{},
		ids: map[*ID]struct{}{}, conns: map[uint32]*ID{}, remotes: map[remoteKey]*ID{}, sidrs: map[sidrKey]*ID{}, ports: map[portKey][]*ID{}}
	if c.clk == nil {
		c.clk = cfg.Dev.Clock()
	}
	if c.cfg.REQTimeout == 0 {
		c.cfg.REQTimeout = DefaultREQTimeout
	}
	if c.cfg.REPTimeout == 0 {
		c.cfg.REPTimeout = DefaultREPTimeout
	}
	if c.cfg.MaxRetries == 0 {
		c.cfg.MaxRetries = DefaultMaxRetries
	}
	c.guid = c.dev.Query().NodeGUID
	pa, err := c.dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("cma: %w", err)
	}
	c.mtu = pa.ActiveMTU
	if err := c.setup(); err != nil {
		c.teardown()
		return nil, fmt.Errorf("cma: %w", err)
	}
	c.wg.Add(1)
	go c.run()
	return c, nil
}

// Device returns the device the CM serves.
func (c *CM) Device() *emu.Device { return c.dev }

// Stats returns the CM's counters.
func (c *CM) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *CM) setup() error {
	var err error
	if c.pd, err = c.dev.AllocPD(0); err != nil {
		return err
	}
	if c.cq, err = c.dev.CreateCQ(emu.CQInitAttr{CQE: numRecvs + numSends, CompHandler: func(*emu.CQ) {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}}); err != nil {
		return err
	}
	if err := c.dev.TakeMADLayer(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	c.gsi, err = c.pd.CreateQP(&emu.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, QPType: qpstate.TypeGSI, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: numSends, MaxRecvWR: numRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("create GSI QP: %w", err)
	}
	steps := []struct {
		a qpstate.Attr
		m qpstate.AttrMask
	}{
		{qpstate.Attr{QPState: qpstate.StateInit, QKey: emu.GSIQKey}, qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrQKey},
		{qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState},
		{qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState | qpstate.AttrSQPSN},
	}
	for _, s := range steps {
		if err := c.gsi.Modify(&s.a, s.m); err != nil {
			return fmt.Errorf("GSI QP: %w", err)
		}
	}
	n := (numRecvs + numSends) * slotSize
	c.addr, c.buf = c.dev.Memory().Alloc(n)
	if c.mr, err = c.pd.RegUserMR(c.addr, uint64(n), c.addr, ib.AccessLocalWrite); err != nil {
		return err
	}
	for i := range numRecvs {
		if err := c.postRecv(i); err != nil {
			return err
		}
	}
	for i := range numSends {
		c.freeSlots = append(c.freeSlots, numRecvs+i)
	}
	return nil
}

func (c *CM) postRecv(slot int) error {
	_, err := c.gsi.PostRecv([]emu.RecvWR{{WRID: uint64(slot), SGList: []emu.SGE{{Addr: c.addr + uint64(slot*slotSize), Length: slotSize, LKey: c.mr.LKey()}}}})
	return err
}

func (c *CM) teardown() {
	if c.gsi != nil {
		c.gsi.Destroy()
	}
	for _, ah := range c.ahs {
		ah.Destroy()
	}
	if c.mr != nil {
		c.mr.Dereg()
	}
	if c.buf != nil {
		c.dev.Memory().Free(c.addr)
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
}

// Close stops the CM: every ID is destroyed as by its consumer (peers get
// what the kernel sends then), timers stop, the GSI QP and its resources
// are freed.
func (c *CM) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	for id := range c.ids {
		id.destroyLocked()
	}
	c.closed = true
	c.mu.Unlock()
	close(c.done)
	c.wg.Wait()
	c.teardown()
	return nil
}

// run reads the GSI CQ until Close.
func (c *CM) run() {
	defer c.wg.Done()
	wc := make([]emu.WC, 16)
	for {
		n := c.cq.Poll(wc)
		if n == 0 {
			c.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
			if n = c.cq.Poll(wc); n == 0 {
				select {
				case <-c.notify:
				case <-c.done:
					return
				}
				continue
			}
		}
		for i := range wc[:n] {
			w := &wc[i]
			slot := int(w.WRID)
			if w.Opcode&emu.WCRecv == 0 {
				c.slotMu.Lock()
				if len(c.overflow) > 0 {
					p := c.overflow[0]
					c.overflow[0] = pendingSend{}
					c.overflow = c.overflow[1:]
					c.slotMu.Unlock()
					c.post(slot, p.ah, p.m)
					continue
				}
				c.freeSlots = append(c.freeSlots, slot)
				c.slotMu.Unlock()
				continue
			}
			if w.Status == emu.WCSuccess {
				b := c.buf[slot*slotSize : (slot+1)*slotSize : (slot+1)*slotSize]
				c.receive(w, b)
			}
			select {
			case <-c.done:
				return
			default:
			}
			c.postRecv(slot)
		}
	}
}

// receive handles one GSI receive: 40 bytes of GRH room, then the MAD.
func (c *CM) receive(w *emu.WC, b []byte) {
	c.mu.Lock()
	c.stats.Received++
	c.mu.Unlock()
	nt := w.NetworkHdrType
	if w.WCFlags&emu.WCWithNetworkHdrType == 0 {
		nt = emu.NetworkIPv4
	}
	var sgid, dgid emu.GID
	var err error
	var m mad.MAD
	if int(w.ByteLen) >= emu.GRHSize+mad.Size {
		sgid, dgid, err = emu.GetGIDsFromRDMAHdr((*[emu.GRHSize]byte)(b[:emu.GRHSize]), nt)
		if err == nil {
			m, err = mad.ParseCM(b[emu.GRHSize:])
		}
	} else {
		err = mad.ErrTruncated
	}
	if err != nil {
		c.mu.Lock()
		c.stats.Malformed++
		c.mu.Unlock()
		if sgid.IsZero() {
			return
		}
		// A Get or Set no agent takes is answered, as by the kernel's
		// MAD layer (ib_mad_recv_done, generate_unmatched_resp).
		if r, ok := mad.UnmatchedReply(b[emu.GRHSize:]); ok {
			c.mu.Lock()
			c.stats.Unsupported++
			c.mu.Unlock()
			c.send(sgid, r)
		}
		return
	}
	c.count(CounterRecv, m)
	// The view is of our receive buffer, reposted after this returns.
	m = append(mad.MAD(nil), m...)
	// Replies go back to the sender's address: make sure we can reach it
	// before taking the lock (the resolution may wait for ARP).
	if _, err := c.ah(sgid); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	switch m.AttributeID() {
	case mad.AttrREQ:
		c.onREQ(sgid, dgid, m)
	case mad.AttrREP:
		c.onREP(sgid, m)
	case mad.AttrRTU:
		c.onRTU(m)
	case mad.AttrREJ:
		c.onREJ(m)
	case mad.AttrMRA:
		c.onMRA(m)
	case mad.AttrDREQ:
		c.onDREQ(sgid, m)
	case mad.AttrDREP:
		c.onDREP(m)
	case mad.AttrSIDRREQ:
		c.onSIDRREQ(sgid, m)
	case mad.AttrSIDRREP:
		c.onSIDRREP(m)
	default:
		c.stats.Unmatched++
	}
}

// ah returns the cached address handle of a peer GID.
func (c *CM) ah(dgid emu.GID) (*emu.AH, error) {
	c.ahMu.Lock()
	defer c.ahMu.Unlock()
	if ah := c.ahs[dgid]; ah != nil {
		return ah, nil
	}
	idx, err := c.localGIDIndexFor(dgid.Addr())
	if err != nil {
		return nil, err
	}
	av := ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
		GRH: ib.GlobalRoute{DGID: dgid, SGIDIndex: uint8(idx), HopLimit: defaultHopLimit}}
	if r := c.dev.Resolver(); r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		av.DMAC, err = r.Resolve(ctx, dgid.Addr())
		cancel()
		if err != nil {
			return nil, err
		}
	}
	ah, err := c.pd.CreateAH(&av)
	if err != nil {
		return nil, err
	}
	c.ahs[dgid] = ah
	return ah, nil
}

// send posts m to QP1 at dgid. Failures are dropped as a lost datagram
// would be: the retransmission timers cover them.
func (c *CM) send(dgid emu.GID, m mad.MAD) {
	c.count(CounterXmit, m)
	if c.cfg.DropTx != nil && c.cfg.DropTx(m) {
		return
	}
	if m.AttributeID() == mad.AttrREJ {
		c.stats.RejSent++
	}
	ah, err := c.ah(dgid)
	if err != nil {
		return
	}
	c.slotMu.Lock()
	if len(c.freeSlots) == 0 {
		if len(c.overflow) < maxOverflow {
			c.overflow = append(c.overflow, pendingSend{ah, append(mad.MAD(nil), m...)})
		}
		c.slotMu.Unlock()
		return
	}
	slot := c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	c.slotMu.Unlock()
	c.post(slot, ah, m)
}

// post sends m from a send slot.
func (c *CM) post(slot int, ah *emu.AH, m mad.MAD) {
	off := slot * slotSize
	copy(c.buf[off:off+mad.Size], m)
	if _, err := c.gsi.PostSend([]emu.SendWR{{WRID: uint64(slot), Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: c.addr + uint64(off), Length: mad.Size, LKey: c.mr.LKey()}},
		AH:     ah, RemoteQPN: 1, RemoteQKey: emu.GSIQKey}}); err != nil {
		c.slotMu.Lock()
		c.freeSlots = append(c.freeSlots, slot)
		c.slotMu.Unlock()
	}
}

// localGIDs returns the port's RoCEv2 GIDs by index.
func (c *CM) localGIDs() map[int]emu.GID {
	out := map[int]emu.GID{}
	pa, err := c.dev.QueryPort(1)
	if err != nil {
		return out
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := c.dev.QueryGID(1, i)
		if err != nil || e.Type != ib.GIDTypeRoCEv2 {
			continue
		}
		out[i] = e.GID
	}
	return out
}

// localGIDIndex returns the index of the RoCEv2 GID of the local address
// a, or EADDRNOTAVAIL.
func (c *CM) localGIDIndex(a netip.Addr) (int, error) {
	g := emu.GIDFromAddr(a)
	best := -1
	for i, lg := range c.localGIDs() {
		if lg == g && (best < 0 || i < best) {
			best = i
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%v is not a local address: %w", a, unix.EADDRNOTAVAIL)
	}
	return best, nil
}

// HasAddr reports whether a is one of the device's own addresses (a
// RoCEv2 GID of its port): the device an rdma_cm ID bound to a attaches
// to (cma_acquire_dev_by_src_ip).
func (c *CM) HasAddr(a netip.Addr) bool {
	_, err := c.localGIDIndex(a.WithZone(""))
	return err == nil
}

// localGIDIndexFor picks the local RoCEv2 GID to reach dst from: dst's own
// entry when it is local, else the GID of its family (link-local for a
// link-local destination) sharing the longest prefix with dst, as the
// source address a route to dst would take (the lowest index on a tie).
func (c *CM) localGIDIndexFor(dst netip.Addr) (int, error) {
	if i, err := c.localGIDIndex(dst); err == nil {
		return i, nil
	}
	best, bestLen := -1, -1
	for i, g := range c.localGIDs() {
		a := g.Addr()
		if a.Is4() != dst.Is4() || a.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast() {
			continue
		}
		n := commonPrefix(a, dst)
		if n > bestLen || n == bestLen && i < best {
			best, bestLen = i, n
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no local RoCEv2 GID to reach %v: %w", dst, unix.EADDRNOTAVAIL)
	}
	return best, nil
}

func (c *CM) gidAt(i int) emu.GID {
	e, err := c.dev.QueryGID(1, i)
	if err != nil {
		return emu.GID{}
	}
	return e.GID
}

// madAgentHiTID is the high half of the CM's transaction IDs: its MAD
// agent's hi_tid, which the kernel numbers in registration order; 2 for
// the CM of a Linux 6.12 host with one rxe device, as its REQs show.
const madAgentHiTID = 2

// formTID is cm_form_tid, the transaction ID of the REQ, SIDR_REQ or DREQ
// of the ID with local communication ID localID: the agent's hi_tid above
// the ID, which the kernel keeps in network byte order and widens as a
// host integer, so its bytes come out reversed on the little-endian hosts
// rxe runs on.
func formTID(localID uint32) uint64 {
	return madAgentHiTID<<32 | uint64(bits.ReverseBytes32(localID))
}

// newCommIDLocked returns a fresh local communication ID (nonzero, unused).
func (c *CM) newCommIDLocked() uint32 {
	for {
		id := c.rnd.Uint32()
		if id != 0 && c.conns[id] == nil {
			return id
		}
	}
}

// commonPrefix is the number of leading bits a and b share.
func commonPrefix(a, b netip.Addr) int {
	x, y := a.As16(), b.As16()
	n := 0
	for i := range x {
		d := x[i] ^ y[i]
		if d == 0 {
			n += 8
			continue
		}
		return n + bits.LeadingZeros8(d)
	}
	return n
}
