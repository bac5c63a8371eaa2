//go:build linux

package uverbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// waitCount waits until the ring holds n entries its consumer has not
// taken.
func (r ring) waitCount(t *testing.T, n uint32) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p, c := atomic.LoadUint32(r.word(qbProducer)), atomic.LoadUint32(r.word(qbConsumer))
		if (p-c)&r.mask() == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ring holds %d entries, want %d", (p-c)&r.mask(), n)
		}
	}
}

// resizeCQ sends RESIZE_CQ as librxe does (the core response, then struct
// rxe_resize_cq_resp) and returns both.
func (c *client) resizeCQ(handle, cqe uint32, room int) (ResizeCqResp, RxeResizeCqResp, error) {
	out, _, err := do(c, CmdResizeCq, &ResizeCq{Handle: handle, Cqe: cqe}, room)
	var d RxeResizeCqResp
	if len(out) >= sizeOf[ResizeCqResp]()+sizeOf[RxeResizeCqResp]() {
		d = load[RxeResizeCqResp](out[sizeOf[ResizeCqResp]():])
	}
	return load[ResizeCqResp](out), d, err
}

// TestResizeCQMovesTheRing: RESIZE_CQ as librxe's rxe_resize_cq sends it
// answers with the new capacity and the mminfo of a new ring holding, in
// order, the completions the client had not polled; new completions go to
// the new ring. Too few entries for those completions, a size out of
// range, no room for rxe's response and a bad handle are EINVAL, and
// leave the ring where it was.
func TestResizeCQMovesTheRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	for i := range 3 {
		a.postSend(t, uint64(i), emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}, b.buf, b.rkey)
	}
	a.cqRing.waitCount(t, 3)
	room := sizeOf[ResizeCqResp]() + sizeOf[RxeResizeCqResp]()
	for _, c := range []struct {
		name   string
		handle uint32
		cqe    uint32
		room   int
	}{
		{"below the unpolled completions", a.cq, 2, room},
		{"cqe 0", a.cq, 0, room},
		{"cqe above max_cqe", a.cq, 32768, room},
		{"negative cqe", a.cq, ^uint32(0), room},
		{"no room for rxe's response", a.cq, 64, sizeOf[ResizeCqResp]()},
		{"a QP's handle", a.qp, 64, room},
	} {
		_, _, err := a.resizeCQ(c.handle, c.cqe, c.room)
		if err == nil {
			t.Fatalf("%s: resized", c.name)
		}
		errnoIs(t, err, unix.EINVAL)
	}
	resp, drv, err := a.resizeCQ(a.cq, 100, room)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Cqe != 127 || drv.Mi.Size == 0 {
		t.Fatalf("RESIZE_CQ answered cqe %d, mminfo %+v", resp.Cqe, drv.Mi)
	}
	newRing := ring(a.mapQueue(drv.Mi))
	if newRing.mask() != 127 {
		t.Fatalf("new ring's index mask %d", newRing.mask())
	}
	for i := range 3 {
		if wc := newRing.poll(t); wc.Wr_id != uint64(i) || wc.Status != uint32(emu.WCSuccess) {
			t.Fatalf("completion %d on the new ring: %+v", i, wc)
		}
	}
	a.postSend(t, 7, emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}, b.buf, b.rkey)
	if wc := newRing.poll(t); wc.Wr_id != 7 {
		t.Fatalf("completion after the resize: %+v", wc)
	}
	if p := atomic.LoadUint32(a.cqRing.word(qbProducer)); p != 3 {
		t.Fatalf("the old ring's producer index moved to %d", p)
	}
	// Shrink to the least size that holds nothing: 1.
	if resp, _, err := a.resizeCQ(a.cq, 1, room); err != nil || resp.Cqe != 1 {
		t.Fatalf("resize to 1: %+v %v", resp, err)
	}
}

// modifySRQ sends MODIFY_SRQ as librxe's rxe_modify_srq does: the core
// request and struct rxe_modify_srq_cmd naming where a resized ring's
// mminfo goes.
func (c *client) modifySRQ(req ModifySrq, infoAddr uint64) error {
	drv := RxeModifySrqCmd{Info_addr: infoAddr}
	_, err := c.f.Write(legacy(CmdModifySrq, bytesOf(&req), bytesOf(&drv), 0))
	return err
}

