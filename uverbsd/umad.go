package uverbsd

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
)

// /dev/infiniband/umad0: the kernel's ib_umad file of the device's port 1
// (drivers/infiniband/core/user_mad.c), as libibumad and infiniband-diags'
// perfquery use it. A program registers MAD agents (ioctl), writes MADs
// behind a struct ib_user_mad header and reads the answers; a Get of the
// PMA class sent to one of the port's own GIDs is answered as rxe 7.2's
// process_mad answers it (Device.ProcessMAD), other MADs the port receives as
// the MAD layer answers what no agent takes (mad.UnmatchedReply). MADs to
// other destinations get no answer: softroce carries no MADs between
// devices outside the CM. A send that waited for an answer in vain is read
// back with status ETIMEDOUT, as ib_umad's send_handler queues it.

// ib_umad's limits and ioctls (<rdma/ib_user_mad.h>).
const (
	umadHdrSize    = 64 // struct ib_user_mad_hdr
	umadHdrSizeOld = 56 // struct ib_user_mad_hdr_old: before ENABLE_PKEY
	umadMaxAgents  = 32 // IB_UMAD_MAX_AGENTS
	umadRMPPHdr    = 36 // IB_MGMT_RMPP_HDR: the least a write carries after the header

	umadRegisterAgent   = 0xc01c1b01 // IB_USER_MAD_REGISTER_AGENT
	umadUnregisterAgent = 0x40041b02 // IB_USER_MAD_UNREGISTER_AGENT
	umadEnablePKey      = 0x00001b03 // IB_USER_MAD_ENABLE_PKEY
	umadRegisterAgent2  = 0xc0281b04 // IB_USER_MAD_REGISTER_AGENT2

	umadRegReqSize   = 28 // struct ib_user_mad_reg_req
	umadRegReq2Size  = 40 // struct ib_user_mad_reg_req2
	umadRegFlagsCap  = 1  // IB_USER_MAD_REG_FLAGS_CAP (IB_USER_MAD_USER_RMPP)
	mgmtMaxVersions  = 8  // MAX_MGMT_VERSION
	gsiQKey          = 0x80010000
	umadHopLimitRoCE = 0xff
)

// umadHiTID numbers the MAD agents of every umad file (the kernel's
// ib_mad_client_id): the high half of their requests' transaction IDs.
var umadHiTID atomic.Uint32

// umadAgent is one registered agent (struct ib_mad_agent).
type umadAgent struct {
	qpn   uint32
	class uint8
	hiTID uint32
}

// umadHdr is struct ib_user_mad_hdr, decoded.
type umadHdr struct {
	ID, Status, TimeoutMS, Retries, Length uint32
	QPN, QKey                              uint32
	LID                                    uint16
	SL, PathBits, GRHPresent, GIDIndex     uint8
	HopLimit, TrafficClass                 uint8
	GID                                    [16]byte
	FlowLabel                              uint32
	PKeyIndex                              uint16
}

// parseUmadHdr decodes the first size bytes of b (size umadHdrSize or
// umadHdrSizeOld; b holds at least that many). Host-order fields are the
// kernel's __u32/__u16, the others big-endian (__be32, __be16).
func parseUmadHdr(b []byte, size int) umadHdr {
	ne, be := binary.NativeEndian, binary.BigEndian
	h := umadHdr{
		ID: ne.Uint32(b[0:]), Status: ne.Uint32(b[4:]), TimeoutMS: ne.Uint32(b[8:]), Retries: ne.Uint32(b[12:]),
		Length: ne.Uint32(b[16:]), QPN: be.Uint32(b[20:]), QKey: be.Uint32(b[24:]), LID: be.Uint16(b[28:]),
		SL: b[30], PathBits: b[31], GRHPresent: b[32], GIDIndex: b[33], HopLimit: b[34], TrafficClass: b[35],
		FlowLabel: be.Uint32(b[52:]),
	}
	copy(h.GID[:], b[36:52])
	if size >= umadHdrSize {
		h.PKeyIndex = ne.Uint16(b[56:])
	}
	return h
}

