//go:build linux

package uverbs

import (
	"bytes"
	"encoding/binary"
	"github.com/softroce/softroce/ib"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// readEvent reads one record from an event file's client end, waiting up
// to a few seconds.
func readEvent(t *testing.T, p PassFile, n int) []byte {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(p.File.Fd()), Events: unix.POLLIN}}
	if k, err := unix.Poll(fds, 5000); err != nil || k != 1 {
		t.Fatalf("event file not readable: %d %v", k, err)
	}
	b := make([]byte, 64)
	m, err := unix.Read(int(p.File.Fd()), b)
	if err != nil || m != n {
		t.Fatalf("read %d bytes (%v), want %d", m, err, n)
	}
	return b[:m]
}

func TestCompletionChannelDeliversArmedEvents(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	_, r := must(b.client, CmdCreateCompChannel, &CreateCompChannel{}, sizeOf[CreateCompChannelResp]())
	if len(r.Files) != 1 {
		t.Fatalf("CREATE_COMP_CHANNEL files %+v", r.Files)
	}
	ch := r.Files[0]
	// The daemon reports the fd number the client received before the
	// client's write() returns; libibverbs keeps the response on its stack,
	// so what is at At later is another command's (here: garbage).
	const clientFd = 42
	b.f.FilesStored([]uint32{clientFd})
	b.mem.WriteAt([]byte{7, 7, 7, 7}, ch.At)

	// A CQ on an fd that is no channel of the file: EINVAL.
	_, _, err := do(b.client, CmdCreateCq, &CreateCq{Cqe: 8, Comp_channel: 7}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	errnoIs(t, err, unix.EINVAL)

	const cookie = 0xC0FFEE
	out, _ := must(b.client, CmdCreateCq, &CreateCq{User_handle: cookie, Cqe: 8, Comp_channel: clientFd},
		sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	rcq := load[CreateCqResp](out).Handle
	rcqRing := ring(b.client.mapQueue(load[RxeCreateCqResp](out[sizeOf[CreateCqResp]():]).Mi))
	out, _ = must(b.client, CmdCreateQp, &CreateQp{Pd_handle: b.pd, Send_cq_handle: b.cq, Recv_cq_handle: rcq,
		Max_send_wr: 4, Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	b2 := &conn{client: b.client, pd: b.pd, lkey: b.lkey, buf: b.buf, qp: qr.Qp_handle, qpn: qr.Qpn,
		rq: b.client.mapQueue(mi.Rq_mi), sq: b.client.mapQueue(mi.Sq_mi), cqRing: rcqRing}
	a.connect(t, b2.qpn)
	b2.connect(t, a.qpn)

	must(b.client, CmdReqNotifyCq, &ReqNotifyCq{Cq_handle: rcq}, 0)
	b2.postRecv(t, 5, b.buf, 64)
	a.mem.WriteAt([]byte("ping"), a.buf)
	a.postSend(t, 1, emu.WRSend, RxeSge{Addr: a.buf, Length: 4, Lkey: a.lkey}, 0, 0)
	ev := readEvent(t, ch, sizeOf[CompEventDesc]())
	if got := load[CompEventDesc](ev).Handle; got != cookie {
		t.Fatalf("event for cq_handle %#x, want %#x", got, cookie)
	}
	if wc := rcqRing.poll(t); wc.Wr_id != 5 || wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("receive completion %+v", wc)
	}
	a.cqRing.poll(t)

	// Not re-armed: the next completion raises no event.
	b2.postRecv(t, 6, b.buf, 64)
	a.postSend(t, 2, emu.WRSend, RxeSge{Addr: a.buf, Length: 4, Lkey: a.lkey}, 0, 0)
	rcqRing.poll(t)
	time.Sleep(20 * time.Millisecond)
	fds := []unix.PollFd{{Fd: int32(ch.File.Fd()), Events: unix.POLLIN}}
	if k, _ := unix.Poll(fds, 0); k != 0 {
		t.Fatal("an event without REQ_NOTIFY_CQ")
	}

	// DESTROY_QP, then DESTROY_CQ reports the one event the client read.
	must(b.client, CmdDestroyQp, &DestroyQp{Handle: b2.qp}, sizeOf[DestroyQpResp]())
	out, _ = must(b.client, CmdDestroyCq, &DestroyCq{Handle: rcq}, sizeOf[DestroyCqResp]())
	if got := load[DestroyCqResp](out).Comp_events_reported; got != 1 {
		t.Fatalf("comp_events_reported %d, want 1", got)
	}
}

func TestUDSendThroughAHNumber(t *testing.T) {
	dev := newDevice(t)
	cs := []*client{newClient(t, dev), newClient(t, dev)}
	type udc struct {
		*conn
		ah    uint32
		ahNum uint32
	}
	var u [2]udc
	for i, c := range cs {
		k := &conn{client: c, buf: clientBase + bufOff}
		must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
		out, _ := must(c, CmdAllocPd, &AllocPd{}, sizeOf[AllocPdResp]())
		k.pd = load[AllocPdResp](out).Handle
		out, _ = must(c, CmdRegMr, &RegMr{Start: k.buf, Length: 0x10000, Hca_va: k.buf, Pd_handle: k.pd,
			Access_flags: uint32(ib.AccessLocalWrite)}, sizeOf[RegMrResp]())
		k.lkey = load[RegMrResp](out).Lkey
		out, _ = must(c, CmdCreateCq, &CreateCq{Cqe: 8, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
		k.cq = load[CreateCqResp](out).Handle
		k.cqRing = c.mapQueue(load[RxeCreateCqResp](out[sizeOf[CreateCqResp]():]).Mi)
		// The extended create, as ibv_create_qp_ex does.
		h := CmdHdr{Command: CmdFlagExtended | ExCmdCreateQp, In_words: uint16(sizeOf[ExCreateQp]() / 8),
			Out_words: uint16(sizeOf[ExCreateQpResp]() / 8)}
		e := ExCmdHdr{Response: c.resp, Provider_out_words: uint16(sizeOf[RxeCreateQpResp]() / 8)}
		cmd := ExCreateQp{Pd_handle: k.pd, Send_cq_handle: k.cq, Recv_cq_handle: k.cq, Max_send_wr: 4, Max_recv_wr: 4,
			Max_send_sge: 1, Max_recv_sge: 1, Max_inline_data: 64, Qp_type: uint8(qpstate.TypeUD)}
		buf := append(append(append([]byte(nil), bytesOf(&h)...), bytesOf(&e)...), bytesOf(&cmd)...)
		if _, err := c.f.Write(buf); err != nil {
			t.Fatal(err)
		}
		out = make([]byte, sizeOf[ExCreateQpResp]()+sizeOf[RxeCreateQpResp]())
		c.mem.ReadAt(out, c.resp)
		qr := load[ExCreateQpResp](out)
		if qr.Response_length != uint32(sizeOf[ExCreateQpResp]()) || qr.Base.Max_inline_data < 64 {
			t.Fatalf("EX_CREATE_QP response %+v", qr)
		}
		k.qp, k.qpn = qr.Base.Qp_handle, qr.Base.Qpn
		mi := load[RxeCreateQpResp](out[sizeOf[ExCreateQpResp]():])
		k.rq, k.sq = c.mapQueue(mi.Rq_mi), c.mapQueue(mi.Sq_mi)
		for _, m := range []ModifyQp{
			{Qp_state: uint8(qpstate.StateInit), Port_num: 1, Qkey: 0x1111,
				Attr_mask: uint32(qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrQKey)},
			{Qp_state: uint8(qpstate.StateRTR), Attr_mask: uint32(qpstate.AttrState)},
			{Qp_state: uint8(qpstate.StateRTS), Attr_mask: uint32(qpstate.AttrState | qpstate.AttrSQPSN)},
		} {
			m.Qp_handle = k.qp
			must(c, CmdModifyQp, &m, 0)
		}
		out, _ = must(c, CmdCreateAh, &CreateAh{Pd_handle: k.pd, Attr: AhAttr{Port_num: 1, Is_global: 1,
			Grh: GlobalRoute{Dgid: emu.GIDFromAddr(testIP), Sgid_index: 1, Hop_limit: 64}}},
			sizeOf[CreateAhResp]()+sizeOf[RxeCreateAhResp]())
		u[i] = udc{conn: k, ah: load[CreateAhResp](out).Handle,
			ahNum: load[RxeCreateAhResp](out[sizeOf[CreateAhResp]():]).Num}
		if u[i].ahNum == 0 {
			t.Fatal("no ah_num in the CREATE_AH response")
		}
	}
	// UD receives get the 40-byte GRH area first.
	u[1].postRecv(t, 3, u[1].buf, 256)
	msg := []byte("inline datagram")
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 8, Opcode: uint32(emu.WRSend), Send_flags: uint32(emu.SendSignaled | emu.SendInline)},
		Dma: RxeDmaInfo{Length: uint32(len(msg)), Resid: uint32(len(msg))}}
	ud := RxeSendWrUd{Remote_qpn: u[1].qpn, Remote_qkey: 0x1111, Ah_num: u[0].ahNum}
	copy(w.Wr.Wr[:], bytesOf(&ud))
	if !u[0].sq.produce(append(bytesOf(&w), msg...)) {
		t.Fatal("SQ full")
	}
	must(cs[0], CmdPostSend, &PostSend{Qp_handle: u[0].qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	if wc := u[0].cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != 8 {
		t.Fatalf("UD send completion %+v", wc)
	}
	wc := u[1].cqRing.poll(t)
	if wc.Status != uint32(emu.WCSuccess) || wc.Byte_len != uint32(len(msg)+emu.GRHSize) || wc.Src_qp != u[0].qpn {
		t.Fatalf("UD receive completion %+v", wc)
	}
	got := make([]byte, len(msg))
	cs[1].mem.ReadAt(got, u[1].buf+emu.GRHSize)
	if !bytes.Equal(got, msg) {
		t.Fatalf("received %q", got)
	}
	// An ah_num of the other client's AH is not in this QP's PD: the WQE
	// fails and the QP goes to ERR.
	w.Wr.Wr_id = 9
	ud.Ah_num = u[1].ahNum
	copy(w.Wr.Wr[:], bytesOf(&ud))
	u[0].sq.produce(append(bytesOf(&w), msg...))
	must(cs[0], CmdPostSend, &PostSend{Qp_handle: u[0].qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	out, _ := must(cs[0], CmdQueryQp, &QueryQp{Qp_handle: u[0].qp, Attr_mask: uint32(qpstate.AttrState)}, sizeOf[QueryQpResp]())
	if st := load[QueryQpResp](out).Qp_state; st != uint8(qpstate.StateErr) {
		t.Fatalf("QP state %d after a WQE with a foreign AH, want ERR", st)
	}
	// The refused WQE still completes, in error: the client never waits
	// for it.
	if wc := u[0].cqRing.poll(t); wc.Wr_id != 9 || wc.Status == uint32(emu.WCSuccess) {
		t.Fatalf("refused WQE completion %+v", wc)
	}
}

func TestCQOverflowRaisesAsyncEvent(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	// a's send CQ holds one completion: a CQ of 1 entry the client never
	// polls overflows on the second.
	const cookie = 0xABCD
	out, _ := must(a.client, CmdCreateCq, &CreateCq{User_handle: cookie, Cqe: 1, Comp_channel: -1},
		sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	small := load[CreateCqResp](out)
	if small.Cqe != 1 {
		t.Fatalf("cqe %d, want 1", small.Cqe)
	}
	out, _ = must(a.client, CmdCreateQp, &CreateQp{Pd_handle: a.pd, Send_cq_handle: small.Handle, Recv_cq_handle: a.cq,
		Max_send_wr: 4, Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	a2 := &conn{client: a.client, pd: a.pd, lkey: a.lkey, rkey: a.rkey, buf: a.buf, qp: qr.Qp_handle, qpn: qr.Qpn,
		rq: a.client.mapQueue(mi.Rq_mi), sq: a.client.mapQueue(mi.Sq_mi)}
	a2.connect(t, b.qpn)
	b.connect(t, a2.qpn)
	for i := range 2 {
		a2.postSend(t, uint64(i), emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}, b.buf, b.rkey)
	}
	ev := readEvent(t, a.asyncFd, sizeOf[AsyncEventDesc]())
	d := load[AsyncEventDesc](ev)
	if d.Element != cookie || d.Type != uint32(emu.EventCQErr) {
		t.Fatalf("async event %+v, want IB_EVENT_CQ_ERR for %#x", d, cookie)
	}
	must(a.client, CmdDestroyQp, &DestroyQp{Handle: a2.qp}, sizeOf[DestroyQpResp]())
	out, _ = must(a.client, CmdDestroyCq, &DestroyCq{Handle: small.Handle}, sizeOf[DestroyCqResp]())
	if n := load[DestroyCqResp](out).Async_events_reported; n != 1 {
		t.Fatalf("async_events_reported %d, want the 1 the client read", n)
	}
}

func TestDestroyCountsOnlyEventsTheClientRead(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	const cookie = 0xDEAD
	out, _ := must(a.client, CmdCreateCq, &CreateCq{User_handle: cookie, Cqe: 1, Comp_channel: -1},
		sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	small := load[CreateCqResp](out)
	out, _ = must(a.client, CmdCreateQp, &CreateQp{Pd_handle: a.pd, Send_cq_handle: small.Handle, Recv_cq_handle: a.cq,
		Max_send_wr: 4, Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	a2 := &conn{client: a.client, pd: a.pd, lkey: a.lkey, buf: a.buf, qp: qr.Qp_handle, qpn: qr.Qpn,
		rq: a.client.mapQueue(mi.Rq_mi), sq: a.client.mapQueue(mi.Sq_mi)}
	a2.connect(t, b.qpn)
	b.connect(t, a2.qpn)
	for i := range 2 {
		a2.postSend(t, uint64(i), emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}, b.buf, b.rkey)
	}
	fds := []unix.PollFd{{Fd: int32(a.asyncFd.File.Fd()), Events: unix.POLLIN}}
	if k, _ := unix.Poll(fds, 5000); k != 1 {
		t.Fatal("no async event")
	}
	// The client never reads it: libibverbs' ibv_destroy_cq waits until
	// it has acknowledged async_events_reported events, so the count must
	// not include it, and the event goes with the CQ.
	must(a.client, CmdDestroyQp, &DestroyQp{Handle: a2.qp}, sizeOf[DestroyQpResp]())
	out, _ = must(a.client, CmdDestroyCq, &DestroyCq{Handle: small.Handle}, sizeOf[DestroyCqResp]())
	if n := load[DestroyCqResp](out).Async_events_reported; n != 0 {
		t.Fatalf("async_events_reported %d for an event the client never read", n)
	}
	if k, _ := unix.Poll(fds, 0); k != 0 {
		t.Fatal("the destroyed CQ's event is still on the async fd")
	}
}

func TestSRQReceivesFromItsRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	out, _ := must(b.client, CmdCreateSrq, &CreateSrq{Pd_handle: b.pd, Max_wr: 8, Max_sge: 1},
		sizeOf[CreateSrqResp]()+sizeOf[RxeCreateSrqResp]())
	sr := load[CreateSrqResp](out)
	dr := load[RxeCreateSrqResp](out[sizeOf[CreateSrqResp]():])
	if sr.Max_wr < 8 || dr.Num == 0 {
		t.Fatalf("CREATE_SRQ %+v %+v", sr, dr)
	}
	srqRing := ring(b.client.mapQueue(dr.Mi))
	out, _ = must(b.client, CmdCreateQp, &CreateQp{Pd_handle: b.pd, Send_cq_handle: b.cq, Recv_cq_handle: b.cq,
		Srq_handle: sr.Srq_handle, Is_srq: 1, Max_send_wr: 4, Max_send_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	if mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():]); mi.Rq_mi.Size != 0 {
		t.Fatalf("a QP on an SRQ got a receive ring %+v", mi.Rq_mi)
	}
	b2 := &conn{client: b.client, qp: qr.Qp_handle, qpn: qr.Qpn}
	a.connect(t, b2.qpn)
	b2.connect(t, a.qpn)
	for i := range 2 {
		w := RxeRecvWqe{Id: uint64(100 + i), Dma: RxeDmaInfo{Length: 64, Num_sge: 1}}
		sge := RxeSge{Addr: b.buf + uint64(i)*64, Length: 64, Lkey: b.lkey}
		if !srqRing.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
			t.Fatal("SRQ full")
		}
	}
	for i, msg := range []string{"first", "second"} {
		a.mem.WriteAt([]byte(msg), a.buf)
		a.postSend(t, uint64(i), emu.WRSend, RxeSge{Addr: a.buf, Length: uint32(len(msg)), Lkey: a.lkey}, 0, 0)
		if wc := b.cqRing.poll(t); wc.Wr_id != uint64(100+i) || wc.Byte_len != uint32(len(msg)) || wc.Qp_num != b2.qpn {
			t.Fatalf("SRQ receive %d: %+v", i, wc)
		}
		a.cqRing.poll(t)
		got := make([]byte, len(msg))
		b.mem.ReadAt(got, b.buf+uint64(i)*64)
		if string(got) != msg {
			t.Fatalf("received %q", got)
		}
	}
	// The SRQ is busy while the QP uses it.
	_, _, err := do(b.client, CmdDestroySrq, &DestroySrq{Handle: sr.Srq_handle}, sizeOf[DestroySrqResp]())
	errnoIs(t, err, unix.EBUSY)
}

func TestChannelFdReadBackWithoutFilesStored(t *testing.T) {
	dev := newDevice(t)
	c := newClient(t, dev)
	must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	_, r := must(c, CmdCreateCompChannel, &CreateCompChannel{}, sizeOf[CreateCompChannelResp]())
	var fd [4]byte
	binary.NativeEndian.PutUint32(fd[:], 9)
	c.mem.WriteAt(fd[:], r.Files[0].At)
	// The next command reads the number back from the response.
	if _, _, err := do(c, CmdCreateCq, &CreateCq{Cqe: 2, Comp_channel: 9}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]()); err != nil {
		t.Fatal(err)
	}
}

func TestPortEventsReachEveryContext(t *testing.T) {
	dev := newDevice(t)
	a, b := newClient(t, dev), newClient(t, dev)
	_, ra := must(a, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	_, rb := must(b, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	dev.SetNetDevAddrs([]netip.Addr{testIP, netip.MustParseAddr("10.0.0.9")})
	for _, r := range []Reply{ra, rb} {
		d := load[AsyncEventDesc](readEvent(t, r.Files[0], sizeOf[AsyncEventDesc]()))
		if d.Element != 1 || d.Type != uint32(emu.EventGIDChange) {
			t.Fatalf("async event %+v, want IB_EVENT_GID_CHANGE on port 1", d)
		}
	}
	// A closed file gets nothing more, the other one still does.
	a.f.Close()
	dev.SetNetDevAddrs([]netip.Addr{testIP})
	d := load[AsyncEventDesc](readEvent(t, rb.Files[0], sizeOf[AsyncEventDesc]()))
	if d.Type != uint32(emu.EventGIDChange) {
		t.Fatalf("async event %+v", d)
	}
}

func TestSRQLimitCountsTheRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	const cookie = 0x5A5A
	out, _ := must(b.client, CmdCreateSrq, &CreateSrq{User_handle: cookie, Pd_handle: b.pd, Max_wr: 8, Max_sge: 1},
		sizeOf[CreateSrqResp]()+sizeOf[RxeCreateSrqResp]())
	sr := load[CreateSrqResp](out)
	srqRing := ring(b.client.mapQueue(load[RxeCreateSrqResp](out[sizeOf[CreateSrqResp]():]).Mi))
	if err := b.modifySRQ(ModifySrq{Srq_handle: sr.Srq_handle, Attr_mask: uint32(emu.SRQLimit), Srq_limit: 2}, 0); err != nil {
		t.Fatal(err)
	}
	out, _ = must(b.client, CmdCreateQp, &CreateQp{Pd_handle: b.pd, Send_cq_handle: b.cq, Recv_cq_handle: b.cq,
		Srq_handle: sr.Srq_handle, Is_srq: 1, Max_send_wr: 4, Max_send_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	b2 := &conn{client: b.client, qp: qr.Qp_handle, qpn: qr.Qpn}
	a.connect(t, b2.qpn)
	b2.connect(t, a.qpn)
	for i := range 4 {
		w := RxeRecvWqe{Id: uint64(i), Dma: RxeDmaInfo{Length: 64, Num_sge: 1}}
		sge := RxeSge{Addr: b.buf, Length: 64, Lkey: b.lkey}
		srqRing.produce(append(bytesOf(&w), bytesOf(&sge)...))
	}
	fds := []unix.PollFd{{Fd: int32(b.asyncFd.File.Fd()), Events: unix.POLLIN}}
	for i := range 3 {
		a.postSend(t, uint64(i), emu.WRSend, RxeSge{Addr: a.buf, Length: 4, Lkey: a.lkey}, 0, 0)
		a.cqRing.poll(t)
		b.cqRing.poll(t)
		time.Sleep(10 * time.Millisecond)
		k, _ := unix.Poll(fds, 0)
		if i < 2 && k != 0 {
			t.Fatalf("SRQ limit event with %d WRs left (limit 2)", 3-i)
		}
	}
	d := load[AsyncEventDesc](readEvent(t, b.asyncFd, sizeOf[AsyncEventDesc]()))
	if d.Element != cookie || d.Type != uint32(emu.EventSRQLimitReached) {
		t.Fatalf("async event %+v, want IB_EVENT_SRQ_LIMIT_REACHED for %#x", d, cookie)
	}
}
