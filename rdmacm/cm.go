package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Timeouts and retries of the kernel's cm for an rdma_cm connection on
// RoCE, the defaults of Config.
const (
	// DefaultRetryInterval is how long a REP (and the passive side's
	// DREQ) waits per try: the REQ's Local CM Response Timeout of 20
	// (CMA_CM_RESPONSE_TIMEOUT) as cm_convert_to_ms reads it, 4096 ms.
	DefaultRetryInterval = 4096 * time.Millisecond
	// REQTimeout is how long a REQ (and the active side's DREQ) waits
	// per try: twice the packet lifetime of 18 plus the remote CM
	// response timeout of 20, 2·1024 + 4096 ms (cm_send_req).
	REQTimeout = 6144 * time.Millisecond
	// DefaultMaxRetries is CMA_MAX_CM_RETRIES.
	DefaultMaxRetries = 15
	// MRAServiceTimeout is the service timeout of the MRA the passive
	// side sends for a duplicate REQ the consumer has not answered yet
	// (CMA_CM_MRA_SETTING): 24, about 67 s.
	MRAServiceTimeout = 24

	cmResponseTimeout = 20 // in REQ: 4.096 µs * 2^20
	packetLifeTime    = 18 // Primary Local ACK Timeout the kernel puts in a RoCE REQ is 19 = lifetime + 1
	targetACKDelay    = 15 // REP's Target ACK Delay from rxe
	numRecvs          = 64
	numSends          = 64
	slotSize          = emu.GRHSize + mad.Size
)

// Config configures a CM. Only Dev is required.
type Config struct {
	// Dev is the device whose port 1 the CM serves. Its GSI QP must not
	// exist yet: the CM creates it.
	Dev *emu.Device
	// Clock schedules retransmissions; nil means clock.Real{}.
	Clock clock.Clock
	// Seed seeds communication IDs, transaction IDs and starting PSNs.
	Seed uint64
	// Resolver gives the Ethernet address of a peer IP address for the
	// GSI address handles and the connected QP's address vector (what
	// the kernel's rdma_resolve_addr does with the neighbour table). Nil
	// leaves the DMAC zero, for a device with its own neighbour table.
	Resolver emu.Resolver
	// RetryInterval, if not 0, is how long every REQ, REP or DREQ waits
	// for its answer before it is sent again; 0 means the kernel's
	// times: REQTimeout for a REQ and the active side's DREQ, the REQ's
	// Local CM Response Timeout (DefaultRetryInterval from rdma_cm) for
	// a REP and the passive side's DREQ. An MRA stretches the wait of
	// the message it acknowledges to its service timeout plus the
	// path's ACK timeout either way (cm_mra_handler).
	RetryInterval time.Duration
	// MaxRetries is how many times it is sent again before the operation
	// fails with ETIMEDOUT; 0 means DefaultMaxRetries (the passive side
	// uses the REQ's Max CM Retries).
	MaxRetries int

	// dropTx, if set, is asked about each outgoing MAD; true drops it
	// (tests of retransmission).
	dropTx func(mad.MAD) bool
}

// CM is the Communication Manager of one device: its GSI QP and the
// connections and listeners using it. It is safe for concurrent use.
type CM struct {
	cfg   Config
	dev   *emu.Device
	clk   clock.Clock
	pd    *emu.PD
	cq    *emu.CQ
	gsi   *emu.QP
	mr    *emu.MR
	addr  uint64
	buf   []byte
	guid  uint64
	ports attrs

	notify chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	rnd       *rand.Rand
	freeSlots []int
	ahs       map[emu.GID]*emu.AH // of the connections' peers
	slotAH    map[int]*emu.AH     // transient AHs of replies, destroyed when their send completes
	conns     map[uint32]*Conn    // by local communication ID
	remote    map[remoteKey]*Conn // passive connections by the REQ's (CA GUID, comm ID)
	listeners map[uint16]*Listener
	closed    bool

	stats counters
}

// remoteKey identifies a REQ as the kernel's cm does to find duplicates:
// the sender's CA GUID and Local Communication ID.
type remoteKey struct {
	guid uint64
	id   uint32
}

type attrs struct {
	activeMTU  ib.MTU
	maxRdAtom  int
	maxInitAtm int
}

