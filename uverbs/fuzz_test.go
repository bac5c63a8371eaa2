//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"github.com/softroce/softroce/ib"
	"slices"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// writes packs a sequence of write() buffers into one fuzz input: each is
// a 2-byte little-endian length and the bytes.
func writes(bufs ...[]byte) []byte {
	var b []byte
	for _, w := range bufs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(w)))
		b = append(b, w...)
	}
	return b
}

// seedWrite is a legacy command as libibverbs writes it, with its response
// pointer at the fuzz client's response area.
func seedWrite[T any](cmd uint32, req T, respLen int) []byte {
	b := bytesOf(&req)
	if respLen > 0 {
		binary.NativeEndian.PutUint64(b, clientBase+0x80000)
	}
	return legacy(cmd, b, nil, respLen)
}

// FuzzWrite feeds sequences of command writes to a fresh File: every
// write returns its length or an error wrapping an errno (so does the
// one-way doorbell of each POST_SEND with no WRs), nothing panics,
// and Close leaves no object behind.
func FuzzWrite(f *testing.F) {
	ctx := seedWrite(CmdGetContext, GetContext{}, sizeOf[GetContextResp]())
	pd := seedWrite(CmdAllocPd, AllocPd{}, sizeOf[AllocPdResp]())
	mr := seedWrite(CmdRegMr, RegMr{Start: clientBase + 0x1000, Length: 4096, Hca_va: clientBase + 0x1000,
		Access_flags: uint32(ib.AccessLocalWrite)}, sizeOf[RegMrResp]())
	cq := seedWrite(CmdCreateCq, CreateCq{Cqe: 8, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	qp := seedWrite(CmdCreateQp, CreateQp{Pd_handle: 0, Send_cq_handle: 2, Recv_cq_handle: 2, Max_send_wr: 4,
		Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	init := seedWrite(CmdModifyQp, ModifyQp{Qp_handle: 3, Qp_state: uint8(qpstate.StateInit), Port_num: 1,
		Attr_mask: uint32(qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrAccessFlags)}, 0)
	post := seedWrite(CmdPostSend, PostSend{Qp_handle: 3, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	query := seedWrite(CmdQueryQp, QueryQp{Qp_handle: 3}, sizeOf[QueryQpResp]())
	chn := seedWrite(CmdCreateCompChannel, CreateCompChannel{}, sizeOf[CreateCompChannelResp]())
	srq := seedWrite(CmdCreateSrq, CreateSrq{Max_wr: 4, Max_sge: 1}, sizeOf[CreateSrqResp]()+sizeOf[RxeCreateSrqResp]())
	dcq := seedWrite(CmdDestroyCq, DestroyCq{Handle: 2}, sizeOf[DestroyCqResp]())
	resize := seedWrite(CmdResizeCq, ResizeCq{Handle: 2, Cqe: 20}, sizeOf[ResizeCqResp]()+sizeOf[RxeResizeCqResp]())
	rereg := seedWrite(CmdReregMr, ReregMr{Mr_handle: 1, Flags: 6, Access_flags: uint32(ib.AccessLocalWrite)},
		sizeOf[ReregMrResp]())
	mw := seedWrite(CmdAllocMw, AllocMw{Mw_type: 2}, sizeOf[AllocMwResp]())
	dmw := seedWrite(CmdDeallocMw, DeallocMw{Handle: 3}, 0)
	udqp := seedWrite(CmdCreateQp, CreateQp{Send_cq_handle: 2, Recv_cq_handle: 2, Max_send_wr: 4, Max_recv_wr: 4,
		Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeUD)}, sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	attach := seedWrite(CmdAttachMcast, AttachMcast{Gid: [16]uint8{0xff, 0x0e, 15: 1}, Handle: 3}, 0)
	detach := seedWrite(CmdDetachMcast, DetachMcast{Gid: [16]uint8{0xff, 0x0e, 15: 1}, Handle: 3}, 0)
	modSRQ := legacy(CmdModifySrq, bytesOf(&ModifySrq{Srq_handle: 2, Attr_mask: uint32(emu.SRQMaxWR), Max_wr: 16}),
		bytesOf(&RxeModifySrqCmd{Info_addr: clientBase + 0x90000}), 0)
	h := CmdHdr{Command: CmdFlagExtended | ExCmdQueryDevice, In_words: 1, Out_words: 24}
	e := ExCmdHdr{Response: clientBase + 0x80000}
	exq := append(append(append([]byte(nil), bytesOf(&h)...), bytesOf(&e)...), make([]byte, 8)...)
	f.Add(writes(ctx))
	f.Add(writes(ctx, pd, mr, cq, qp, init, post, query))
	f.Add(writes(ctx, chn, cq, dcq, srq))
	f.Add(writes(exq, ctx, exq))
	f.Add(writes(ctx, pd, cq, qp, dcq))
	f.Add(writes(ctx, pd, mr, cq, resize, rereg, mw, dmw))
	f.Add(writes(ctx, pd, mr, cq, udqp, attach, attach, detach))
	f.Add(writes(ctx, pd, cq, srq, modSRQ))
	// POST_SEND, POST_RECV and POST_SRQ_RECV carrying a WR and an SGE.
	sge := Sge{Addr: clientBase + 0x1000, Length: 64, Lkey: 1}
	swr := SendWr{Wr_id: 1, Num_sge: 1, Opcode: uint32(emu.WRSend)}
	rwr := RecvWr{Wr_id: 2, Num_sge: 1}
	withList := func(cmd uint32, req, wr []byte) []byte {
		b := append(append(append([]byte(nil), req...), wr...), bytesOf(&sge)...)
		binary.NativeEndian.PutUint64(b, clientBase+0x80000)
		return legacy(cmd, b, nil, 4)
	}
	postWR := withList(CmdPostSend, bytesOf(&PostSend{Qp_handle: 3, Wr_count: 1, Sge_count: 1,
		Wqe_size: uint32(sizeOf[SendWr]())}), bytesOf(&swr))
	recvWR := withList(CmdPostRecv, bytesOf(&PostRecv{Qp_handle: 3, Wr_count: 1, Sge_count: 1,
		Wqe_size: uint32(sizeOf[RecvWr]())}), bytesOf(&rwr))
	srqWR := withList(CmdPostSrqRecv, bytesOf(&PostSrqRecv{Srq_handle: 2, Wr_count: 1, Sge_count: 1,
		Wqe_size: uint32(sizeOf[RecvWr]())}), bytesOf(&rwr))
	f.Add(writes(ctx, pd, mr, cq, qp, init, postWR, recvWR))
	f.Add(writes(ctx, pd, cq, srq, srqWR))

	dev := newDeviceFor(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		m := &fakeMem{base: clientBase, buf: make([]byte, 1<<20)}
		file := Open(dev, m)
		for len(in) >= 2 {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			n = min(n, len(in))
			buf := in[:n]
			in = in[n:]
			if h, ok := NullPostSend(buf); ok {
				// A doorbell the client answered itself (one-way).
				if _, err := file.Doorbell(h); err != nil {
					var errno unix.Errno
					if !errors.As(err, &errno) || errno == 0 {
						t.Fatalf("doorbell error %v carries no errno", err)
					}
				}
			}
			r, err := file.Write(buf)
			if err != nil {
				var errno unix.Errno
				if !errors.As(err, &errno) || errno == 0 {
					t.Fatalf("error %v carries no errno", err)
				}
				continue
			}
			if r.N != len(buf) {
				t.Fatalf("write of %d bytes returned %d", len(buf), r.N)
			}
		}
		file.Close()
		if len(file.objects) != 0 || len(file.mmaps) != 0 {
			t.Fatalf("after close: %d objects, %d queues", len(file.objects), len(file.mmaps))
		}
	})
}

// FuzzRingWQE decodes arbitrary bytes as the send and receive WQEs a
// client writes into its rings: the decoder never reads outside the slot
// and never yields more SGEs than the queue takes, whatever num_sge,
// length and opcode say.
func FuzzRingWQE(f *testing.F) {
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 1, Opcode: 2}, Dma: RxeDmaInfo{Length: 8, Num_sge: 1}}
	sge := RxeSge{Addr: clientBase, Length: 8, Lkey: 0x100}
	f.Add(append(bytesOf(&w), bytesOf(&sge)...))
	w.Wr.Send_flags, w.Dma.Num_sge, w.Dma.Length = sendInline, 0, 0xFFFFFFFF
	f.Add(bytesOf(&w))
	w.Wr.Opcode, w.Wr.Send_flags, w.Dma.Length = uint32(emu.WRAtomicWrite), 0, 8
	f.Add(append(bytesOf(&w), "atomicwr"...))
	r := RxeRecvWqe{Id: 3, Dma: RxeDmaInfo{Num_sge: 0xFFFFFFFF}}
	f.Add(append(bytesOf(&r), bytesOf(&sge)...))
	fl := RxeSendWqe{Wr: RxeSendWr{Wr_id: 4, Opcode: uint32(emu.WRFlush)}, Dma: RxeDmaInfo{Length: 1024}}
	fl.Wr.Wr[12], fl.Wr.Wr[16], fl.Wr.Wr[17] = 0x80, emu.FlushGlobal, emu.FlushRange
	f.Add(bytesOf(&fl))

	dev := newDeviceFor(f)
	k := setup(f, newClient(f, dev))
	o := k.f.objects[k.qp]
	u := o.qp
	f.Fuzz(func(t *testing.T, in []byte) {
		slot := make([]byte, 1<<u.sq.log2Elem)
		copy(slot, in)
		var wr emu.SendWR
		k.f.mu.Lock()
		err := u.sendWR(slot, 0, &wr)
		k.f.mu.Unlock()
		if err == nil && uint32(len(wr.SGList)) > max(u.sqMaxSGE, 1) {
			t.Fatalf("%d SGEs from a queue of %d", len(wr.SGList), u.sqMaxSGE)
		}
		// ATOMIC_WRITE's 8 bytes come from the WQE, whatever the queue's
		// max_inline_data.
		if wr.SendFlags&sendInline != 0 && len(wr.SGList) == 1 && wr.SGList[0].Length > max(u.sqInline, atomicWriteLen) {
			t.Fatalf("inline of %d bytes, queue takes %d", wr.SGList[0].Length, u.sqInline)
		}
		if err == nil && wr.Opcode == emu.WRAtomicWrite && (len(wr.SGList) != 1 || wr.SGList[0].Length != atomicWriteLen) {
			t.Fatalf("ATOMIC_WRITE with SGEs %+v, want its 8 bytes", wr.SGList)
		}
		rslot := make([]byte, 1<<u.rq.log2Elem)
		copy(rslot, in)
		var rwr emu.RecvWR
		recvWR(rslot, u.rqMaxSGE, &rwr)
		if uint32(len(rwr.SGList)) > u.rqMaxSGE {
			t.Fatalf("%d receive SGEs from a queue of %d", len(rwr.SGList), u.rqMaxSGE)
		}
	})
}

// TestAtomicWriteWQEWithoutRoomIsRefused: an ATOMIC_WRITE WQE whose 8
// bytes would lie past its slot (a queue of no SGE and no inline data
// has no room after the WQE) is refused with EINVAL, never read past.
func TestAtomicWriteWQEWithoutRoomIsRefused(t *testing.T) {
	dev := newDeviceFor(t)
	k := setup(t, newClient(t, dev))
	u := k.f.objects[k.qp].qp
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 1, Opcode: uint32(emu.WRAtomicWrite)}, Dma: RxeDmaInfo{Length: 8}}
	slot := bytesOf(&w)[:dmaOffSend+dmaHdr]
	var wr emu.SendWR
	k.f.mu.Lock()
	err := u.sendWR(slot, 0, &wr)
	k.f.mu.Unlock()
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("sendWR of an ATOMIC_WRITE with no room: %v, want EINVAL", err)
	}
	full := append(slices.Clone(slot), "atomicwr"...)
	k.f.mu.Lock()
	err = u.sendWR(full, 0, &wr)
	k.f.mu.Unlock()
	if err != nil || wr.SendFlags&emu.SendInline == 0 || len(wr.SGList) != 1 || wr.SGList[0].Length != 8 {
		t.Fatalf("sendWR of an ATOMIC_WRITE: %v, WR %+v; want its 8 bytes inline", err, wr)
	}
}

