//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// noResponse is what postCmd reads back when the command wrote no response.
const noResponse = 0xffffffff

// postCmd writes a POST_SEND, POST_RECV or POST_SRQ_RECV: the command req
// (its response pointer set to c.resp) and list, the bytes after it, with
// one word of response room. It returns the bad_wr the command wrote
// (noResponse when it wrote none) and its error.
func postCmd[T any](c *client, cmd uint32, req *T, list []byte) (uint32, error) {
	b := append(append([]byte(nil), bytesOf(req)...), list...)
	binary.NativeEndian.PutUint64(b, c.resp)
	c.mem.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, c.resp)
	_, err := c.f.Write(legacy(cmd, b, nil, 4))
	var out [4]byte
	c.mem.ReadAt(out[:], c.resp)
	return binary.NativeEndian.Uint32(out[:]), err
}

// wqes lays WRs out as the command carries them, each in wqeSize bytes.
func wqes[T any](wqeSize int, wrs ...T) []byte {
	b := make([]byte, 0, wqeSize*len(wrs))
	for i := range wrs {
		w := make([]byte, wqeSize)
		copy(w, bytesOf(&wrs[i]))
		b = append(b, w...)
	}
	return b
}

// sgeBytes lays SGEs out as the command carries them.
func sgeBytes(sges ...Sge) []byte {
	var b []byte
	for i := range sges {
		b = append(b, bytesOf(&sges[i])...)
	}
	return b
}

func cat(bs ...[]byte) []byte {
	var b []byte
	for _, x := range bs {
		b = append(b, x...)
	}
	return b
}

// udWR is a UD send WR naming AH handle ah.
func udWR(op emu.WROpcode, ah uint32) SendWr {
	w := SendWr{Wr_id: 1, Opcode: uint32(op)}
	binary.NativeEndian.PutUint32(w.Wr[0:], ah)
	binary.NativeEndian.PutUint32(w.Wr[4:], 0x12)       // remote_qpn
	binary.NativeEndian.PutUint32(w.Wr[8:], 0x11111111) // remote_qkey
	return w
}

// postFixture is a client with an RC QP at RTS (a), another in RESET, a
// UD QP at RTS with an AH, an RC QP on an SRQ, and the SRQ.
type postFixture struct {
	a                   *conn
	reset, ud, ah       uint32
	srq, onSRQ, srqMSGE uint32
	srqRing             ring
}