// New creates the CM of cfg.Dev: a PD, a CQ and the GSI QP moved to RTS
// with receives posted, and starts the goroutine that reads it. Close
// undoes it.
func New(cfg Config) (*CM, error) {
	if cfg.Dev == nil {
		return nil, fmt.Errorf("rdmacm: no device: %w", unix.EINVAL)
	}
	c := &CM{cfg: cfg, dev: cfg.Dev, clk: cfg.Clock, notify: make(chan struct{}, 1), done: make(chan struct{}),
		rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), ahs: map[emu.GID]*emu.AH{},
		slotAH: map[int]*emu.AH{}, conns: map[uint32]*Conn{}, remote: map[remoteKey]*Conn{}, listeners: map[uint16]*Listener{}}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	if c.cfg.MaxRetries == 0 {
		c.cfg.MaxRetries = DefaultMaxRetries
	}
	da := c.dev.Query()
	c.guid = da.NodeGUID
	pa, err := c.dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	c.ports = attrs{activeMTU: pa.ActiveMTU, maxRdAtom: da.MaxQPRdAtom, maxInitAtm: da.MaxQPInitRdAtom}
	if err := c.setup(); err != nil {
		c.teardown()
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	c.wg.Add(1)
	go c.run()
	return c, nil
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
	// On a device that models the kernel's MAD layer holding QP1, become
	// that layer (emu.Device.TakeMADLayer); a device without one lets us
	// create the GSI QP directly.
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
	for _, ah := range c.slotAH {
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

// Close stops the CM: pending operations fail with ECONNABORTED, the GSI
// QP and its resources are destroyed. Connections' QPs are the
// consumer's and stay as they are.
func (c *CM) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = map[uint32]*Conn{}
	for _, l := range c.listeners {
		l.closeLocked()
	}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.fail(fmt.Errorf("rdmacm: closed: %w", unix.ECONNABORTED))
	}
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
				c.mu.Lock()
				c.freeSlots = append(c.freeSlots, slot)
				ah := c.slotAH[slot]
				delete(c.slotAH, slot)
				c.mu.Unlock()
				if ah != nil {
					ah.Destroy()
				}
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
	if int(w.ByteLen) < emu.GRHSize+mad.Size {
		c.stats.malformed.Add(1)
		return
	}
	nt := w.NetworkHdrType
	if w.WCFlags&emu.WCWithNetworkHdrType == 0 {
		nt = emu.NetworkIPv4
	}
	sgid, _, err := emu.GetGIDsFromRDMAHdr((*[emu.GRHSize]byte)(b[:emu.GRHSize]), nt)
	if err != nil {
		c.stats.malformed.Add(1)
		return
	}
	m, err := mad.ParseCM(b[emu.GRHSize:])
	if err != nil {
		// The MAD layer drops what no agent registered for (another
		// class or class version, a response, a bad base version) and
		// the cm what it does not handle (LAP and APR on RoCE).
		c.stats.malformed.Add(1)
		return
	}
	c.stats.rx[attrIndex(m.AttributeID())].Add(1)
	// The views are of our receive buffer, reposted after this returns:
	// handlers copy what they keep.
	m = append(mad.MAD(nil), m...)
	switch m.AttributeID() {
	case mad.AttrREQ:
		c.onREQ(sgid, m)
	case mad.AttrSIDRREQ:
		c.onSIDRREQ(sgid, m)
	case mad.AttrREJ:
		// A REJ of a REQ may carry no remote ID of ours if it was of
		// a REP; look it up by the ID it names.
		if !c.toConn(m.RemoteCommID(), m) {
			c.stats.unmatched.Add(1)
		}
	case mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP, mad.AttrMRA:
		if c.toConn(m.RemoteCommID(), m) {
			return
		}
		c.stats.unmatched.Add(1)
		switch m.AttributeID() {
		case mad.AttrDREQ:
			// A DREQ of a connection we no longer know: answer, so
			// the peer stops (cm_dreq_handler's "DREP for unknown").
			c.reply(sgid, buildDREP(m.TransactionID(), m.RemoteCommID(), m.LocalCommID()))
		case mad.AttrREP:
			// cm_rep_handler: a REP naming no REQ of ours is
			// rejected, "invalid communication ID" (cm_issue_rej).
			rej := mad.NewCM(mad.AttrREJ, m.TransactionID())
			mad.REJ(rej).Encode(&mad.REJFields{LocalCommID: m.RemoteCommID(), RemoteCommID: m.LocalCommID(),
				MessageREJected: mad.MsgREP, Reason: mad.RejInvalidCommID})
			c.reply(sgid, rej)
		}
	default: // SIDR_REP: this CM sends no SIDR_REQ
		c.stats.unmatched.Add(1)
	}
}

// onSIDRREQ answers a service ID resolution request: this CM has no UD
// listeners, so every SIDR_REQ gets a SIDR_REP "unsupported" (no
// listener: cm_sidr_req_handler) with the request ID, the service ID and
// the transaction ID echoed, as udaddy's client sees before its server
// listens.
func (c *CM) onSIDRREQ(sgid emu.GID, m mad.MAD) {
	req := mad.SIDRREQ(m)
	rep := mad.NewCM(mad.AttrSIDRREP, m.TransactionID())
	mad.SIDRREP(rep).Encode(&mad.SIDRREPFields{RequestID: req.RequestID(), Status: mad.SIDRUnsupported, ServiceID: req.ServiceID()})
	c.reply(sgid, rep)
}

func (c *CM) toConn(id uint32, m mad.MAD) bool {
	c.mu.Lock()
	cn := c.conns[id]
	c.mu.Unlock()
	if cn == nil {
		return false
	}
	cn.handle(m)
	return true
}

// ah returns the cached address handle of a peer GID.
func (c *CM) ah(dgid emu.GID) (*emu.AH, error) {
	c.mu.Lock()
	ah := c.ahs[dgid]
	c.mu.Unlock()
	if ah != nil {
		return ah, nil
	}
	av, err := c.av(context.Background(), dgid)
	if err != nil {
		return nil, err
	}
	ah, err = c.pd.CreateAH(&av)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.ahs[dgid]; old != nil {
		ah.Destroy()
		return old, nil
	}
	c.ahs[dgid] = ah
	return ah, nil
}

