//go:build linux

package uverbs

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// regMR registers n bytes at addr of c's memory in pd with access.
func (k *conn) regMR(t *testing.T, pd uint32, addr uint64, n uint64, access ib.AccessFlags) RegMrResp {
	t.Helper()
	out, _ := must(k.client, CmdRegMr, &RegMr{Start: addr, Length: n, Hca_va: addr, Pd_handle: pd,
		Access_flags: uint32(access)}, sizeOf[RegMrResp]())
	return load[RegMrResp](out)
}

// TestReregMRChangesAccessAndPD: REREG_MR with rxe's two cases. A region
// registered for local writes takes a peer's RDMA WRITE after a rereg of
// its access, with the keys unchanged; moved to another PD, it no longer
// answers the QP of the old one (remote access error). The kernel's
// errnos for the rest, in its order.
func TestReregMRChangesAccessAndPD(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	region := b.buf + 0x4000
	mr := b.regMR(t, b.pd, region, 0x1000, ib.AccessLocalWrite)
	out, _ := must(b.client, CmdAllocPd, &AllocPd{}, sizeOf[AllocPdResp]())
	pd2 := load[AllocPdResp](out).Handle
	rereg := func(r ReregMr) (ReregMrResp, error) {
		out, _, err := do(b.client, CmdReregMr, &r, sizeOf[ReregMrResp]())
		return load[ReregMrResp](out), err
	}
	local := uint32(ib.AccessLocalWrite)
	for _, c := range []struct {
		name  string
		req   ReregMr
		errno unix.Errno
	}{
		{"no flags", ReregMr{Mr_handle: mr.Handle}, unix.EINVAL},
		{"unknown flag before the handle", ReregMr{Mr_handle: 999, Flags: 8}, unix.EOPNOTSUPP},
		{"page offsets differ", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregTrans), Start: region, Hca_va: region + 4}, unix.EINVAL},
		{"free handle", ReregMr{Mr_handle: 999, Flags: uint32(emu.MRReregAccess), Access_flags: local}, unix.ENOENT},
		{"PD handle as MR", ReregMr{Mr_handle: b.pd, Flags: uint32(emu.MRReregAccess), Access_flags: local}, unix.EINVAL},
		{"remote write without local write", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregAccess),
			Access_flags: uint32(ib.AccessRemoteWrite)}, unix.EINVAL},
		{"access checked before the PD", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregAccess | emu.MRReregPD),
			Pd_handle: 999, Access_flags: 1 << 30}, unix.EINVAL},
		{"no such PD", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregPD), Pd_handle: 999}, unix.EINVAL},
		{"a new range: rxe has none", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregTrans),
			Start: region, Length: 0x1000, Hca_va: region}, unix.EOPNOTSUPP},
		{"zero based: rxe refuses", ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregAccess),
			Access_flags: local | uint32(ib.AccessZeroBased)}, unix.EOPNOTSUPP},
	} {
		_, err := rereg(c.req)
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		errnoIs(t, err, c.errno)
	}

	resp, err := rereg(ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregAccess),
		Access_flags: local | uint32(ib.AccessRemoteWrite)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Lkey != mr.Lkey || resp.Rkey != mr.Rkey {
		t.Fatalf("rereg answered keys %#x/%#x, registered %#x/%#x", resp.Lkey, resp.Rkey, mr.Lkey, mr.Rkey)
	}
	a.mem.WriteAt([]byte("reregistered"), a.buf)
	a.postSend(t, 1, emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 12, Lkey: a.lkey}, region, mr.Rkey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("RDMA WRITE after the access rereg: %+v", wc)
	}
	got := make([]byte, 12)
	b.mem.ReadAt(got, region)
	if !bytes.Equal(got, []byte("reregistered")) {
		t.Fatalf("region holds %q", got)
	}

	if _, err := rereg(ReregMr{Mr_handle: mr.Handle, Flags: uint32(emu.MRReregPD), Pd_handle: pd2}); err != nil {
		t.Fatal(err)
	}
	_, _, err = do(b.client, CmdDeallocPd, &DeallocPd{Handle: pd2}, 0)
	errnoIs(t, err, unix.EBUSY)
	a.postSend(t, 2, emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 12, Lkey: a.lkey}, region, mr.Rkey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCRemAccessErr) {
		t.Fatalf("RDMA WRITE into an MR of another PD than the QP's: %+v", wc)
	}
	must(b.client, CmdDeregMr, &DeregMr{Handle: mr.Handle}, 0)
	must(b.client, CmdDeallocPd, &DeallocPd{Handle: pd2}, 0)
}

