package nldev

import (
	"encoding/binary"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is what a DEV_GET reply tells of one device (fill_dev_info) and
// what its PORT_GET, GET_CHARDEV and STAT_GET replies need.
type Device struct {
	Index        uint32
	Name         string
	FWVersion    string // "" puts none (rxe has no firmware string)
	CapFlags     uint64 // device_cap_flags
	NodeGUID     uint64 // in host order
	SysImageGUID uint64
	NodeType     uint8  // RDMA_NODE_*
	Protocol     string // "roce"
	DIM          bool   // use_cq_dim
	Ports        []Port // port 1 first
	// Chardevs are the device's char devices by client name ("uverbs"):
	// GET_CHARDEV with DEV_INDEX answers from here.
	Chardevs map[string]Chardev
}

// Port is what a PORT_GET reply tells of one port (fill_port_info).
type Port struct {
	CapFlags    uint64 // port_cap_flags
	State       uint8  // IB_PORT_*
	PhysState   uint8  // IB_PORT_PHYS_STATE_*
	Netdev      string // the bound netdev; "" for none
	NetdevIndex uint32
}

// Chardev is a client's char device (struct ib_client_nl_info).
type Chardev struct {
	Name     string
	Dev      uint64 // huge_encode_dev of its dev_t
	ABI      uint64
	DriverID uint32 // uverbs' RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID; 0 puts none
}

// EncodeDev is the kernel's huge_encode_dev of major:minor.
func EncodeDev(major, minor uint32) uint64 {
	return uint64(minor&0xff | major<<8 | (minor&^0xff)<<12)
}

// Owner is who holds a resource (fill_res_name_pid): a user process's
// PID, or the name of the kernel module that made it.
type Owner struct {
	PID  uint32
	Kern string // non-empty for a kernel resource
}

// QP is one entry of RES_QP_GET (fill_res_qp_entry).
type QP struct {
	Port         uint32 // 0: not yet set, not put
	LQPN, RQPN   uint32
	RQPSN, SQPSN uint32
	PathMigState uint8
	Type         uint8 // IB_QPT_*
	State        uint8 // IB_QPS_*
	PDN          uint32
	Owner
}

// CQ is one entry of RES_CQ_GET (fill_res_cq_entry).
type CQ struct {
	CQN, CQE uint32
	Users    uint64
	PollCtx  uint8 // kernel CQs only
	DIM      bool
	CtxN     uint32
	Owner
}

// MR is one entry of RES_MR_GET (fill_res_mr_entry).
type MR struct {
	MRN, RKey, LKey uint32
	Len             uint64
	PDN             uint32
	Owner
}

// PD is one entry of RES_PD_GET (fill_res_pd_entry).
type PD struct {
	PDN, LocalDMALKey, UnsafeGlobalRKey uint32
	Users                               uint64
	CtxN                                uint32
	Owner
}

// CMID is one entry of RES_CM_ID_GET (fill_res_cm_id_entry).
type CMID struct {
	Port     uint32
	LQPN     uint32 // 0: no QP, no QP type put
	QPType   uint8
	PS       uint32
	State    uint8
	Src, Dst []byte // struct sockaddr_storage (128 bytes); nil puts none
	CMIDN    uint32
	Owner
}

// Ctx is one entry of RES_CTX_GET (fill_res_ctx_entry).
type Ctx struct {
	CtxN uint32
	Owner
}

// SRQ is one entry of RES_SRQ_GET (fill_res_srq_entry).
type SRQ struct {
	SRQN  uint32
	Type  uint8 // IB_SRQT_*
	PDN   uint32
	CQN   uint32 // put for an SRQ with a CQ (XRC)
	HasCQ bool
	Owner
}

// Resources are a device's tracked resources (rdma_restrack).
type Resources struct {
	QPs   []QP
	CQs   []CQ
	MRs   []MR
	PDs   []PD
	CMIDs []CMID
	Ctxs  []Ctx
	SRQs  []SRQ
}

// Counter is one hardware counter of a port (rdma_hw_stats).
type Counter struct {
	Name     string
	Value    uint64
	Optional bool // IB_STAT_FLAG_OPTIONAL
	Disabled bool // an optional counter turned off (is_disabled)
}

// Sys is what SYS_GET tells.
type Sys struct {
	NetnsShared bool // ib_devices_shared_netns
	CopyOnFork  bool
}

// Source is what the replies describe.
type Source interface {
	// Devices returns every device, by index.
	Devices() []Device
	// Resources returns a device's resources, as the requester's PID
	// namespace sees them.
	Resources(index uint32) Resources
	// Counters returns a port's counters, disabled ones included, or an
	// errno.
	Counters(index, port uint32) ([]Counter, error)
	// Sys returns the subsystem's modes.
	Sys() Sys
	// GlobalChardev returns a client's char device that belongs to no
	// device ("rdma_cm").
	GlobalChardev(name string) (Chardev, bool)
	// HasNetdev reports whether the requester's network namespace has
	// a netdev called name (dev_get_by_name).
	HasNetdev(name string) bool
	// NewLink adds device name of link type typ on netdev (the link
	// type's newlink), or returns the errno that refuses it.
	NewLink(name, typ, netdev string) unix.Errno
	// DelLink removes the device of index (ib_unregister_device), or
	// returns the errno that refuses it.
	DelLink(index uint32) unix.Errno
}

// Client is the requesting socket, as the replies depend on it.
type Client struct {
	PortID uint32 // the socket's port id, put in every reply
	Admin  bool   // the socket's opener has CAP_NET_ADMIN (netlink_capable)
	CapAck bool   // NETLINK_CAP_ACK: an error does not echo the request's payload
}

// The message flags and types of <linux/netlink.h>.
const (
	flagRequest = unix.NLM_F_REQUEST
	flagMulti   = unix.NLM_F_MULTI
	flagAck     = unix.NLM_F_ACK
	flagDump    = unix.NLM_F_DUMP
	flagCapped  = 0x100 // NLM_F_CAPPED
)

// Serve answers one packet a client sent: the packets to deliver to it,
// in order. It reads the packet as netlink_rcv_skb does: each message in
// turn, a message whose length is under a header or past the packet's end
// ending the packet silently; a message that is not a request, or a
// control message, is only acknowledged (NLM_F_ACK); a request gets its
// reply, its dump (NLM_F_MULTI messages and NLMSG_DONE, which carries a
// dump's errno) or NLMSG_ERROR with the kernel's errno, and an ACK on
// success when it asked for one.
func Serve(src Source, cl Client, pkt []byte) [][]byte {
	var out [][]byte
	for len(pkt) >= HdrLen {
		h := parseHeader(pkt)
		if h.Len < HdrLen || int(h.Len) > len(pkt) {
			break
		}
		msg := pkt[:h.Len]
		var errno unix.Errno
		dumped := false
		if h.Flags&flagRequest != 0 && h.Type >= unix.NLMSG_MIN_TYPE {
			var replies [][]byte
			replies, dumped, errno = serveMsg(src, cl, h, msg[HdrLen:])
			out = append(out, replies...)
		}
		if !dumped && (h.Flags&flagAck != 0 || errno != 0) {
			out = append(out, ack(cl, msg, errno))
		}
		n := align(int(h.Len))
		if n > len(pkt) {
			n = len(pkt)
		}
		pkt = pkt[n:]
	}
	return out
}

// ack is NLMSG_ERROR for msg (netlink_ack): errno 0 acknowledges and
// echoes the request's header; an error echoes the whole request unless
// the socket set NETLINK_CAP_ACK.
func ack(cl Client, msg []byte, errno unix.Errno) []byte {
	h := parseHeader(msg)
	echo := msg[:HdrLen]
	var flags uint16
	if errno != 0 && !cl.CapAck {
		echo = msg
	} else if errno != 0 {
		flags = flagCapped
	}
	var w builder
	w.begin(Header{Type: unix.NLMSG_ERROR, Flags: flags, Seq: h.Seq, PID: cl.PortID})
	w.b = binary.NativeEndian.AppendUint32(w.b, uint32(-int32(errno)))
	w.b = append(w.b, echo...)
	w.end()
	return w.b
}

// A handler answers one command: its message (done) or an errno. A dump
// handler appends its messages and returns the errno NLMSG_DONE carries.
type (
	doit   func(r *req) unix.Errno
	dumpit func(r *req) unix.Errno
)

type cmd struct {
	doit  doit
	dump  dumpit
	admin bool // RDMA_NL_ADMIN_PERM
}

// req is one request being answered.
type req struct {
	src   Source
	cl    Client
	h     Header
	attrs Attrs
	w     builder
	multi uint16 // NLM_F_MULTI while dumping
	msgs  [][]byte
}

// put begins a reply message of op.
func (r *req) put(op uint16) {
	r.w.begin(Header{Type: Type(ClientNLDEV, op), Flags: r.multi, Seq: r.h.Seq, PID: r.cl.PortID})
}

// flush ends the open message; in a dump, a packet that would grow past
// GoodSize is delivered first, as the kernel fills one skb at a time.
func (r *req) flush() {
	r.w.end()
	if r.multi == 0 {
		return
	}
	last := r.w.b[r.w.start:]
	if r.w.start > 0 && len(r.w.b) > GoodSize {
		r.msgs = append(r.msgs, append([]byte(nil), r.w.b[:r.w.start]...))
		r.w.b = append([]byte(nil), last...)
		r.w.start = 0
	}
}

// The NLDEV commands of the kernel's nldev_cb_table that softroce
// answers; an op of the table that is missing here is one the kernel has
// but a device of softroce's cannot do (its admin flag still applies).
var cmds = map[uint16]cmd{
	CmdGet:           {doit: getDoit, dump: getDump},
	CmdSet:           {admin: true},
	CmdNewlink:       {doit: newlinkDoit, admin: true},
	CmdDellink:       {doit: dellinkDoit, admin: true},
	CmdPortGet:       {doit: portDoit, dump: portDump},
	CmdSysGet:        {doit: sysDoit},
	CmdSysSet:        {admin: true},
	CmdResGet:        {doit: resDoit, dump: resDump},
	CmdResQPGet:      {doit: resEntryDoit(resQP), dump: resEntryDump(resQP)},
	CmdResCMIDGet:    {doit: resEntryDoit(resCMID), dump: resEntryDump(resCMID)},
	CmdResCQGet:      {doit: resEntryDoit(resCQ), dump: resEntryDump(resCQ)},
	CmdResMRGet:      {doit: resEntryDoit(resMR), dump: resEntryDump(resMR)},
	CmdResPDGet:      {doit: resEntryDoit(resPD), dump: resEntryDump(resPD)},
	CmdResCtxGet:     {doit: resEntryDoit(resCtx), dump: resEntryDump(resCtx)},
	CmdResSRQGet:     {doit: resEntryDoit(resSRQ), dump: resEntryDump(resSRQ)},
	CmdGetChardev:    {doit: chardevDoit},
	CmdStatSet:       {admin: true},
	CmdStatGet:       {doit: statDoit, dump: statDump},
	CmdStatDel:       {admin: true},
	CmdResQPGetRaw:   {admin: true},
	CmdResCQGetRaw:   {admin: true},
	CmdResMRGetRaw:   {admin: true},
	CmdStatGetStatus: {doit: statStatusDoit},
}

// serveMsg is rdma_nl_rcv_msg for one request.
func serveMsg(src Source, cl Client, h Header, payload []byte) (out [][]byte, dumped bool, errno unix.Errno) {
	client, op := split(h.Type)
	if !validOp(client, op) || client != ClientNLDEV {
		// Only NLDEV is registered: the iWARP port mapper's and the
		// SA cache's clients are modules softroce does not load.
		return nil, false, unix.EINVAL
	}
	c, ok := cmds[op]
	if !ok {
		return nil, false, unix.EINVAL
	}
	if c.admin && !cl.Admin {
		return nil, false, unix.EPERM
	}
	if c.doit == nil && c.dump == nil {
		// The kernel's command, on a device that cannot do it:
		// nothing else to say than the driver's "not supported".
		return nil, false, unix.EOPNOTSUPP
	}
	attrs := parseAttrs(payload)
	r := &req{src: src, cl: cl, h: h, attrs: attrs}
	if h.Flags&flagDump == flagDump {
		if c.dump == nil {
			return nil, false, unix.EINVAL
		}
		r.multi = flagMulti
		var derr unix.Errno
		if validate(attrs) != nil {
			derr = unix.EINVAL
		} else {
			derr = c.dump(r)
		}
		// NLMSG_DONE, in the last packet when it fits.
		done := builder{}
		done.begin(Header{Type: unix.NLMSG_DONE, Flags: flagMulti, Seq: h.Seq, PID: cl.PortID})
		done.b = binary.NativeEndian.AppendUint32(done.b, uint32(-int32(derr)))
		done.end()
		if len(r.w.b)+len(done.b) > GoodSize && len(r.w.b) > 0 {
			r.msgs = append(r.msgs, r.w.b)
			r.w.b = nil
		}
		r.msgs = append(r.msgs, append(r.w.b, done.b...))
		return r.msgs, true, 0
	}
	if c.doit == nil {
		return nil, false, unix.EINVAL
	}
	if validate(attrs) != nil {
		return nil, false, unix.EINVAL
	}
	if e := c.doit(r); e != 0 {
		return nil, false, e
	}
	if len(r.w.b) == 0 {
		return nil, false, 0 // nothing but the ACK
	}
	return [][]byte{r.w.b}, false, 0
}

// validOp is is_nl_msg_valid.
func validOp(client, op uint16) bool {
	switch client {
	case ClientIWCM:
		return op < NumOpsIWPM
	case ClientLS:
		return op < NumOpsLS
	case ClientNLDEV:
		return op < NumOps
	}
	return false
}

// device returns the device DEV_INDEX names (ib_device_get_by_index).
func (r *req) device() (Device, bool) {
	i, ok := r.attrs.u32(AttrDevIndex)
	if !ok {
		return Device{}, false
	}
	for _, d := range r.src.Devices() {
		if d.Index == i {
			return d, true
		}
	}
	return Device{}, false
}

// handle is fill_nldev_handle.
func (r *req) handle(d Device) {
	r.w.u32(AttrDevIndex, d.Index)
	r.w.str(AttrDevName, d.Name)
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (r *req) devInfo(d Device) {
	r.handle(d)
	r.w.u32(AttrPortIndex, uint32(len(d.Ports)))
	r.w.u64(AttrCapFlags, d.CapFlags)
	if d.FWVersion != "" {
		r.w.str(AttrFWVersion, d.FWVersion)
	}
	r.w.u64(AttrNodeGUID, d.NodeGUID)
	r.w.u64(AttrSysImageGUID, d.SysImageGUID)
	r.w.u8(AttrDevNodeType, d.NodeType)
	if d.Protocol != "" {
		r.w.str(AttrDevProtocol, d.Protocol)
	}
	r.w.u8(AttrDevDIM, b2u8(d.DIM))
}

func getDoit(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	r.put(CmdGet)
	r.devInfo(d)
	r.flush()
	return 0
}

func getDump(r *req) unix.Errno {
	for _, d := range r.src.Devices() {
		r.put(CmdGet)
		r.devInfo(d)
		r.flush()
	}
	return 0
}

func (r *req) portInfo(d Device, port uint32) {
	p := d.Ports[port-1]
	r.handle(d)
	r.w.u32(AttrPortIndex, port)
	r.w.u64(AttrCapFlags, p.CapFlags)
	r.w.u8(AttrPortState, p.State)
	r.w.u8(AttrPortPhysState, p.PhysState)
	if p.Netdev != "" {
		r.w.u32(AttrNetdevIndex, p.NetdevIndex)
		r.w.str(AttrNetdevName, p.Netdev)
	}
}

// port returns the PORT_INDEX the request names, if valid on d
// (rdma_is_port_valid).
func (r *req) port(d Device) (uint32, bool) {
	p, ok := r.attrs.u32(AttrPortIndex)
	return p, ok && p >= 1 && int(p) <= len(d.Ports)
}

func portDoit(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	p, ok := r.port(d)
	if !ok {
		return unix.EINVAL
	}
	r.put(CmdGet) // the kernel's reply to PORT_GET says GET
	r.portInfo(d, p)
	r.flush()
	return 0
}

func portDump(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	for p := range d.Ports {
		r.put(CmdPortGet)
		r.portInfo(d, uint32(p+1))
		r.flush()
	}
	return 0
}

// newlinkDoit is nldev_newlink: "rdma link add NAME type TYPE netdev
// DEV". The reply is the ACK the request asks for.
func newlinkDoit(r *req) unix.Errno {
	name, ok1 := r.attrs.str(AttrDevName)
	typ, ok2 := r.attrs.str(AttrLinkType)
	ndev, ok3 := r.attrs.str(AttrNetdevName)
	if !ok1 || !ok2 || !ok3 || name == "" || strings.Contains(name, "%") {
		return unix.EINVAL
	}
	if !r.src.HasNetdev(ndev) {
		return unix.ENODEV
	}
	return r.src.NewLink(name, typ, ndev)
}

// dellinkDoit is nldev_dellink: "rdma link delete NAME".
func dellinkDoit(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	return r.src.DelLink(d.Index)
}

func sysDoit(r *req) unix.Errno {
	s := r.src.Sys()
	r.put(CmdSysGet)
	r.w.u8(AttrSysNetnsMode, b2u8(s.NetnsShared))
	r.w.u8(AttrSysCopyOnFork, b2u8(s.CopyOnFork))
	r.flush()
	return 0
}

func chardevDoit(r *req) unix.Errno {
	name, ok := r.attrs.str(AttrChardevType)
	if !ok {
		return unix.EINVAL
	}
	var c Chardev
	if _, named := r.attrs[AttrDevIndex]; named {
		d, ok := r.device()
		if !ok {
			return unix.EINVAL
		}
		if _, port := r.attrs[AttrPortIndex]; port {
			if _, ok := r.port(d); !ok {
				return unix.EINVAL
			}
			// uverbs answers a port with EINVAL; no other client
			// with ports is served.
			if _, ok := d.Chardevs[name]; ok {
				return unix.EINVAL
			}
			return unix.EOPNOTSUPP
		}
		if c, ok = d.Chardevs[name]; !ok {
			return unix.EOPNOTSUPP
		}
	} else if _, port := r.attrs[AttrPortIndex]; port {
		return unix.EINVAL
	} else if c, ok = r.src.GlobalChardev(name); !ok {
		return unix.EOPNOTSUPP
	}
	r.put(CmdGetChardev)
	if c.DriverID != 0 {
		r.w.u32(AttrUverbsDriverID, c.DriverID)
	}
	r.w.u64(AttrChardev, c.Dev)
	r.w.u64(AttrChardevABI, c.ABI)
	r.w.str(AttrChardevName, c.Name)
	r.flush()
	return 0
}

// summary names the counted resource types (fill_res_info's names).
func summary(res Resources) []Counter {
	return []Counter{
		{Name: "pd", Value: uint64(len(res.PDs))}, {Name: "cq", Value: uint64(len(res.CQs))},
		{Name: "qp", Value: uint64(len(res.QPs))}, {Name: "cm_id", Value: uint64(len(res.CMIDs))},
		{Name: "mr", Value: uint64(len(res.MRs))}, {Name: "ctx", Value: uint64(len(res.Ctxs))},
		{Name: "srq", Value: uint64(len(res.SRQs))},
	}
}

func (r *req) resInfo(d Device) {
	r.handle(d)
	r.w.nest(AttrResSummary)
	for _, c := range summary(r.src.Resources(d.Index)) {
		r.w.nest(AttrResSummaryEntry)
		r.w.str(AttrResSummaryEntryName, c.Name)
		r.w.u64(AttrResSummaryEntryCurr, c.Value)
		r.w.endNest()
	}
	r.w.endNest()
}

func resDoit(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	r.put(CmdResGet)
	r.resInfo(d)
	r.flush()
	return 0
}

func resDump(r *req) unix.Errno {
	for _, d := range r.src.Devices() {
		r.put(CmdResGet)
		r.resInfo(d)
		r.flush()
	}
	return 0
}

func (r *req) owner(o Owner) {
	if o.Kern != "" {
		r.w.str(AttrResKernName, o.Kern)
	} else {
		r.w.u32(AttrResPID, o.PID)
	}
}

// resType is one resource type's table in nldev's fill_entries: its
// command, nest attributes, the attribute that names one entry, and its
// entries.
type resType struct {
	op, table, entry, id uint16
	// port filters by PORT_INDEX (QPs and CM IDs).
	port bool
	// entries returns the entries, each with its id, its port (0:
	// none) and a function putting its attributes.
	entries func(res Resources, admin bool) []resEntry
}

type resEntry struct {
	id, port uint32
	fill     func(w *builder)
}

var (
	resQP = resType{op: CmdResQPGet, table: AttrResQP, entry: AttrResQPEntry, id: AttrResLQPN, port: true,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, q := range res.QPs {
				es = append(es, resEntry{q.LQPN, q.Port, func(w *builder) {
					if q.Port != 0 {
						w.u32(AttrPortIndex, q.Port)
					}
					w.u32(AttrResLQPN, q.LQPN)
					rcuc := q.Type == qptRC || q.Type == qptUC
					if rcuc {
						w.u32(AttrResRQPN, q.RQPN)
						w.u32(AttrResRqPSN, q.RQPSN)
					}
					w.u32(AttrResSqPSN, q.SQPSN)
					if rcuc || q.Type == qptXRCIni || q.Type == qptXRCTgt {
						w.u8(AttrResPathMigState, q.PathMigState)
					}
					w.u8(AttrResType, q.Type)
					w.u8(AttrResState, q.State)
					if q.Kern == "" {
						w.u32(AttrResPDN, q.PDN)
					}
				}})
			}
			return es
		}}
	resCQ = resType{op: CmdResCQGet, table: AttrResCQ, entry: AttrResCQEntry, id: AttrResCQN,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, c := range res.CQs {
				es = append(es, resEntry{c.CQN, 0, func(w *builder) {
					w.u32(AttrResCQE, c.CQE)
					w.u64(AttrResUsecnt, c.Users)
					if c.Kern != "" {
						w.u8(AttrResPollCtx, c.PollCtx)
					}
					w.u8(AttrDevDIM, b2u8(c.DIM))
					w.u32(AttrResCQN, c.CQN)
					if c.Kern == "" {
						w.u32(AttrResCtxN, c.CtxN)
					}
				}})
			}
			return es
		}}
	resMR = resType{op: CmdResMRGet, table: AttrResMR, entry: AttrResMREntry, id: AttrResMRN,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, m := range res.MRs {
				es = append(es, resEntry{m.MRN, 0, func(w *builder) {
					if admin {
						w.u32(AttrResRKey, m.RKey)
						w.u32(AttrResLKey, m.LKey)
					}
					w.u64(AttrResMRLen, m.Len)
					w.u32(AttrResMRN, m.MRN)
					if m.Kern == "" {
						w.u32(AttrResPDN, m.PDN)
					}
				}})
			}
			return es
		}}
	resPD = resType{op: CmdResPDGet, table: AttrResPD, entry: AttrResPDEntry, id: AttrResPDN,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, p := range res.PDs {
				es = append(es, resEntry{p.PDN, 0, func(w *builder) {
					if admin {
						w.u32(AttrResLocalDMALKey, p.LocalDMALKey)
						if p.UnsafeGlobalRKey != 0 {
							w.u32(AttrResUnsafeGlobalRKey, p.UnsafeGlobalRKey)
						}
					}
					w.u64(AttrResUsecnt, p.Users)
					w.u32(AttrResPDN, p.PDN)
					if p.Kern == "" {
						w.u32(AttrResCtxN, p.CtxN)
					}
				}})
			}
			return es
		}}
	resCMID = resType{op: CmdResCMIDGet, table: AttrResCMID, entry: AttrResCMIDEntry, id: AttrResCMIDN, port: true,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, c := range res.CMIDs {
				es = append(es, resEntry{c.CMIDN, c.Port, func(w *builder) {
					if c.Port != 0 {
						w.u32(AttrPortIndex, c.Port)
					}
					if c.LQPN != 0 {
						w.u32(AttrResLQPN, c.LQPN)
						w.u8(AttrResType, c.QPType)
					}
					w.u32(AttrResPS, c.PS)
					w.u8(AttrResState, c.State)
					if c.Src != nil {
						w.attr(AttrResSrcAddr, c.Src)
					}
					if c.Dst != nil {
						w.attr(AttrResDstAddr, c.Dst)
					}
					w.u32(AttrResCMIDN, c.CMIDN)
				}})
			}
			return es
		}}
	resCtx = resType{op: CmdResCtxGet, table: AttrResCtx, entry: AttrResCtxEntry, id: AttrResCtxN,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, c := range res.Ctxs {
				es = append(es, resEntry{c.CtxN, 0, func(w *builder) { w.u32(AttrResCtxN, c.CtxN) }})
			}
			return es
		}}
	resSRQ = resType{op: CmdResSRQGet, table: AttrResSRQ, entry: AttrResSRQEntry, id: AttrResSRQN,
		entries: func(res Resources, admin bool) []resEntry {
			var es []resEntry
			for _, s := range res.SRQs {
				es = append(es, resEntry{s.SRQN, 0, func(w *builder) {
					w.u32(AttrResSRQN, s.SRQN)
					w.u8(AttrResType, s.Type)
					w.u32(AttrResPDN, s.PDN)
					if s.HasCQ {
						w.u32(AttrResCQN, s.CQN)
					}
				}})
			}
			return es
		}}
)