// TestModifySRQResizeMovesTheRing: MODIFY_SRQ with IB_SRQ_MAX_WR writes
// the mminfo of a new ring to the address in rxe_modify_srq_cmd; the WQEs
// the client posted and no message took yet are in it, in order, and the
// responder takes them and the ones posted after from it. A request
// without rxe's command is EINVAL whatever the mask; a size below the
// posted WQEs is EINVAL; an mminfo address outside the client's memory is
// EFAULT; each leaves the SRQ as it was.
func TestModifySRQResizeMovesTheRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	out, _ := must(b.client, CmdCreateSrq, &CreateSrq{Pd_handle: b.pd, Max_wr: 4, Max_sge: 1},
		sizeOf[CreateSrqResp]()+sizeOf[RxeCreateSrqResp]())
	sr := load[CreateSrqResp](out)
	oldRing := ring(b.client.mapQueue(load[RxeCreateSrqResp](out[sizeOf[CreateSrqResp]():]).Mi))
	post := func(r ring, id uint64) {
		w := RxeRecvWqe{Id: id, Dma: RxeDmaInfo{Length: 64, Num_sge: 1}}
		sge := RxeSge{Addr: b.buf + (id%8)*64, Length: 64, Lkey: b.lkey}
		if !r.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
			t.Fatalf("SRQ ring full at %d", id)
		}
	}
	for id := uint64(100); id < 103; id++ {
		post(oldRing, id)
	}
	resize := ModifySrq{Srq_handle: sr.Srq_handle, Attr_mask: uint32(emu.SRQMaxWR), Max_wr: 20}
	_, err := b.f.Write(legacy(CmdModifySrq, bytesOf(&resize), nil, 0))
	errnoIs(t, err, unix.EINVAL)
	limit := ModifySrq{Srq_handle: sr.Srq_handle, Attr_mask: uint32(emu.SRQLimit), Srq_limit: 1}
	_, err = b.f.Write(legacy(CmdModifySrq, bytesOf(&limit), nil, 0))
	errnoIs(t, err, unix.EINVAL)
	info := b.resp + 0x100
	small := resize
	small.Max_wr = 1
	errnoIs(t, b.modifySRQ(small, info), unix.EINVAL)
	errnoIs(t, b.modifySRQ(resize, 0x10), unix.EFAULT)
	q, _ := must(b.client, CmdQuerySrq, &QuerySrq{Handle: sr.Srq_handle}, sizeOf[QuerySrqResp]())
	if got := load[QuerySrqResp](q).Max_wr; got != 7 {
		t.Fatalf("max_wr %d after the refused resizes, want 7", got)
	}
	if err := b.modifySRQ(resize, info); err != nil {
		t.Fatal(err)
	}
	mi := make([]byte, sizeOf[Mminfo]())
	b.mem.ReadAt(mi, info)
	newRing := ring(b.client.mapQueue(load[Mminfo](mi)))
	if newRing.mask() != 31 {
		t.Fatalf("new SRQ ring's index mask %d, want 31", newRing.mask())
	}
	q, _ = must(b.client, CmdQuerySrq, &QuerySrq{Handle: sr.Srq_handle}, sizeOf[QuerySrqResp]())
	if got := load[QuerySrqResp](q).Max_wr; got != 31 {
		t.Fatalf("max_wr %d after the resize, want 31", got)
	}
	for id := uint64(103); id < 110; id++ {
		post(newRing, id)
	}
	out, _ = must(b.client, CmdCreateQp, &CreateQp{Pd_handle: b.pd, Send_cq_handle: b.cq, Recv_cq_handle: b.cq,
		Srq_handle: sr.Srq_handle, Is_srq: 1, Max_send_wr: 4, Max_send_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	b2 := &conn{client: b.client, qp: qr.Qp_handle, qpn: qr.Qpn}
	a.connect(t, b2.qpn)
	b2.connect(t, a.qpn)
	for i := range 10 {
		a.postSend(t, uint64(i), emu.WRSend, RxeSge{Addr: a.buf, Length: 4, Lkey: a.lkey}, 0, 0)
		a.cqRing.poll(t)
		if wc := b.cqRing.poll(t); wc.Wr_id != uint64(100+i) || wc.Status != uint32(emu.WCSuccess) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
}