// postBind writes librxe's BIND_MW WQE (ibv_bind_mw, IBV_WR_BIND_MW) on
// k's send ring and rings the doorbell.
func (k *conn) postBind(t *testing.T, id uint64, m RxeSendWrMw) {
	t.Helper()
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: id, Opcode: uint32(emu.WRBindMW), Send_flags: uint32(emu.SendSignaled)}}
	copy(w.Wr.Wr[:], bytesOf(&m))
	if !k.sq.produce(bytesOf(&w)) {
		t.Fatal("SQ full")
	}
	must(k.client, CmdPostSend, &PostSend{Qp_handle: k.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
}

// TestMemoryWindowThroughTheRing: ALLOC_MW gives a type 2 window and its
// rkey; librxe's BIND_MW WQE binds it to part of an MR (IB_WC_BIND_MW);
// a peer's RDMA WRITE through the new rkey lands in the window, one
// outside it is a remote access error; the MR cannot go while the window
// is bound (EINVAL); a WQE naming no window of the file fails with
// IB_WC_MW_BIND_ERR; DEALLOC_MW frees the MR again.
func TestMemoryWindowThroughTheRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	region := b.buf + 0x8000
	mr := b.regMR(t, b.pd, region, 0x1000, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessMWBind)
	for _, c := range []struct {
		name string
		req  AllocMw
	}{{"type 3", AllocMw{Pd_handle: b.pd, Mw_type: 3}}, {"no such PD", AllocMw{Pd_handle: 999, Mw_type: 2}}} {
		_, _, err := do(b.client, CmdAllocMw, &c.req, sizeOf[AllocMwResp]())
		errnoIs(t, err, unix.EINVAL)
	}
	out, _ := must(b.client, CmdAllocMw, &AllocMw{Pd_handle: b.pd, Mw_type: uint8(emu.MWType2)}, sizeOf[AllocMwResp]())
	mw := load[AllocMwResp](out)
	newKey := mw.Rkey&^0xFF | (mw.Rkey+1)&0xFF
	b.postBind(t, 10, RxeSendWrMw{Addr: region + 0x100, Length: 64, Mr_lkey: mr.Lkey, Mw_rkey: mw.Rkey,
		Rkey: newKey, Access: uint32(ib.AccessRemoteWrite)})
	if wc := b.cqRing.poll(t); wc.Wr_id != 10 || wc.Status != uint32(emu.WCSuccess) || wc.Opcode != uint32(emu.WCBindMW) {
		t.Fatalf("bind completion %+v", wc)
	}
	a.mem.WriteAt([]byte("window"), a.buf)
	a.postSend(t, 1, emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 6, Lkey: a.lkey}, region+0x100, newKey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("RDMA WRITE through the window: %+v", wc)
	}
	got := make([]byte, 6)
	b.mem.ReadAt(got, region+0x100)
	if string(got) != "window" {
		t.Fatalf("window holds %q", got)
	}
	_, _, err := do(b.client, CmdDeregMr, &DeregMr{Handle: mr.Handle}, 0)
	errnoIs(t, err, unix.EINVAL)
	a.postSend(t, 2, emu.WRRDMAWrite, RxeSge{Addr: a.buf, Length: 6, Lkey: a.lkey}, region+0x200, newKey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCRemAccessErr) {
		t.Fatalf("RDMA WRITE outside the window: %+v", wc)
	}
	// The access error took b's QP to ERR (rxe's responder does); a
	// second QP of b binds what names no window.
	out, _ = must(b.client, CmdCreateQp, &CreateQp{Pd_handle: b.pd, Send_cq_handle: b.cq, Recv_cq_handle: b.cq,
		Max_send_wr: 4, Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	b2 := &conn{client: b.client, qp: qr.Qp_handle, qpn: qr.Qpn, rq: b.mapQueue(mi.Rq_mi), sq: b.mapQueue(mi.Sq_mi)}
	b2.connect(t, a.qpn)
	b2.postBind(t, 11, RxeSendWrMw{Addr: region, Length: 64, Mr_lkey: mr.Lkey, Mw_rkey: 0xDEAD00, Rkey: 0xDEAD01,
		Access: uint32(ib.AccessRemoteWrite)})
	for {
		wc := b.cqRing.poll(t)
		if wc.Wr_id == 11 {
			if wc.Status != uint32(emu.WCMWBindErr) {
				t.Fatalf("bind of no window: %+v", wc)
			}
			break
		}
	}
	must(b.client, CmdDeallocMw, &DeallocMw{Handle: mw.Handle}, 0)
	_, _, err = do(b.client, CmdDeallocMw, &DeallocMw{Handle: mw.Handle}, 0)
	errnoIs(t, err, unix.ENOENT)
	must(b.client, CmdDeregMr, &DeregMr{Handle: mr.Handle}, 0)
}

// createUD creates a UD QP on k's PD and CQ and returns its handle.
func (k *conn) createUD(t testing.TB) uint32 {
	t.Helper()
	out, _ := must(k.client, CmdCreateQp, &CreateQp{Pd_handle: k.pd, Send_cq_handle: k.cq, Recv_cq_handle: k.cq,
		Max_send_wr: 4, Max_recv_wr: 4, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeUD)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	return load[CreateQpResp](out).Qp_handle
}

// TestAttachMcastFollowsTheKernel: ATTACH_MCAST of a UD QP to a group,
// twice (the second does nothing), then DETACH; DETACH of a group the QP
// is not attached to is EINVAL, an RC QP or a unicast GID is EINVAL (the
// core's checks); DESTROY_QP refuses a QP with groups (EBUSY), and a close
// detaches them.
func TestAttachMcastFollowsTheKernel(t *testing.T) {
	dev := newDevice(t)
	k := setup(t, newClient(t, dev))
	ud := k.createUD(t)
	group := func(s string) [16]uint8 { return netip.MustParseAddr(s).As16() }
	g1, g2 := group("ff0e::1"), group("ff0e::2")
	for _, c := range []struct {
		name  string
		cmd   uint32
		req   AttachMcast
		errno unix.Errno
	}{
		{"attach", CmdAttachMcast, AttachMcast{Gid: g1, Handle: ud}, 0},
		{"attach again", CmdAttachMcast, AttachMcast{Gid: g1, Handle: ud}, 0},
		{"detach a group not attached", CmdDetachMcast, AttachMcast{Gid: g2, Handle: ud}, unix.EINVAL},
		{"attach an RC QP", CmdAttachMcast, AttachMcast{Gid: g2, Handle: k.qp}, unix.EINVAL},
		{"attach a unicast GID", CmdAttachMcast, AttachMcast{Gid: group("10.0.0.9"), Handle: ud}, unix.EINVAL},
		{"attach a CQ's handle", CmdAttachMcast, AttachMcast{Gid: g2, Handle: k.cq}, unix.EINVAL},
		{"attach a second group", CmdAttachMcast, AttachMcast{Gid: g2, Handle: ud}, 0},
		{"detach", CmdDetachMcast, AttachMcast{Gid: g1, Handle: ud}, 0},
		{"detach again", CmdDetachMcast, AttachMcast{Gid: g1, Handle: ud}, unix.EINVAL},
	} {
		_, _, err := do(k.client, c.cmd, &c.req, 0)
		if c.errno == 0 {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		errnoIs(t, err, c.errno)
	}
	_, _, err := do(k.client, CmdDestroyQp, &DestroyQp{Handle: ud}, sizeOf[DestroyQpResp]())
	errnoIs(t, err, unix.EBUSY)
	if err := k.f.Close(); err != nil {
		t.Fatalf("close with an attached QP: %v", err)
	}
	if len(k.f.objects) != 0 {
		t.Fatalf("%d objects after close", len(k.f.objects))
	}
}

// TestCloseFreesAQPJoinedUnderTwoLIDs: a UD QP attached to one GID under
// two LIDs is one member to rxe (it ignores the LID), so detaching both
// leaves the second EINVAL and the attachment counted: DESTROY_QP is EBUSY
// then, as on the kernel. The file's close still frees the QP and the rest
// (the kernel leaks it with a warning; a daemon's client must not).
func TestCloseFreesAQPJoinedUnderTwoLIDs(t *testing.T) {
	dev := newDevice(t)
	k := setup(t, newClient(t, dev))
	ud := k.createUD(t)
	g := netip.MustParseAddr("ff0e::1").As16()
	must(k.client, CmdAttachMcast, &AttachMcast{Gid: g, Handle: ud, Mlid: 0xc001}, 0)
	must(k.client, CmdAttachMcast, &AttachMcast{Gid: g, Handle: ud, Mlid: 0xc002}, 0)
	must(k.client, CmdDetachMcast, &DetachMcast{Gid: g, Handle: ud, Mlid: 0xc001}, 0)
	_, _, err := do(k.client, CmdDetachMcast, &DetachMcast{Gid: g, Handle: ud, Mlid: 0xc002}, 0)
	errnoIs(t, err, unix.EINVAL)
	_, _, err = do(k.client, CmdDestroyQp, &DestroyQp{Handle: ud}, sizeOf[DestroyQpResp]())
	errnoIs(t, err, unix.EBUSY)
	if err := k.f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if len(k.f.objects) != 0 {
		t.Fatalf("%d objects after close", len(k.f.objects))
	}
}