// owners lists each entry's owner, in the order of entries.
func owners(t resType, res Resources) []Owner {
	var o []Owner
	switch t.op {
	case CmdResQPGet:
		for _, x := range res.QPs {
			o = append(o, x.Owner)
		}
	case CmdResCQGet:
		for _, x := range res.CQs {
			o = append(o, x.Owner)
		}
	case CmdResMRGet:
		for _, x := range res.MRs {
			o = append(o, x.Owner)
		}
	case CmdResPDGet:
		for _, x := range res.PDs {
			o = append(o, x.Owner)
		}
	case CmdResCMIDGet:
		for _, x := range res.CMIDs {
			o = append(o, x.Owner)
		}
	case CmdResCtxGet:
		for _, x := range res.Ctxs {
			o = append(o, x.Owner)
		}
	case CmdResSRQGet:
		for _, x := range res.SRQs {
			o = append(o, x.Owner)
		}
	}
	return o
}

// The QP types whose entries carry more (enum ib_qp_type).
const (
	qptRC     = 2
	qptUC     = 3
	qptXRCIni = 9
	qptXRCTgt = 10
)

// resEntryDoit is res_get_common_doit: DEV_INDEX and the entry's id
// name one entry; ENOENT when it is not there.
func resEntryDoit(t resType) doit {
	return func(r *req) unix.Errno {
		d, ok := r.device()
		if !ok {
			return unix.EINVAL
		}
		id, ok := r.attrs.u32(t.id)
		if !ok {
			return unix.EINVAL
		}
		res := r.src.Resources(d.Index)
		own := owners(t, res)
		for i, e := range t.entries(res, r.cl.Admin) {
			if e.id != id {
				continue
			}
			// The doit's reply carries the entry's attributes
			// beside the handle, in no table.
			r.put(t.op)
			r.handle(d)
			e.fill(&r.w)
			r.owner(own[i])
			r.flush()
			return 0
		}
		return unix.ENOENT
	}
}