// put encodes h into b[:size].
func (h *umadHdr) put(b []byte, size int) {
	ne, be := binary.NativeEndian, binary.BigEndian
	clear(b[:size])
	ne.PutUint32(b[0:], h.ID)
	ne.PutUint32(b[4:], h.Status)
	ne.PutUint32(b[8:], h.TimeoutMS)
	ne.PutUint32(b[12:], h.Retries)
	ne.PutUint32(b[16:], h.Length)
	be.PutUint32(b[20:], h.QPN)
	be.PutUint32(b[24:], h.QKey)
	be.PutUint16(b[28:], h.LID)
	b[30], b[31], b[32], b[33], b[34], b[35] = h.SL, h.PathBits, h.GRHPresent, h.GIDIndex, h.HopLimit, h.TrafficClass
	copy(b[36:52], h.GID[:])
	be.PutUint32(b[52:], h.FlowLabel)
	if size >= umadHdrSize {
		ne.PutUint16(b[56:], h.PKeyIndex)
	}
}

// umadPacket is a packet queued for read(): a header and data bytes (a
// received MAD, or the header of a send that timed out).
type umadPacket struct {
	hdr  umadHdr
	data []byte
}

// umadSend is a request waiting for its answer (ib_umad's send_list).
type umadSend struct {
	tid   uint64
	class uint8
	timer *time.Timer
}

// umadFile is one open of umad0 (struct ib_umad_file).
type umadFile struct {
	dev *emu.Device
	ev  *os.File // EFD_SEMAPHORE eventfd: one count a queued packet

	mu      sync.Mutex
	agents  [umadMaxAgents]*umadAgent
	usePKey bool // ENABLE_PKEY, REGISTER_AGENT2: the 64-byte header
	used    bool // an agent was registered: ENABLE_PKEY is too late
	closed  bool
	queue   []umadPacket
	sends   []*umadSend
}

// newUmadFile opens umad0 on dev.
func newUmadFile(dev *emu.Device) (*umadFile, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return nil, err
	}
	return &umadFile{dev: dev, ev: os.NewFile(uintptr(fd), "umad0-events")}, nil
}

// EventFile is the eventfd the client polls and returns from open().
func (f *umadFile) EventFile() *os.File { return f.ev }

func (f *umadFile) hdrSize() int {
	if f.usePKey {
		return umadHdrSize
	}
	return umadHdrSizeOld
}

// Mmap: ib_umad has no mmap.
func (f *umadFile) Mmap(offset, length uint64) (*os.File, int64, error) {
	return nil, 0, unix.ENODEV
}

// Close is ib_umad_close: the agents go, pending sends with them.
func (f *umadFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, s := range f.sends {
		s.timer.Stop()
	}
	f.sends, f.queue = nil, nil
	return f.ev.Close()
}

// enqueue queues p for read() (mu held).
func (f *umadFile) enqueue(p umadPacket) {
	if f.closed {
		return
	}
	f.queue = append(f.queue, p)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	f.ev.Write(one[:])
}