func newPostFixture(t *testing.T) *postFixture {
	t.Helper()
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	c := a.client
	fx := &postFixture{a: a}
	qp := func(typ qpstate.Type, srq uint32) uint32 {
		cq := CreateQp{Pd_handle: a.pd, Send_cq_handle: a.cq, Recv_cq_handle: a.cq, Max_send_wr: 4, Max_recv_wr: 4,
			Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(typ)}
		if srq != 0 {
			cq.Srq_handle, cq.Is_srq, cq.Max_recv_wr, cq.Max_recv_sge = srq, 1, 0, 0
		}
		out, _ := must(c, CmdCreateQp, &cq, sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
		return load[CreateQpResp](out).Qp_handle
	}
	fx.reset = qp(qpstate.TypeRC, 0)
	fx.ud = qp(qpstate.TypeUD, 0)
	for _, m := range []ModifyQp{
		{Qp_state: uint8(qpstate.StateInit), Port_num: 1, Qkey: 0x1111,
			Attr_mask: uint32(qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrQKey)},
		{Qp_state: uint8(qpstate.StateRTR), Attr_mask: uint32(qpstate.AttrState)},
		{Qp_state: uint8(qpstate.StateRTS), Attr_mask: uint32(qpstate.AttrState | qpstate.AttrSQPSN)},
	} {
		m.Qp_handle = fx.ud
		must(c, CmdModifyQp, &m, 0)
	}
	out, _ := must(c, CmdCreateAh, &CreateAh{Pd_handle: a.pd, Attr: AhAttr{Port_num: 1, Is_global: 1,
		Grh: GlobalRoute{Dgid: emu.GIDFromAddr(testIP), Sgid_index: 1, Hop_limit: 64}}},
		sizeOf[CreateAhResp]()+sizeOf[RxeCreateAhResp]())
	fx.ah = load[CreateAhResp](out).Handle
	out, _ = must(c, CmdCreateSrq, &CreateSrq{Pd_handle: a.pd, Max_wr: 4, Max_sge: 1},
		sizeOf[CreateSrqResp]()+sizeOf[RxeCreateSrqResp]())
	fx.srq = load[CreateSrqResp](out).Srq_handle
	fx.srqMSGE = load[CreateSrqResp](out).Max_sge
	fx.srqRing = c.mapQueue(load[RxeCreateSrqResp](out[sizeOf[CreateSrqResp]():]).Mi)
	fx.onSRQ = qp(qpstate.TypeRC, fx.srq)
	return fx
}

// TestPostSendWRList: POST_SEND carrying WRs gets the kernel's answer to
// its list (ib_uverbs_post_send's unmarshalling), then rxe_post_send's,
// which for a user QP uses none of the WRs: the command rings the send
// ring. bad_wr is written only when the driver refused the list.
func TestPostSendWRList(t *testing.T) {
	ws := sizeOf[SendWr]()
	write := SendWr{Wr_id: 1, Num_sge: 2, Opcode: uint32(emu.WRRDMAWrite)}
	send := SendWr{Wr_id: 2, Num_sge: 1, Opcode: uint32(emu.WRSend)}
	two := sgeBytes(Sge{Addr: 1, Length: 8, Lkey: 2}, Sge{Addr: 9, Length: 8, Lkey: 2})
	three := cat(two, sgeBytes(Sge{Addr: 17, Length: 8, Lkey: 2}))
	for _, tc := range []struct {
		name    string
		qp      func(*postFixture) uint32
		cmd     PostSend
		list    func(*postFixture) []byte
		errno   unix.Errno // 0: success
		wantBad uint32     // the bad_wr written (noResponse: none)
	}{
		{name: "librxe's doorbell, no WRs: rxe_post_send runs the requester",
			cmd: PostSend{Wqe_size: uint32(ws)}},
		{name: "a well-formed list is accepted and not used (rxe_post_send of a user QP)",
			cmd:  PostSend{Wr_count: 2, Sge_count: 3, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, write, send), three) }},
		{name: "WRs in a wqe_size larger than the structure",
			cmd:  PostSend{Wr_count: 1, Sge_count: 1, Wqe_size: 128},
			list: func(*postFixture) []byte { return cat(wqes(128, send), three[:16]) }},
		{name: "the WR list runs past the request (uverbs_request_next_ptr)",
			cmd:  PostSend{Wr_count: 2, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return wqes(ws, send) }, errno: unix.ENOSPC, wantBad: noResponse},
		{name: "the SGE list runs past the request (uverbs_request_next_ptr)",
			cmd:  PostSend{Wr_count: 1, Sge_count: 2, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, send), three[:16]) }, errno: unix.ENOSPC, wantBad: noResponse},
		{name: "wqe_size times wr_count past 32 bits does not wrap (size_mul)",
			cmd: PostSend{Wr_count: 0x10000, Wqe_size: 0x10000}, errno: unix.ENOSPC, wantBad: noResponse},
		{name: "nonzero bytes after the lists (uverbs_request_finish)",
			cmd:  PostSend{Wr_count: 1, Sge_count: 1, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, send), three[:16], []byte{0, 0, 0, 1}) }, errno: unix.EOPNOTSUPP, wantBad: noResponse},
		{name: "zero bytes after the lists are accepted (uverbs_request_finish)",
			cmd:  PostSend{Wr_count: 1, Sge_count: 1, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, send), three[:16], make([]byte, 8)) }},
		{name: "wqe_size under a send WR's (ib_uverbs_post_send)",
			cmd: PostSend{Wqe_size: 8}, errno: unix.EINVAL, wantBad: noResponse},
		{name: "wqe_size past what kmalloc gives (ib_uverbs_post_send)",
			cmd: PostSend{Wqe_size: KmallocMax + 1}, errno: unix.ENOMEM, wantBad: noResponse},
		{name: "a handle that names no QP (uobj_get_obj_read)",
			qp: func(*postFixture) uint32 { return 99 }, cmd: PostSend{Wqe_size: uint32(ws)}, errno: unix.EINVAL, wantBad: noResponse},
		{name: "a WR with more SGEs than the list has left (ib_uverbs_post_send)",
			cmd:  PostSend{Wr_count: 2, Sge_count: 2, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, send, write), two) }, errno: unix.EINVAL, wantBad: noResponse},
		{name: "an opcode the command does not carry: LOCAL_INV (ib_uverbs_post_send)",
			cmd:  PostSend{Wr_count: 1, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return wqes(ws, SendWr{Opcode: uint32(emu.WRLocalInv)}) }, errno: unix.EINVAL, wantBad: noResponse},
		{name: "a num_sge whose sum with the SGEs taken wraps 32 bits (alloc_wr)",
			cmd: PostSend{Wr_count: 2, Sge_count: 1, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte {
				return cat(wqes(ws, send, SendWr{Num_sge: 0xffffffff, Opcode: uint32(emu.WRSend)}), three[:16])
			}, errno: unix.ENOMEM, wantBad: noResponse},
		{name: "UD: a SEND naming an AH of the file",
			qp: func(fx *postFixture) uint32 { return fx.ud }, cmd: PostSend{Wr_count: 1, Wqe_size: uint32(ws)},
			list: func(fx *postFixture) []byte { return wqes(ws, udWR(emu.WRSendWithImm, fx.ah)) }},
		{name: "UD: an RDMA WRITE (ib_uverbs_post_send)",
			qp: func(fx *postFixture) uint32 { return fx.ud }, cmd: PostSend{Wr_count: 1, Wqe_size: uint32(ws)},
			list: func(fx *postFixture) []byte { return wqes(ws, udWR(emu.WRRDMAWrite, fx.ah)) }, errno: unix.EINVAL, wantBad: noResponse},
		{name: "UD: a SEND naming no AH (uobj_get_obj_read)",
			qp: func(fx *postFixture) uint32 { return fx.ud }, cmd: PostSend{Wr_count: 1, Wqe_size: uint32(ws)},
			list: func(fx *postFixture) []byte { return wqes(ws, udWR(emu.WRSend, fx.ah+7)) }, errno: unix.EINVAL, wantBad: noResponse},
		{name: "a QP in RESET refuses the list at its first WR (rxe_post_send)",
			qp: func(fx *postFixture) uint32 { return fx.reset }, cmd: PostSend{Wr_count: 2, Sge_count: 3, Wqe_size: uint32(ws)},
			list: func(*postFixture) []byte { return cat(wqes(ws, write, send), three) }, errno: unix.EINVAL, wantBad: 1},
		{name: "a QP in RESET refuses the doorbell with bad_wr 0 (rxe_post_send)",
			qp: func(fx *postFixture) uint32 { return fx.reset }, cmd: PostSend{Wqe_size: uint32(ws)}, errno: unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newPostFixture(t)
			cmd := tc.cmd
			cmd.Qp_handle = fx.a.qp
			if tc.qp != nil {
				cmd.Qp_handle = tc.qp(fx)
			}
			var list []byte
			if tc.list != nil {
				list = tc.list(fx)
			}
			bad, err := postCmd(fx.a.client, CmdPostSend, &cmd, list)
			if tc.errno == 0 && err != nil || tc.errno != 0 && !errors.Is(err, tc.errno) {
				t.Fatalf("POST_SEND: %v, want errno %v", err, tc.errno)
			}
			if bad != tc.wantBad {
				t.Errorf("bad_wr %#x, want %#x", bad, tc.wantBad)
			}
			// The WRs of the command are not posted: nothing completes.
			if !fx.a.cqRing.empty() {
				t.Errorf("a completion after the POST_SEND: %+v", fx.a.cqRing.poll(t))
			}
		})
	}
}

