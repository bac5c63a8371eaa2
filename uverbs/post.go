//go:build linux

package uverbs

import (
	"math"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// The WR lists of POST_SEND, POST_RECV and POST_SRQ_RECV. After the command
// come wr_count WRs of wqe_size bytes each, then sge_count SGEs (struct
// ib_uverbs_sge) that the WRs take in order, num_sge each; the kernel
// unmarshals them into ib_send_wr / ib_recv_wr lists before it calls the
// driver (ib_uverbs_post_send, ib_uverbs_unmarshall_recv).

// KmallocMax is KMALLOC_MAX_SIZE on x86_64 and arm64 with 4 KiB pages (an
// allocation of order MAX_PAGE_ORDER): kmalloc of more fails, and the
// commands that allocate from a size the client gave answer ENOMEM. A
// POST_SEND whose wqe_size is larger is ENOMEM even with no WRs
// (ib_uverbs_post_send allocates one WR's room first).
const KmallocMax = 4 << 20

// The sizes of the kernel's WR structures on 64-bit machines, rounded up
// to an ib_sge (ALIGN(size, sizeof(struct ib_sge))): alloc_wr allocates
// one with its SGE array behind it.
const (
	kSgeSize    = 16 // struct ib_sge
	kSendWrSize = 48 // struct ib_send_wr, 40 bytes
	kRdmaWrSize = 64 // struct ib_rdma_wr, 56 bytes
	kAtomWrSize = 96 // struct ib_atomic_wr, 88 bytes
	kUDWrSize   = 80 // struct ib_ud_wr, 80 bytes
	kRecvWrSize = 32 // struct ib_recv_wr, 32 bytes
)

// uverbsSgeLen is the size of an SGE in the command (struct ib_uverbs_sge).
var uverbsSgeLen = uint64(sizeOf[Sge]())

// reqIter is struct uverbs_req_iter: the request past the command, taken
// in pieces (uverbs_request_next_ptr) and checked for zeros after the last
// (uverbs_request_finish).
type reqIter struct{ rest []byte }

// next takes n bytes: ENOSPC past the request's end. n is a 64-bit size,
// so a product of two 32-bit counts cannot wrap (size_mul).
func (it *reqIter) next(n uint64) ([]byte, error) {
	if n > uint64(len(it.rest)) {
		return nil, errorf(unix.ENOSPC, "WR list of %d bytes: the request has %d left", n, len(it.rest))
	}
	b := it.rest[:n]
	it.rest = it.rest[n:]
	return b, nil
}

// finish refuses bytes after the list that are not zero (EOPNOTSUPP).
func (it *reqIter) finish() error {
	for _, b := range it.rest {
		if b != 0 {
			return errorf(unix.EOPNOTSUPP, "request carries %d unknown bytes after the WR list", len(it.rest))
		}
	}
	return nil
}

// iter starts a reqIter after the core request of n bytes
// (uverbs_request_start; verifyHdr made sure the request has them).
func (c *call) iter(n int) reqIter { return reqIter{rest: c.in[n:]} }

// sgeList returns the k SGEs from index at of sgls (copy_from_user of
// sgls + sg_ind: the caller checked that they lie within the list).
func sgeList(sgls []byte, at, k uint32) []emu.SGE {
	if k == 0 {
		return nil
	}
	sgl := make([]emu.SGE, k)
	for i := range sgl {
		s := load[Sge](sgls[(uint64(at)+uint64(i))*uverbsSgeLen:])
		sgl[i] = emu.SGE{Addr: s.Addr, Length: s.Length, LKey: s.Lkey}
	}
	return sgl
}

// sgeCountOK is the check of each WR's num_sge against the SGEs the list
// has left: num_sge + sg_ind > sge_count is EINVAL, in the kernel's 32-bit
// unsigned arithmetic (a sum that wraps passes, and the allocation that
// follows fails).
func sgeCountOK(numSGE, sgInd, sgeCount uint32) bool { return numSGE+sgInd <= sgeCount }

// allocFails reports whether kmalloc of a WR of wrSize with numSGE SGEs
// behind it fails (alloc_wr and ib_uverbs_unmarshall_recv).
func allocFails(wrSize int, numSGE uint32) bool {
	return uint64(wrSize)+uint64(numSGE)*kSgeSize > KmallocMax
}

// sendWRs checks the WR list of a POST_SEND to qp as ib_uverbs_post_send
// unmarshals it: each WR's SGEs within the list, a UD QP's WRs sends (with
// or without immediate) naming an AH of the file, other QPs' WRs of an
// opcode the command carries (RDMA write and read, atomics, sends), and no
// allocation the kernel could not make (ENOMEM). f.mu held.
func (f *File) sendWRs(qp *uqp, cmd *PostSend, wqes, sgls []byte) error {
	ud := qp.qp.QPType == qpstate.TypeUD
	var sgInd uint32
	for i := range cmd.Wr_count {
		w := load[SendWr](wqes[uint64(i)*uint64(cmd.Wqe_size):])
		if !sgeCountOK(w.Num_sge, sgInd, cmd.Sge_count) {
			return errorf(unix.EINVAL, "POST_SEND WR %d: %d SGEs, %d of %d left", i, w.Num_sge, cmd.Sge_count-min(sgInd, cmd.Sge_count), cmd.Sge_count)
		}
		op := emu.WROpcode(w.Opcode)
		size := kSendWrSize
		switch {
		case ud:
			if op != emu.WRSend && op != emu.WRSendWithImm {
				return errorf(unix.EINVAL, "POST_SEND WR %d: opcode %d on a UD QP", i, w.Opcode)
			}
			size = kUDWrSize
		case op == emu.WRRDMAWriteWithImm || op == emu.WRRDMAWrite || op == emu.WRRDMARead:
			size = kRdmaWrSize
		case op == emu.WRAtomicCmpAndSwp || op == emu.WRAtomicFetchAndAdd:
			size = kAtomWrSize
		case op == emu.WRSend || op == emu.WRSendWithImm || op == emu.WRSendWithInv:
		default:
			return errorf(unix.EINVAL, "POST_SEND WR %d: opcode %d", i, w.Opcode)
		}
		// alloc_wr refuses a num_sge whose array would overflow 32 bits,
		// and kmalloc a WR larger than it can give.
		if w.Num_sge >= (math.MaxUint32-uint32(size))/kSgeSize || allocFails(size, w.Num_sge) {
			return errorf(unix.ENOMEM, "POST_SEND WR %d: %d SGEs", i, w.Num_sge)
		}
		if ud {
			ah := load[[4]uint32](w.Wr[:])[0] // wr.ud.ah
			if _, err := f.get(kindAH, ah); err != nil {
				return err
			}
		}
		sgInd += w.Num_sge
	}
	return nil
}

// recvWRs unmarshals the WR list of a POST_RECV or POST_SRQ_RECV
// (ib_uverbs_unmarshall_recv): a wqe_size under a receive WR's is EINVAL,
// a list past the request ENOSPC, nonzero bytes after it EOPNOTSUPP, a WR
// whose SGEs run past the list EINVAL, and an allocation the kernel could
// not make ENOMEM (a num_sge whose array would overflow 32 bits EINVAL).
func (c *call) recvWRs(it *reqIter, wrCount, wqeSize, sgeCount uint32) ([]emu.RecvWR, error) {
	if int(wqeSize) < sizeOf[RecvWr]() {
		return nil, errorf(unix.EINVAL, "wqe_size %d", wqeSize)
	}
	wqes, err := it.next(uint64(wqeSize) * uint64(wrCount))
	if err != nil {
		return nil, err
	}
	sgls, err := it.next(uint64(sgeCount) * uverbsSgeLen)
	if err != nil {
		return nil, err
	}
	if err := it.finish(); err != nil {
		return nil, err
	}
	if wqeSize > KmallocMax {
		return nil, errorf(unix.ENOMEM, "wqe_size %d", wqeSize)
	}
	wrs := make([]emu.RecvWR, 0, min(wrCount, 64))
	var sgInd uint32
	for i := range wrCount {
		w := load[RecvWr](wqes[uint64(i)*uint64(wqeSize):])
		if !sgeCountOK(w.Num_sge, sgInd, sgeCount) {
			return nil, errorf(unix.EINVAL, "receive WR %d: %d SGEs, %d of %d left", i, w.Num_sge, sgeCount-min(sgInd, sgeCount), sgeCount)
		}
		if w.Num_sge >= (math.MaxUint32-kRecvWrSize)/kSgeSize {
			return nil, errorf(unix.EINVAL, "receive WR %d: %d SGEs", i, w.Num_sge)
		}
		if allocFails(kRecvWrSize, w.Num_sge) {
			return nil, errorf(unix.ENOMEM, "receive WR %d: %d SGEs", i, w.Num_sge)
		}
		wrs = append(wrs, emu.RecvWR{WRID: w.Wr_id, SGList: sgeList(sgls, sgInd, w.Num_sge)})
		sgInd += w.Num_sge
	}
	return wrs, nil
}

// postSend is ib_uverbs_post_send with rxe_post_send: the WR list is
// checked as the kernel unmarshals it, then, for rxe's user QPs, not used:
// the command is the doorbell of the send ring (rxe_post_send runs the
// requester over the ring). A QP before RTS is EINVAL with bad_wr naming
// the first WR (none when the list is empty).
func (c *call) postSend() error {
	var cmd PostSend
	copy(bytesOf(&cmd), c.in)
	it := c.iter(sizeOf[PostSend]())
	wqes, err := it.next(uint64(cmd.Wqe_size) * uint64(cmd.Wr_count))
	if err != nil {
		return err
	}
	sgls, err := it.next(uint64(cmd.Sge_count) * uverbsSgeLen)
	if err != nil {
		return err
	}
	if err := it.finish(); err != nil {
		return err
	}
	if int(cmd.Wqe_size) < sizeOf[SendWr]() {
		return errorf(unix.EINVAL, "POST_SEND: wqe_size %d", cmd.Wqe_size)
	}
	if cmd.Wqe_size > KmallocMax {
		return errorf(unix.ENOMEM, "POST_SEND: wqe_size %d", cmd.Wqe_size)
	}
	o, err := c.f.get(kindQP, cmd.Qp_handle)
	if err != nil {
		return err
	}
	if err := c.f.sendWRs(o.qp, &cmd, wqes, sgls); err != nil {
		return err
	}
	// The response is written whatever the doorbell found
	// (ib_uverbs_post_send), and its fault wins.
	_, refused := c.f.ring(o, cmd.Qp_handle)
	resp := PostSendResp{}
	if refused != nil && cmd.Wr_count > 0 {
		resp.Wr = 1
	}
	if err := c.respond(bytesOf(&resp)); err != nil {
		return err
	}
	return refused
}

// postRecv is ib_uverbs_post_recv with rxe_post_recv: the WRs go onto the
// QP's receive ring as the client's own posts do (post_one_recv writes
// them at the ring's producer index), after a QP in RESET (EINVAL) or on
// an SRQ (EINVAL) is refused with bad_wr naming the first WR. A QP in ERR
// then flushes them.
func (c *call) postRecv() error {
	var cmd PostRecv
	copy(bytesOf(&cmd), c.in)
	it := c.iter(sizeOf[PostRecv]())
	wrs, err := c.recvWRs(&it, cmd.Wr_count, cmd.Wqe_size, cmd.Sge_count)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Qp_handle)
	if err != nil {
		return err
	}
	u := o.qp
	attr, _, qerr := u.qp.Query(qpstate.AttrState)
	var bad int
	switch {
	case qerr != nil || attr.QPState < qpstate.StateInit:
		err = errorf(unix.EINVAL, "POST_RECV: QP handle %d is in RESET", cmd.Qp_handle)
	case u.rq == nil:
		err = errorf(unix.EINVAL, "POST_RECV: QP handle %d receives through an SRQ", cmd.Qp_handle)
	default:
		bad, err = c.f.postRing(u.rq, u.rqMaxSGE, wrs)
		if attr.QPState == qpstate.StateErr {
			// rxe schedules the responder, which flushes the ring.
			_, _ = u.qp.PostRecv(nil)
		}
	}
	return c.respondBadWR(err, bad, len(wrs))
}