// resEntryDump is res_get_common_dumpit: one message per device that has
// entries (a device without is cancelled), its table nesting them; a
// PORT_INDEX keeps the entries of that port.
func resEntryDump(t resType) dumpit {
	return func(r *req) unix.Errno {
		devs := r.src.Devices()
		var port uint32
		if _, named := r.attrs[AttrDevIndex]; named {
			d, ok := r.device()
			if !ok {
				return unix.EINVAL
			}
			devs = []Device{d}
			if t.port {
				if p, ok := r.attrs.u32(AttrPortIndex); ok {
					port = p
				}
			}
		}
		for _, d := range devs {
			res := r.src.Resources(d.Index)
			own := owners(t, res)
			var filled bool
			for i, e := range t.entries(res, r.cl.Admin) {
				if port != 0 && e.port != port {
					continue
				}
				if filled && len(r.w.b)-r.w.start > GoodSize {
					// The skb is full: the dump goes on in
					// another message, as the kernel's next
					// dumpit call does.
					r.w.endNest()
					r.flush()
					filled = false
				}
				if !filled {
					r.put(t.op)
					r.handle(d)
					r.w.nest(t.table)
					filled = true
				}
				r.w.nest(t.entry)
				e.fill(&r.w)
				r.owner(own[i])
				r.w.endNest()
			}
			if filled {
				r.w.endNest()
				r.flush()
			}
		}
		return 0
	}
}