// ringWR reads the receive WQE at k past the ring's consumer index.
func ringWR(r ring, k uint32) (RxeRecvWqe, RxeSge) {
	c := atomic.LoadUint32(r.word(qbConsumer))
	slot := r.slotAt(c + k)
	return load[RxeRecvWqe](slot), load[RxeSge](slot[dmaOffRecv+dmaHdr:])
}

// ringCount is how many WQEs the ring holds.
func ringCount(r ring) uint32 {
	return (atomic.LoadUint32(r.word(qbProducer)) - atomic.LoadUint32(r.word(qbConsumer))) & r.mask()
}

// TestPostRecvWRList: POST_RECV and POST_SRQ_RECV carrying WRs get the
// kernel's answer to the list (ib_uverbs_unmarshall_recv), then
// rxe_post_recv's or rxe_post_srq_recv's: the WRs go onto the user ring
// at its producer index (post_one_recv), in order, up to the first one
// refused, which bad_wr names from 1.
func TestPostRecvWRList(t *testing.T) {
	rs := sizeOf[RecvWr]()
	sge := func(n uint32) Sge { return Sge{Addr: clientBase + bufOff, Length: n, Lkey: 5} }
	one := RecvWr{Wr_id: 7, Num_sge: 1}
	for _, tc := range []struct {
		name    string
		srq     bool // POST_SRQ_RECV to the fixture's SRQ
		qp      func(*postFixture) uint32
		wrCount uint32
		sges    uint32
		wqeSize uint32 // 0: a receive WR's
		list    []byte
		errno   unix.Errno
		wantBad uint32
		posted  []uint64 // the wr_ids on the ring after the command
	}{
		{name: "no WRs"},
		{name: "two WRs go onto the receive ring in order (post_one_recv)",
			wrCount: 2, sges: 2, list: cat(wqes(rs, one, RecvWr{Wr_id: 8, Num_sge: 1}), sgeBytes(sge(64), sge(32))), posted: []uint64{7, 8}},
		{name: "a WR with no SGEs", wrCount: 1, list: wqes(rs, RecvWr{Wr_id: 9}), posted: []uint64{9}},
		{name: "wqe_size under a receive WR's (ib_uverbs_unmarshall_recv)",
			wqeSize: 8, errno: unix.EINVAL, wantBad: noResponse},
		{name: "the WR list runs past the request (uverbs_request_next_ptr)",
			wrCount: 2, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64))), errno: unix.ENOSPC, wantBad: noResponse},
		{name: "nonzero bytes after the lists (uverbs_request_finish)",
			wrCount: 1, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64)), []byte{1, 0, 0, 0}), errno: unix.EOPNOTSUPP, wantBad: noResponse},
		{name: "wqe_size past what kmalloc gives (ib_uverbs_unmarshall_recv)",
			wqeSize: KmallocMax + 8, errno: unix.ENOMEM, wantBad: noResponse},
		{name: "a WR with more SGEs than the list has left (ib_uverbs_unmarshall_recv)",
			wrCount: 1, sges: 1, list: cat(wqes(rs, RecvWr{Num_sge: 2}), sgeBytes(sge(64))), errno: unix.EINVAL, wantBad: noResponse},
		{name: "a num_sge whose sum with the SGEs taken wraps 32 bits (ib_uverbs_unmarshall_recv)",
			wrCount: 2, sges: 1, list: cat(wqes(rs, one, RecvWr{Num_sge: 0xffffffff}), sgeBytes(sge(64))), errno: unix.EINVAL, wantBad: noResponse},
		{name: "a handle that names no QP (uobj_get_obj_read)",
			qp: func(*postFixture) uint32 { return 99 }, wrCount: 1, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64))), errno: unix.EINVAL, wantBad: noResponse},
		{name: "a QP in RESET refuses the list at its first WR (rxe_post_recv)",
			qp: func(fx *postFixture) uint32 { return fx.reset }, wrCount: 1, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64))), errno: unix.EINVAL, wantBad: 1},
		{name: "a QP on an SRQ refuses the list at its first WR (rxe_post_recv)",
			qp: func(fx *postFixture) uint32 { return fx.onSRQ }, wrCount: 1, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64))), errno: unix.EINVAL, wantBad: 1},
		{name: "more SGEs than the ring's WQEs hold: the second WR (post_one_recv)",
			wrCount: 2, sges: 3, list: cat(wqes(rs, one, RecvWr{Wr_id: 8, Num_sge: 2}), sgeBytes(sge(1), sge(2), sge(3))),
			errno: unix.EINVAL, wantBad: 2, posted: []uint64{7}},
		{name: "a WR of more than 2^31 bytes (post_one_recv)",
			wrCount: 1, sges: 1, list: cat(wqes(rs, RecvWr{Num_sge: 1}), sgeBytes(Sge{Length: 0xffffffff})), errno: unix.EINVAL, wantBad: 1},
		{name: "SRQ: a WR goes onto the SRQ's ring (rxe_post_srq_recv)",
			srq: true, wrCount: 1, sges: 1, list: cat(wqes(rs, one), sgeBytes(sge(64))), posted: []uint64{7}},
		{name: "SRQ: a handle that names no SRQ (uobj_get_obj_read)",
			srq: true, qp: func(*postFixture) uint32 { return 99 }, errno: unix.EINVAL, wantBad: noResponse},
		{name: "SRQ: more SGEs than the ring's WQEs hold (post_one_recv)",
			srq: true, wrCount: 1, sges: 2, list: cat(wqes(rs, RecvWr{Num_sge: 2}), sgeBytes(sge(1), sge(2))), errno: unix.EINVAL, wantBad: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newPostFixture(t)
			ws := tc.wqeSize
			if ws == 0 {
				ws = uint32(rs)
			}
			var bad uint32
			var err error
			r := fx.a.rq
			if tc.srq {
				cmd := PostSrqRecv{Srq_handle: fx.srq, Wr_count: tc.wrCount, Sge_count: tc.sges, Wqe_size: ws}
				if tc.qp != nil {
					cmd.Srq_handle = tc.qp(fx)
				}
				r = fx.srqRing
				bad, err = postCmd(fx.a.client, CmdPostSrqRecv, &cmd, tc.list)
			} else {
				cmd := PostRecv{Qp_handle: fx.a.qp, Wr_count: tc.wrCount, Sge_count: tc.sges, Wqe_size: ws}
				if tc.qp != nil {
					cmd.Qp_handle = tc.qp(fx)
				}
				bad, err = postCmd(fx.a.client, CmdPostRecv, &cmd, tc.list)
			}
			if tc.errno == 0 && err != nil || tc.errno != 0 && !errors.Is(err, tc.errno) {
				t.Fatalf("post: %v, want errno %v", err, tc.errno)
			}
			if bad != tc.wantBad {
				t.Errorf("bad_wr %#x, want %#x", bad, tc.wantBad)
			}
			if n := ringCount(r); n != uint32(len(tc.posted)) {
				t.Fatalf("the ring holds %d WQEs, want %d", n, len(tc.posted))
			}
			for k, id := range tc.posted {
				w, s := ringWR(r, uint32(k))
				if w.Id != id || w.Dma.Length != w.Dma.Resid || w.Dma.Num_sge > 0 && (s.Lkey != 5 || w.Dma.Length != s.Length) {
					t.Errorf("WQE %d on the ring: %+v %+v", k, w, s)
				}
			}
		})
	}
}