// av is the RoCEv2 address vector to dgid from the local GID of the same
// IP family.
func (c *CM) av(ctx context.Context, dgid emu.GID) (ib.AHAttr, error) {
	sidx, err := c.localGIDIndex(dgid)
	if err != nil {
		return ib.AHAttr{}, err
	}
	var dmac [6]byte
	if c.cfg.Resolver != nil {
		ip := netip.AddrFrom16(dgid).Unmap()
		if dmac, err = c.cfg.Resolver.Resolve(ctx, ip); err != nil {
			return ib.AHAttr{}, fmt.Errorf("resolve %v: %w", ip, err)
		}
	}
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: dmac,
		GRH: ib.GlobalRoute{DGID: dgid, SGIDIndex: uint8(sidx), HopLimit: 64}}, nil
}

// localGIDIndex picks the RoCEv2 GID of the local port whose IP family
// matches dgid's (the first IPv4-mapped one for an IPv4 peer).
func (c *CM) localGIDIndex(dgid emu.GID) (int, error) {
	want4 := netip.AddrFrom16(dgid).Is4In6()
	for i := 0; ; i++ {
		e, err := c.dev.QueryGID(1, i)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			break // past the end of the table
		}
		if e.Type != ib.GIDTypeRoCEv2 {
			continue
		}
		a := netip.AddrFrom16(e.GID)
		if a.Is4In6() == want4 && !a.IsLinkLocalUnicast() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no local RoCEv2 GID for %v: %w", netip.AddrFrom16(dgid).Unmap(), unix.EADDRNOTAVAIL)
}

// localGIDFor returns the local GID index and GID used to reach dgid.
func (c *CM) localGIDFor(dgid emu.GID) (int, emu.GID, error) {
	i, err := c.localGIDIndex(dgid)
	if err != nil {
		return 0, emu.GID{}, err
	}
	e, err := c.dev.QueryGID(1, i)
	return i, e.GID, err
}

// send posts m to QP1 at dgid, through the cached address handle of a
// connection's peer. Failures are dropped as a lost datagram would be:
// the retransmission timers cover them.
func (c *CM) send(dgid emu.GID, m mad.MAD) error {
	ah, err := c.ah(dgid)
	if err != nil {
		return err
	}
	return c.post(dgid, m, ah, false)
}

// reply sends m to dgid for a message that has no connection here (a REJ
// of an unknown service ID, a SIDR_REP, a DREP or REJ for an unknown
// ID): the peer's cached address handle if a connection has one, else
// one made for this send and destroyed when it completes, as the
// kernel's cm makes a response AH from each received MAD. A flood from
// many addresses thus leaves nothing behind.
func (c *CM) reply(dgid emu.GID, m mad.MAD) error {
	c.mu.Lock()
	ah := c.ahs[dgid]
	c.mu.Unlock()
	if ah != nil {
		return c.post(dgid, m, ah, false)
	}
	av, err := c.av(context.Background(), dgid)
	if err != nil {
		return err
	}
	if ah, err = c.pd.CreateAH(&av); err != nil {
		return err
	}
	if err := c.post(dgid, m, ah, true); err != nil {
		ah.Destroy()
		return err
	}
	return nil
}

// post sends m with ah; with transient, ah is destroyed when the send
// completes (and stays the caller's if post fails).
func (c *CM) post(dgid emu.GID, m mad.MAD, ah *emu.AH, transient bool) error {
	c.stats.tx[attrIndex(m.AttributeID())].Add(1)
	if c.cfg.dropTx != nil && c.cfg.dropTx(m) {
		if transient {
			ah.Destroy()
		}
		return nil
	}
	c.mu.Lock()
	if c.closed || len(c.freeSlots) == 0 {
		c.mu.Unlock()
		return fmt.Errorf("rdmacm: no send slot: %w", unix.ENOBUFS)
	}
	slot := c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	if transient {
		c.slotAH[slot] = ah
	}
	c.mu.Unlock()
	off := slot * slotSize
	copy(c.buf[off:off+mad.Size], m)
	_, err := c.gsi.PostSend([]emu.SendWR{{WRID: uint64(slot), Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: c.addr + uint64(off), Length: mad.Size, LKey: c.mr.LKey()}},
		AH:     ah, RemoteQPN: 1, RemoteQKey: emu.GSIQKey}})
	if err != nil {
		c.mu.Lock()
		c.freeSlots = append(c.freeSlots, slot)
		delete(c.slotAH, slot)
		c.mu.Unlock()
	}
	return err
}

// newID returns a fresh local communication ID (nonzero, unused).
func (c *CM) newIDLocked() uint32 {
	for {
		id := c.rnd.Uint32()
		if id != 0 && c.conns[id] == nil {
			return id
		}
	}
}

func (c *CM) psnLocked() uint32 { return c.rnd.Uint32() & ib.PSNMask }