// TestFlushWQEDecodes: a FLUSH WQE as librxe's wr_flush writes it (rdma-core
// 65's pyverbs test_qp_ex_rc_flush: rkey, remote address, 1024 bytes,
// IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE; then IBV_FLUSH_MR with length 0)
// becomes the device's FLUSH WR with that key, address, length, placement
// and selectivity. The key sits where wr.rdma's would-be reserved word is:
// read as an RDMA WR, it was the flush's unused length field (0), and every
// such FLUSH failed the responder's key check (IB_WC_REM_ACCESS_ERR).
func TestFlushWQEDecodes(t *testing.T) {
	dev := newDeviceFor(t)
	k := setup(t, newClient(t, dev))
	u := k.f.objects[k.qp].qp
	for _, tc := range []struct {
		length     uint32
		typ, level uint8
	}{{1024, emu.FlushGlobal, emu.FlushRange}, {0, emu.FlushGlobal, emu.FlushMR}, {64, emu.FlushPersistent | emu.FlushGlobal, emu.FlushRange}} {
		const addr, rkey = 0x7f0012345000, 0x1234ab
		w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 0x123, Opcode: uint32(emu.WRFlush), Send_flags: uint32(emu.SendSignaled)},
			Iova: addr, Dma: RxeDmaInfo{Length: tc.length, Resid: tc.length}}
		binary.NativeEndian.PutUint64(w.Wr.Wr[0:], addr)
		binary.NativeEndian.PutUint32(w.Wr.Wr[12:], rkey)
		w.Wr.Wr[16], w.Wr.Wr[17] = tc.typ, tc.level
		var wr emu.SendWR
		k.f.mu.Lock()
		err := u.sendWR(bytesOf(&w), 0, &wr)
		k.f.mu.Unlock()
		if err != nil || wr.Opcode != emu.WRFlush || wr.RemoteAddr != addr || wr.RKey != rkey || wr.FlushLen != tc.length ||
			wr.FlushType != tc.typ || wr.FlushLevel != tc.level || len(wr.SGList) != 0 || wr.WRID != 0x123 {
			t.Errorf("flush %+v: %v, WR %+v", tc, err, wr)
		}
	}
}