// TestPostRecvCommandFillsTheRingUntilFull: a list longer than the ring's
// room posts up to the full ring and names the first WR that did not fit
// (post_one_recv's queue_full: ENOMEM).
func TestPostRecvCommandFillsTheRingUntilFull(t *testing.T) {
	fx := newPostFixture(t)
	room := fx.a.rq.mask() // one slot stays free
	n := room + 2
	var wrs []RecvWr
	for i := range n {
		wrs = append(wrs, RecvWr{Wr_id: uint64(i)})
	}
	cmd := PostRecv{Qp_handle: fx.a.qp, Wr_count: n, Wqe_size: uint32(sizeOf[RecvWr]())}
	bad, err := postCmd(fx.a.client, CmdPostRecv, &cmd, wqes(sizeOf[RecvWr](), wrs...))
	if !errors.Is(err, unix.ENOMEM) || bad != room+1 {
		t.Fatalf("POST_RECV of %d WRs to a ring of %d: bad_wr %d, %v; want %d, ENOMEM", n, room, bad, err, room+1)
	}
	if c := ringCount(fx.a.rq); c != room {
		t.Fatalf("the ring holds %d WQEs, want %d", c, room)
	}
}

// TestPostRecvCommandReceivesAndFlushes: WRs the command posted receive
// what the peer sends, as the client's own posts do; on a QP in ERR they
// complete with IB_WC_WR_FLUSH_ERR (rxe_post_recv schedules the
// responder, which flushes the queue).
func TestPostRecvCommandReceivesAndFlushes(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	b.connect(t, a.qpn)
	a.connect(t, b.qpn)
	rs := sizeOf[RecvWr]()
	cmd := PostRecv{Qp_handle: b.qp, Wr_count: 1, Sge_count: 1, Wqe_size: uint32(rs)}
	list := cat(wqes(rs, RecvWr{Wr_id: 41, Num_sge: 1}), sgeBytes(Sge{Addr: b.buf, Length: 64, Lkey: b.lkey}))
	if bad, err := postCmd(b.client, CmdPostRecv, &cmd, list); err != nil || bad != 0 {
		t.Fatalf("POST_RECV: bad_wr %d, %v", bad, err)
	}
	a.mem.WriteAt([]byte("by command"), a.buf)
	a.postSend(t, 1, emu.WRSend, RxeSge{Addr: a.buf, Length: 10, Lkey: a.lkey}, 0, 0)
	if wc := b.cqRing.poll(t); wc.Wr_id != 41 || wc.Status != uint32(emu.WCSuccess) || wc.Byte_len != 10 {
		t.Fatalf("receive completion %+v", wc)
	}
	got := make([]byte, 10)
	b.mem.ReadAt(got, b.buf)
	if string(got) != "by command" {
		t.Fatalf("received %q", got)
	}
	must(b.client, CmdModifyQp, &ModifyQp{Qp_handle: b.qp, Qp_state: uint8(qpstate.StateErr), Attr_mask: uint32(qpstate.AttrState)}, 0)
	cmd.Qp_handle = b.qp
	list = cat(wqes(rs, RecvWr{Wr_id: 42, Num_sge: 1}), sgeBytes(Sge{Addr: b.buf, Length: 64, Lkey: b.lkey}))
	if bad, err := postCmd(b.client, CmdPostRecv, &cmd, list); err != nil || bad != 0 {
		t.Fatalf("POST_RECV in ERR: bad_wr %d, %v", bad, err)
	}
	if wc := b.cqRing.poll(t); wc.Wr_id != 42 || wc.Status != uint32(emu.WCWRFlushErr) {
		t.Fatalf("completion of the WR posted in ERR %+v", wc)
	}
}