// Ioctl is ib_umad_ioctl: req the request, arg its argument's bytes
// (argOK false: the client could not read them). It returns the bytes to
// store back at the argument (nil: none) and the result or an errno.
func (f *umadFile) Ioctl(req uint32, arg []byte, argOK bool) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req {
	case umadEnablePKey:
		if f.used {
			return nil, unix.EINVAL
		}
		f.usePKey = true
		return nil, nil
	case umadUnregisterAgent:
		if !argOK || len(arg) < 4 {
			return nil, unix.EFAULT
		}
		id := binary.NativeEndian.Uint32(arg)
		if id >= umadMaxAgents || f.agents[id] == nil {
			return nil, unix.EINVAL
		}
		f.dropSends(f.agents[id].hiTID)
		f.agents[id] = nil
		return nil, nil
	case umadRegisterAgent, umadRegisterAgent2:
	default:
		return nil, unix.ENOTTY
	}
	size := umadRegReqSize
	if req == umadRegisterAgent2 {
		size = umadRegReq2Size
	}
	if !argOK || len(arg) < size {
		return nil, unix.EFAULT
	}
	var a umadAgent
	var version, rmpp uint8
	out := append([]byte(nil), arg[:size]...)
	if req == umadRegisterAgent {
		a.qpn, a.class, version, rmpp = uint32(arg[20]), arg[21], arg[22], arg[26]
	} else {
		a.qpn, a.class, version, rmpp = binary.NativeEndian.Uint32(arg[4:]), arg[8], arg[9], arg[36]
	}
	if a.qpn != 0 && a.qpn != 1 {
		return nil, unix.EINVAL
	}
	if req == umadRegisterAgent2 {
		if flags := binary.NativeEndian.Uint32(arg[12:]); flags&^umadRegFlagsCap != 0 {
			binary.NativeEndian.PutUint32(out[12:], umadRegFlagsCap)
			return out[:16], unix.EINVAL
		}
	}
	id := 0
	for id < umadMaxAgents && f.agents[id] != nil {
		id++
	}
	if id == umadMaxAgents {
		return nil, unix.ENOMEM
	}
	if req == umadRegisterAgent2 && a.class != 0 && binary.NativeEndian.Uint32(arg[32:])&0xff000000 != 0 {
		return nil, unix.EINVAL
	}
	// ib_register_mad_agent: a RoCE port has no SMI QP; a class version
	// past MAX_MGMT_VERSION and an RMPP version but 1 are refused.
	switch {
	case a.qpn == 0:
		return nil, unix.EPROTONOSUPPORT
	case a.class != 0 && version >= mgmtMaxVersions:
		return nil, unix.EINVAL
	case rmpp != 0 && rmpp != 1:
		return nil, unix.EINVAL
	}
	a.hiTID = umadHiTID.Add(1)
	binary.NativeEndian.PutUint32(out, uint32(id))
	f.agents[id] = &a
	if !f.used {
		f.used = true
		if req == umadRegisterAgent2 {
			f.usePKey = true
		}
	}
	return out[:4], nil
}

// dropSends forgets the pending sends of the agent with hiTID (mu held).
func (f *umadFile) dropSends(hiTID uint32) {
	kept := f.sends[:0]
	for _, s := range f.sends {
		if uint32(s.tid>>32) == hiTID {
			s.timer.Stop()
			continue
		}
		kept = append(kept, s)
	}
	f.sends = kept
}

// Write is ib_umad_write: buf is a struct ib_user_mad header and a MAD.
func (f *umadFile) Write(buf []byte) (Reply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := f.hdrSize()
	if len(buf) < hs+umadRMPPHdr {
		return Reply{}, unix.EINVAL
	}
	h := parseUmadHdr(buf, hs)
	if h.ID >= umadMaxAgents || f.agents[h.ID] == nil {
		return Reply{}, unix.EINVAL
	}
	ag := f.agents[h.ID]
	// rdma_check_ah_attr: a RoCE address carries a GRH, and its source
	// GID index names an entry of the table.
	if h.GRHPresent == 0 {
		return Reply{}, unix.EINVAL
	}
	if _, err := f.dev.QueryGID(1, int(h.GIDIndex)); err != nil {
		return Reply{}, unix.EINVAL
	}
	// ib_create_send_mad: one MAD at most, softroce's agents take no
	// RMPP.
	body := buf[hs:]
	if len(body) > mad.Size {
		return Reply{}, unix.EINVAL
	}
	m := make(mad.MAD, mad.Size)
	copy(m, body)
	if !m.Response() {
		binary.BigEndian.PutUint64(m[8:], uint64(ag.hiTID)<<32|m.TransactionID()&0xffffffff)
	}
	tid, class := m.TransactionID(), m.MgmtClass()
	// is_duplicate: a second request of the same TID and class while
	// the first waits is refused.
	if !m.Response() {
		for _, s := range f.sends {
			if s.tid == tid && s.class == class {
				return Reply{}, unix.EINVAL
			}
		}
	}
	var waiting *umadSend
	if h.TimeoutMS > 0 && !m.Response() {
		waiting = &umadSend{tid: tid, class: class}
		sent := append([]byte(nil), m[:mad.HeaderSize]...)
		th := h
		th.Status = uint32(unix.ETIMEDOUT)
		wait := time.Duration(h.TimeoutMS) * time.Millisecond * time.Duration(uint64(h.Retries)+1)
		waiting.timer = time.AfterFunc(wait, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.forget(waiting) {
				f.enqueue(umadPacket{hdr: th, data: sent})
			}
		})
		f.sends = append(f.sends, waiting)
	}
	if f.local(h.GID) {
		if r, ok := f.answer(m); ok {
			f.deliver(r, h)
		}
	}
	return Reply{N: len(buf)}, nil
}