// postSRQRecv is ib_uverbs_post_srq_recv with rxe_post_srq_recv: the WRs
// go onto the SRQ's ring as the client's own posts do.
func (c *call) postSRQRecv() error {
	var cmd PostSrqRecv
	copy(bytesOf(&cmd), c.in)
	it := c.iter(sizeOf[PostSrqRecv]())
	wrs, err := c.recvWRs(&it, cmd.Wr_count, cmd.Wqe_size, cmd.Sge_count)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindSRQ, cmd.Srq_handle)
	if err != nil {
		return err
	}
	bad, err := c.f.postRing(o.srq.rq, o.srq.maxSGE, wrs)
	return c.respondBadWR(err, bad, len(wrs))
}

// respondBadWR writes the response of a post whose driver call returned
// err with the failing WR at index bad (resp.bad_wr counts WRs from 1; 0
// when the list is empty), then returns err; the response's fault wins.
func (c *call) respondBadWR(err error, bad, n int) error {
	resp := PostRecvResp{}
	if err != nil && n > 0 {
		resp.Wr = uint32(bad + 1)
	}
	if rerr := c.respond(bytesOf(&resp)); rerr != nil {
		return rerr
	}
	return err
}

// postRing writes WRs onto a user receive ring at its producer index, as
// rxe's post_one_recv does for a queue the kernel posts to: a full ring
// is ENOMEM, more SGEs than the ring's WQEs hold or more bytes than a
// message (2^31, the IBA limit: Linux 6.12 checks it, 6.1 did not; the
// port's max_msg_sz says 2^31 only from db03b70969aa, 6.14 and stable
// 6.12.y; 0x800000 before) EINVAL.
// It returns the index of the WR that failed; the WRs before it stay
// posted. The ring's consumer is the device (under its own lock): the
// full check reads the consumer index it publishes.
func (f *File) postRing(q *queue, maxSGE uint32, wrs []emu.RecvWR) (bad int, err error) {
	const maxMsg = 1 << 31
	for i := range wrs {
		prod := q.load(qbProducer) & q.mask
		if (prod+1)&q.mask == q.load(qbConsumer)&q.mask {
			return i, errorf(unix.ENOMEM, "post recv WR %d: the ring is full", i)
		}
		sgl := wrs[i].SGList
		if uint32(len(sgl)) > maxSGE {
			return i, errorf(unix.EINVAL, "post recv WR %d: %d SGEs, the ring takes %d", i, len(sgl), maxSGE)
		}
		var length uint64
		for _, s := range sgl {
			length += uint64(s.Length)
		}
		if length > maxMsg {
			return i, errorf(unix.EINVAL, "post recv WR %d: %d bytes, more than a message", i, length)
		}
		slot := q.slot(prod)
		clear(slot)
		w := RxeRecvWqe{Id: wrs[i].WRID, Dma: RxeDmaInfo{Length: uint32(length), Resid: uint32(length), Num_sge: uint32(len(sgl))}}
		copy(slot, bytesOf(&w))
		for k, s := range sgl {
			rs := RxeSge{Addr: s.Addr, Length: s.Length, Lkey: s.LKey}
			copy(slot[dmaOffRecv+dmaHdr+k*sgeSize:], bytesOf(&rs))
		}
		q.store(qbProducer, (prod+1)&q.mask)
	}
	return 0, nil
}