func (r *req) hwCounters(d Device, port uint32, cs []Counter) {
	r.handle(d)
	r.w.u32(AttrPortIndex, port)
	r.w.nest(AttrStatHWCounters)
	for _, c := range cs {
		if c.Disabled {
			continue
		}
		r.w.nest(AttrStatHWCounterEntry)
		r.w.str(AttrStatHWCounterEntryName, c.Name)
		r.w.u64(AttrStatHWCounterEntryValue, c.Value)
		r.w.endNest()
	}
	r.w.endNest()
}

// statDoit is nldev_stat_get_doit. Without STAT_RES, DEV_INDEX and
// PORT_INDEX name a port whose counters the reply lists
// (stat_get_doit_default_counter). STAT_RES of QPs asks for the port's
// counter mode ("rdma statistic mode", stat_get_doit_qp): no counter is
// ever bound on softroce's devices, so it is RDMA_COUNTER_MODE_NONE.
// STAT_RES of MRs (the driver's per-MR counters, which rxe has not) is
// EOPNOTSUPP; another STAT_RES is EINVAL.
func statDoit(r *req) unix.Errno {
	res, named := r.attrs.u32(AttrStatRes)
	if _, present := r.attrs[AttrStatRes]; present && !named {
		return unix.EINVAL
	}
	if named && res != AttrResQP {
		if res == AttrResMR {
			return unix.EOPNOTSUPP
		}
		return unix.EINVAL
	}
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	p, ok := r.port(d)
	if !ok {
		return unix.EINVAL
	}
	if named {
		r.put(CmdStatGet)
		r.handle(d)
		r.w.u32(AttrPortIndex, p)
		r.w.u32(AttrStatMode, counterModeNone)
		r.flush()
		return 0
	}
	cs, err := r.src.Counters(d.Index, p)
	if err != nil {
		return errnoOf(err)
	}
	r.put(CmdStatGet)
	r.hwCounters(d, p, cs)
	r.flush()
	return 0
}