// forget takes s off the pending sends; false when it was not there.
func (f *umadFile) forget(s *umadSend) bool {
	for i, p := range f.sends {
		if p == s {
			f.sends = append(f.sends[:i], f.sends[i+1:]...)
			return true
		}
	}
	return false
}

// local reports whether gid is one of port 1's GIDs: a MAD sent there
// comes back to the port's own GSI QP.
func (f *umadFile) local(gid [16]byte) bool {
	pa, err := f.dev.QueryPort(1)
	if err != nil {
		return false
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		if e, err := f.dev.QueryGID(1, i); err == nil && [16]byte(e.GID) == gid {
			return true
		}
	}
	return false
}

// answer is what port 1's MAD layer replies to m received on its GSI QP:
// rxe's process_mad first, then the reply to a MAD no agent takes.
func (f *umadFile) answer(m mad.MAD) (mad.MAD, bool) {
	if r, ok := f.dev.ProcessMAD(1, m); ok {
		return r, true
	}
	return mad.UnmatchedReply(m)
}

// deliver hands r, a MAD the port sent in answer to a request of header
// req, to the agent whose request it answers (its TID's high half), while
// that request waits: ib_mad_complete_recv drops a response whose send is
// not pending (sent without a timeout, or timed out).
func (f *umadFile) deliver(r mad.MAD, req umadHdr) {
	if !r.Response() {
		return
	}
	for _, s := range f.sends {
		if s.tid != r.TransactionID() || s.class != r.MgmtClass() {
			continue
		}
		for id, a := range f.agents {
			if a == nil || a.hiTID != uint32(s.tid>>32) {
				continue
			}
			s.timer.Stop()
			f.forget(s)
			f.enqueue(umadPacket{hdr: umadHdr{
				ID: uint32(id), Length: uint32(f.hdrSize() + mad.Size), QPN: 1,
				GRHPresent: 1, GIDIndex: req.GIDIndex, HopLimit: umadHopLimitRoCE,
				TrafficClass: req.TrafficClass, GID: req.GID, FlowLabel: req.FlowLabel,
				PKeyIndex: req.PKeyIndex,
			}, data: append([]byte(nil), r...)})
			return
		}
	}
}

// Read is ib_umad_read of count bytes: the first packet queued, or
// EAGAIN with none. A count shorter than the header and the packet's data
// is EINVAL and the packet stays queued.
func (f *umadFile) Read(count int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := f.hdrSize()
	if count < hs {
		return nil, unix.EINVAL
	}
	if len(f.queue) == 0 {
		return nil, unix.EAGAIN
	}
	p := f.queue[0]
	if count < hs+len(p.data) {
		return nil, unix.EINVAL
	}
	f.queue = f.queue[1:]
	b := make([]byte, hs+len(p.data))
	p.hdr.put(b, hs)
	copy(b[hs:], p.data)
	return b, nil
}