// statStatusDoit is nldev_stat_get_counter_status_doit ("rdma statistic
// mode"): each counter of the port with its index, and whether an
// optional one is on.
func statStatusDoit(r *req) unix.Errno {
	d, ok := r.device()
	if !ok {
		return unix.EINVAL
	}
	p, ok := r.port(d)
	if !ok {
		return unix.EINVAL
	}
	cs, err := r.src.Counters(d.Index, p)
	if err != nil {
		return unix.EINVAL // no hw stats on the port
	}
	r.put(CmdStatGetStatus)
	r.handle(d)
	r.w.u32(AttrPortIndex, p)
	r.w.nest(AttrStatHWCounters)
	for i, c := range cs {
		r.w.nest(AttrStatHWCounterEntry)
		r.w.str(AttrStatHWCounterEntryName, c.Name)
		r.w.u32(AttrStatHWCounterIndex, uint32(i))
		if c.Optional {
			r.w.u8(AttrStatHWCounterDynamic, b2u8(!c.Disabled))
		}
		r.w.endNest()
	}
	r.w.endNest()
	r.flush()
	return 0
}

// counterModeNone is RDMA_COUNTER_MODE_NONE.
const counterModeNone = 0

// statDump is nldev_stat_get_dumpit: a dump names STAT_RES (the bound
// counters of QPs, "rdma statistic show" asks for them first): none are
// bound, so the dump is empty. Without STAT_RES it is EINVAL.
func statDump(r *req) unix.Errno {
	if _, ok := r.attrs[AttrStatRes]; !ok {
		return unix.EINVAL
	}
	return 0
}

func errnoOf(err error) unix.Errno {
	if e, ok := err.(unix.Errno); ok && e != 0 {
		return e
	}
	return unix.EIO
}
