//go:build linux

package uverbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/softroce/softroce/ib"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// conn is one client's verbs objects for an RC connection.
type conn struct {
	*client
	pd, mr, cq, qp uint32
	lkey, rkey     uint32
	qpn            uint32
	buf            uint64 // the registered buffer
	sq, rq, cqRing ring
	asyncFd        PassFile // GET_CONTEXT's async event file
}

const bufOff = 0x1000

// setup opens a context, a PD, an MR over 64 KiB of the client's memory,
// a CQ and an RC QP, as ibv_rc_pingpong does.
func setup(t testing.TB, c *client) *conn {
	t.Helper()
	k := &conn{client: c, buf: clientBase + bufOff}
	out, r := must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	if len(r.Files) != 1 || r.Files[0].At != c.resp {
		t.Fatalf("GET_CONTEXT files %+v", r.Files)
	}
	k.asyncFd = r.Files[0]
	if load[GetContextResp](out).Num_comp_vectors == 0 {
		t.Fatal("no completion vectors")
	}
	out, _ = must(c, CmdAllocPd, &AllocPd{}, sizeOf[AllocPdResp]())
	k.pd = load[AllocPdResp](out).Handle
	out, _ = must(c, CmdRegMr, &RegMr{Start: k.buf, Length: 0x10000, Hca_va: k.buf, Pd_handle: k.pd,
		Access_flags: uint32(ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic)}, sizeOf[RegMrResp]())
	mr := load[RegMrResp](out)
	k.mr, k.lkey, k.rkey = mr.Handle, mr.Lkey, mr.Rkey
	out, _ = must(c, CmdCreateCq, &CreateCq{Cqe: 16, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	k.cq = load[CreateCqResp](out).Handle
	k.cqRing = c.mapQueue(load[RxeCreateCqResp](out[sizeOf[CreateCqResp]():]).Mi)
	out, _ = must(c, CmdCreateQp, &CreateQp{Pd_handle: k.pd, Send_cq_handle: k.cq, Recv_cq_handle: k.cq,
		Max_send_wr: 16, Max_recv_wr: 16, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	k.qp, k.qpn = qr.Qp_handle, qr.Qpn
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	k.rq, k.sq = c.mapQueue(mi.Rq_mi), c.mapQueue(mi.Sq_mi)
	return k
}

// connect walks k's QP to RTS towards peer's QPN on the device's own GID.
func (k *conn) connect(t testing.TB, peer uint32) {
	t.Helper()
	k.connectWith(t, peer, 14, 7)
}

// connectWith is connect with the local ACK timeout code and retry count.
func (k *conn) connectWith(t testing.TB, peer uint32, timeout, retry uint8) {
	t.Helper()
	m := ModifyQp{Qp_handle: k.qp, Qp_state: uint8(qpstate.StateInit), Port_num: 1,
		Qp_access_flags: uint32(ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic),
		Attr_mask:       uint32(qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrAccessFlags)}
	must(k.client, CmdModifyQp, &m, 0)
	m = ModifyQp{Qp_handle: k.qp, Qp_state: uint8(qpstate.StateRTR), Path_mtu: uint8(ib.MTU1024),
		Dest_qp_num: peer, Max_dest_rd_atomic: 1, Min_rnr_timer: 12,
		Dest: QpDest{Dgid: emu.GIDFromAddr(testIP), Sgid_index: 1, Hop_limit: 64, Is_global: 1, Port_num: 1},
		Attr_mask: uint32(qpstate.AttrState | qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN |
			qpstate.AttrRQPSN | qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer)}
	must(k.client, CmdModifyQp, &m, 0)
	m = ModifyQp{Qp_handle: k.qp, Qp_state: uint8(qpstate.StateRTS), Timeout: timeout, Retry_cnt: retry, Rnr_retry: 7,
		Max_rd_atomic: 1, Attr_mask: uint32(qpstate.AttrState | qpstate.AttrSQPSN | qpstate.AttrTimeout |
			qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic)}
	must(k.client, CmdModifyQp, &m, 0)
}

// postRecv writes a receive WQE on the RQ ring (librxe: no doorbell).
func (k *conn) postRecv(t testing.TB, id, addr uint64, n uint32) {
	t.Helper()
	w := RxeRecvWqe{Id: id, Dma: RxeDmaInfo{Length: n, Resid: n, Num_sge: 1}}
	sge := RxeSge{Addr: addr, Length: n, Lkey: k.lkey}
	if !k.rq.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
		t.Fatal("RQ full")
	}
}

// postSend writes a send WQE on the SQ ring and rings the doorbell
// (librxe's post_send_db: a POST_SEND with no WRs).
func (k *conn) postSend(t testing.TB, id uint64, op emu.WROpcode, sge RxeSge, raddr uint64, rkey uint32) {
	t.Helper()
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: id, Opcode: uint32(op), Send_flags: uint32(emu.SendSignaled)},
		Dma: RxeDmaInfo{Length: sge.Length, Resid: sge.Length, Num_sge: 1}}
	rd := RxeSendWrRdma{Addr: raddr, Rkey: rkey}
	copy(w.Wr.Wr[:], bytesOf(&rd))
	if !k.sq.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
		t.Fatal("SQ full")
	}
	must(k.client, CmdPostSend, &PostSend{Qp_handle: k.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
}

func TestRCSendAndWriteBetweenTwoClients(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)

	msg := []byte("hello over the rxe rings")
	a.mem.WriteAt(msg, a.buf)
	b.postRecv(t, 7, b.buf+0x100, 256)
	a.postSend(t, 1, emu.WRSend, RxeSge{Addr: a.buf, Length: uint32(len(msg)), Lkey: a.lkey}, 0, 0)

	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != 1 || wc.Opcode != uint32(emu.WCSend) || wc.Qp_num != a.qpn {
		t.Fatalf("send completion %+v", wc)
	}
	wc := b.cqRing.poll(t)
	if wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != 7 || wc.Opcode != uint32(emu.WCRecv) || wc.Byte_len != uint32(len(msg)) {
		t.Fatalf("receive completion %+v", wc)
	}
	got := make([]byte, len(msg))
	b.mem.ReadAt(got, b.buf+0x100)
	if !bytes.Equal(got, msg) {
		t.Fatalf("received %q", got)
	}

	// RDMA WRITE of 5000 bytes (several packets) into b's MR.
	data := make([]byte, 5000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	a.mem.WriteAt(data, a.buf+0x2000)
	a.postSend(t, 2, emu.WRRDMAWrite, RxeSge{Addr: a.buf + 0x2000, Length: 5000, Lkey: a.lkey}, b.buf+0x4000, b.rkey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != 2 || wc.Opcode != uint32(emu.WCRDMAWrite) {
		t.Fatalf("write completion %+v", wc)
	}
	got = make([]byte, len(data))
	b.mem.ReadAt(got, b.buf+0x4000)
	if !bytes.Equal(got, data) {
		t.Fatal("RDMA WRITE data differs")
	}
	if !b.cqRing.empty() {
		t.Fatal("an RDMA WRITE completed on the target")
	}
}

func TestHandleOfAnotherFileIsRefused(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), newClient(t, dev)
	must(b, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	// b has no objects: a's handles name nothing in b's table.
	_, _, err := do(b, CmdDeallocPd, &DeallocPd{Handle: a.pd}, 0)
	errnoIs(t, err, unix.ENOENT)
	_, _, err = do(b, CmdCreateCq, &CreateCq{Cqe: 4, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	if err != nil {
		t.Fatal(err)
	}
	// Using a's QP handle in b: b's handle 0 is its CQ, a QP handle that
	// is b's CQ is the wrong type (EINVAL); a's QP handle number names
	// nothing in b for a query (EINVAL as uobj_get_obj_read fails).
	_, _, err = do(b, CmdQueryQp, &QueryQp{Qp_handle: a.qp}, sizeOf[QueryQpResp]())
	errnoIs(t, err, unix.EINVAL)
	_, _, err = do(b, CmdDestroyQp, &DestroyQp{Handle: 0}, sizeOf[DestroyQpResp]())
	errnoIs(t, err, unix.EINVAL)
	// a's objects are untouched.
	if _, _, err := do(a.client, CmdQueryQp, &QueryQp{Qp_handle: a.qp}, sizeOf[QueryQpResp]()); err != nil {
		t.Fatal(err)
	}
	// A destroyed handle is gone.
	must(a.client, CmdDeregMr, &DeregMr{Handle: a.mr}, 0)
	_, _, err = do(a.client, CmdDeregMr, &DeregMr{Handle: a.mr}, 0)
	errnoIs(t, err, unix.ENOENT)
}

func TestForeignLKeyFailsTheWQE(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	// a names b's lkey: an MR of another PD (and another process).
	a.postSend(t, 9, emu.WRRDMAWrite, RxeSge{Addr: b.buf, Length: 64, Lkey: b.lkey}, b.buf+0x100, b.rkey)
	wc := a.cqRing.poll(t)
	if wc.Wr_id != 9 || wc.Status == uint32(emu.WCSuccess) {
		t.Fatalf("completion %+v, want an error", wc)
	}
	// rxe_req.c: copy_data's lookup_mr finds no MR of the QP's PD for the
	// lkey (-EINVAL), which finish_packet's caller completes as
	// IB_WC_LOC_QP_OP_ERR (only -EFAULT, a fault inside a found MR, is
	// IB_WC_LOC_PROT_ERR).
	if wc.Status != uint32(emu.WCLocQPOpErr) {
		t.Fatalf("status %v, want IB_WC_LOC_QP_OP_ERR", emu.WCStatus(wc.Status))
	}
	// b's memory is untouched.
	got := make([]byte, 64)
	b.mem.ReadAt(got, b.buf+0x100)
	if !bytes.Equal(got, make([]byte, 64)) {
		t.Fatal("the foreign WQE wrote into the peer's MR")
	}
}

func TestCloseTearsDownEverything(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connectWith(t, a.qpn, 10, 1) // 4 ms local ACK timeout, one retry
	if err := a.f.Close(); err != nil {
		t.Fatal(err)
	}
	if len(a.f.objects) != 0 || len(a.f.mmaps) != 0 {
		t.Fatalf("after close: %d objects, %d queues", len(a.f.objects), len(a.f.mmaps))
	}
	if _, err := a.f.Write(legacy(CmdAllocPd, make([]byte, 8), nil, 4)); err == nil {
		t.Fatal("a command after close succeeded")
	}
	// The peer's SEND to the vanished QP is never acknowledged (rxe drops
	// packets for a QPN that does not exist): its retries run out.
	b.mem.WriteAt([]byte("x"), b.buf)
	b.postSend(t, 3, emu.WRSend, RxeSge{Addr: b.buf, Length: 1, Lkey: b.lkey}, 0, 0)
	if wc := b.cqRing.poll(t); wc.Wr_id != 3 || wc.Status != uint32(emu.WCRetryExcErr) {
		t.Fatalf("send to a destroyed QP: %+v, want IB_WC_RETRY_EXC_ERR", wc)
	}
}

func TestCommandHeaderChecks(t *testing.T) {
	dev := newDevice(t)
	c := newClient(t, dev)
	cases := []struct {
		name string
		buf  []byte
		want unix.Errno
	}{
		{"short write", []byte{1, 2, 3}, unix.EINVAL},
		{"unknown flag bits", legacy(0x100|CmdAllocPd, make([]byte, 8), nil, 4), unix.EINVAL},
		{"command past the table", legacy(200, make([]byte, 8), nil, 4), unix.EOPNOTSUPP},
		{"known but not served", legacy(CmdPollCq, make([]byte, 16), nil, 8), unix.EOPNOTSUPP},
		{"in_words disagree", func() []byte { b := legacy(CmdAllocPd, make([]byte, 8), nil, 4); b[4]++; return b }(), unix.EINVAL},
		{"request too short", legacy(CmdCreateCq, make([]byte, 8), nil, 8), unix.ENOSPC},
		{"response room too small", legacy(CmdAllocPd, make([]byte, 8), nil, 0), unix.ENOSPC},
		// rdma-core v18/v19's 16-byte DESTROY_CQ passes the header check
		// (and then needs a context like any other command).
		{"short DESTROY_CQ of rdma-core v18", legacy(CmdDestroyCq, make([]byte, 8), nil, 8), unix.EINVAL},
		{"short DESTROY_QP", legacy(CmdDestroyQp, make([]byte, 8), nil, 4), unix.ENOSPC},
		{"no context yet", legacy(CmdAllocPd, make([]byte, 8), nil, 4), unix.EINVAL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.f.Write(tc.buf)
			errnoIs(t, err, tc.want)
		})
	}
	// An unwritable response pointer is EFAULT.
	req := GetContext{Response: 0x10}
	_, err := c.f.Write(legacy(CmdGetContext, bytesOf(&req), nil, sizeOf[GetContextResp]()))
	errnoIs(t, err, unix.EFAULT)
	must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	_, _, err = do(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	errnoIs(t, err, unix.EINVAL)

	// Extended header checks.
	ex := func(inWords, outWords, pin, pout uint16, resp uint64, reserved uint32, body int) []byte {
		h := CmdHdr{Command: CmdFlagExtended | ExCmdQueryDevice, In_words: inWords, Out_words: outWords}
		e := ExCmdHdr{Response: resp, Provider_in_words: pin, Provider_out_words: pout, Cmd_hdr_reserved: reserved}
		return append(append(append([]byte(nil), bytesOf(&h)...), bytesOf(&e)...), make([]byte, body)...)
	}
	resp := c.resp
	for _, tc := range []struct {
		name string
		buf  []byte
		want unix.Errno
	}{
		{"ex words disagree", ex(2, 24, 0, 0, resp, 0, 8), unix.EINVAL},
		{"ex reserved", ex(1, 24, 0, 0, resp, 1, 8), unix.EINVAL},
		{"ex response room too small", ex(1, 2, 0, 0, resp, 0, 8), unix.ENOSPC},
		{"ex room without pointer", ex(1, 24, 0, 0, 0, 0, 8), unix.EINVAL},
		{"ex pointer without room", ex(1, 0, 0, 0, resp, 0, 8), unix.EINVAL},
		{"ex short", ex(1, 24, 0, 0, resp, 0, 8)[:20], unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.f.Write(tc.buf)
			errnoIs(t, err, tc.want)
		})
	}
	r, err := c.f.Write(ex(1, 24, 0, 0, resp, 0, 8))
	if err != nil || r.N != 8+16+8 {
		t.Fatalf("EX_QUERY_DEVICE: %v %+v", err, r)
	}
	out := make([]byte, sizeOf[ExQueryDeviceResp]())
	c.mem.ReadAt(out, resp)
	e := load[ExQueryDeviceResp](out)
	if e.Response_length != uint32(min(24*8, sizeOf[ExQueryDeviceResp]())) || e.Base.Max_qp == 0 || e.Base.Phys_port_cnt != 1 {
		t.Fatalf("EX_QUERY_DEVICE response %+v", e)
	}
	if got := binary.BigEndian.Uint64(bytesOf(&e.Base.Node_guid)); got != dev.Query().NodeGUID {
		t.Fatalf("node_guid %#x, device %#x", got, dev.Query().NodeGUID)
	}
	// rxe 7.3's ODP caps (ib_uverbs_ex_query_device copies attr.odp_caps
	// and xrc_odp_caps), in a response with room for all of it.
	words := uint16(sizeOf[ExQueryDeviceResp]() / 8)
	if _, err := c.f.Write(ex(1, words, 0, 0, resp, 0, 8)); err != nil {
		t.Fatalf("EX_QUERY_DEVICE of %d words: %v", words, err)
	}
	c.mem.ReadAt(out, resp)
	e = load[ExQueryDeviceResp](out)
	o := e.Odp_caps
	if o.General_caps != 1 || o.Per_transport_caps != (OdpPerTransportCaps{Rc_odp_caps: 0xFF, Ud_odp_caps: 0x23}) || e.Xrc_odp_caps != 0 {
		t.Errorf("EX_QUERY_DEVICE odp_caps %+v xrc %#x", o, e.Xrc_odp_caps)
	}
}

func TestQueryDeviceAndPortAsIbvDevinfo(t *testing.T) {
	dev := newDevice(t)
	c := newClient(t, dev)
	must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	out, _ := must(c, CmdQueryDevice, &QueryDevice{}, sizeOf[QueryDeviceResp]())
	d := load[QueryDeviceResp](out)
	a := dev.Query()
	if d.Max_qp != uint32(a.MaxQP) || d.Max_cqe != uint32(a.MaxCQE) || d.Vendor_id != a.VendorID || d.Phys_port_cnt != 1 ||
		d.Max_sge != uint32(min(a.MaxSendSGE, a.MaxRecvSGE)) || d.Atomic_cap != uint32(a.AtomicCap) {
		t.Fatalf("QUERY_DEVICE %+v for %+v", d, a)
	}
	out, _ = must(c, CmdQueryPort, &QueryPort{Num: 1}, sizeOf[QueryPortResp]())
	p := load[QueryPortResp](out)
	pa, _ := dev.QueryPort(1)
	if p.State != uint8(emu.PortActive) || p.Link_layer != uint8(emu.LinkLayerEthernet) || p.Flags&pqfGRHRequired == 0 ||
		p.Gid_tbl_len != uint32(pa.GIDTblLen) || p.Active_mtu != uint8(pa.ActiveMTU) || p.Port_cap_flags != pa.PortCapFlags {
		t.Fatalf("QUERY_PORT %+v for %+v", p, pa)
	}
	_, _, err := do(c, CmdQueryPort, &QueryPort{Num: 2}, sizeOf[QueryPortResp]())
	errnoIs(t, err, unix.EINVAL)
	// A command without driver data clears the response room past its
	// structure (uverbs_response); one with driver data leaves that room
	// to the driver.
	n := sizeOf[CreateCompChannelResp]()
	c.mem.WriteAt(bytes.Repeat([]byte{0xEE}, 64), c.resp+uint64(n))
	out, _ = must(c, CmdCreateCompChannel, &CreateCompChannel{}, n+60)
	if !bytes.Equal(out[n:], make([]byte, 60)) {
		t.Fatal("the rest of the response room was not cleared")
	}
	c.mem.WriteAt(bytes.Repeat([]byte{0xEE}, 64), c.resp+uint64(sizeOf[QueryPortResp]()))
	out, _ = must(c, CmdQueryPort, &QueryPort{Num: 1}, sizeOf[QueryPortResp]()+64)
	if !bytes.Equal(out[sizeOf[QueryPortResp]():], bytes.Repeat([]byte{0xEE}, 64)) {
		t.Fatal("QUERY_PORT wrote into the driver's response room")
	}
}

func TestRCReadAndAtomicReachClientMemory(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	src := bytes.Repeat([]byte("remote!"), 300)
	b.mem.WriteAt(src, b.buf+0x3000)
	a.postSend(t, 1, emu.WRRDMARead, RxeSge{Addr: a.buf + 0x5000, Length: uint32(len(src)), Lkey: a.lkey}, b.buf+0x3000, b.rkey)
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Opcode != uint32(emu.WCRDMARead) || wc.Byte_len != uint32(len(src)) {
		t.Fatalf("read completion %+v", wc)
	}
	got := make([]byte, len(src))
	a.mem.ReadAt(got, a.buf+0x5000)
	if !bytes.Equal(got, src) {
		t.Fatal("RDMA READ data differs")
	}
	// FETCH_AND_ADD on a counter in b's memory; the old value lands in a's.
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], 40)
	b.mem.WriteAt(v[:], b.buf+0x8000)
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 2, Opcode: uint32(emu.WRAtomicFetchAndAdd), Send_flags: uint32(emu.SendSignaled)},
		Dma: RxeDmaInfo{Length: 8, Resid: 8, Num_sge: 1}}
	at := RxeSendWrAtomic{Remote_addr: b.buf + 0x8000, Compare_add: 2, Rkey: b.rkey}
	copy(w.Wr.Wr[:], bytesOf(&at))
	sge := RxeSge{Addr: a.buf + 0x9000, Length: 8, Lkey: a.lkey}
	a.sq.produce(append(bytesOf(&w), bytesOf(&sge)...))
	must(a.client, CmdPostSend, &PostSend{Qp_handle: a.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Opcode != uint32(emu.WCFetchAdd) {
		t.Fatalf("atomic completion %+v", wc)
	}
	a.mem.ReadAt(v[:], a.buf+0x9000)
	if old := binary.NativeEndian.Uint64(v[:]); old != 40 {
		t.Fatalf("fetched %d, want 40", old)
	}
	b.mem.ReadAt(v[:], b.buf+0x8000)
	if now := binary.NativeEndian.Uint64(v[:]); now != 42 {
		t.Fatalf("counter %d, want 42", now)
	}
}

// BenchmarkDoorbellToCQE measures the path of one 64-byte RC WRITE of a
// uverbs client: WQE on the send ring, the POST_SEND doorbell, the
// transfer over the loopback link into the peer client's memory, the
// CQE on the ring.
//
// The device's goroutines do the work (the link's reader, the worker):
// "worker"; or the device loops its own frames back (rxe.Config.Loopback)
// and the doorbell runs in rxe.Device.Settle, as the daemon runs every
// command, so the CQE is in the ring when the doorbell returns: "settled".
func BenchmarkDoorbellToCQE(b *testing.B) {
	for _, settled := range []bool{false, true} {
		name := "worker"
		if settled {
			name = "settled"
		}
		b.Run(name, func(b *testing.B) {
			rd := newRxeDevice(b, settled)
			dev := rd.Device
			x, y := setup(b, newClient(b, dev)), setup(b, newClient(b, dev))
			x.connect(b, y.qpn)
			y.connect(b, x.qpn)
			b.ReportAllocs()
			b.SetBytes(64)
			for i := 0; b.Loop(); i++ {
				rd.Settle(func() {
					x.postSend(b, uint64(i), emu.WRRDMAWrite, RxeSge{Addr: x.buf, Length: 64, Lkey: x.lkey}, y.buf, y.rkey)
				})
				if settled && x.cqRing.empty() {
					b.Fatal("the doorbell returned before its completion")
				}
				if wc := x.cqRing.poll(b); wc.Status != uint32(emu.WCSuccess) {
					b.Fatalf("completion %+v", wc)
				}
			}
		})
	}
}

// TestPostSendSettlesBeforeItsResponse checks that with SetSettle the
// POST_SEND doorbell's work is done (here: the WRITE's own completion,
// after the loopback ACK) before the command writes its response, as
// rxe_post_send runs the requester before ib_uverbs_post_send copies it.
func TestPostSendSettlesBeforeItsResponse(t *testing.T) {
	rd := newRxeDevice(t, true)
	x, y := setup(t, newClient(t, rd.Device)), setup(t, newClient(t, rd.Device))
	x.connect(t, y.qpn)
	y.connect(t, x.qpn)
	x.client.f.SetSettle(rd.Settle)
	responded, done := false, false
	x.client.mem.onWrite = func(addr uint64) {
		if addr == x.client.resp && !responded {
			responded, done = true, !x.cqRing.empty()
		}
	}
	x.postSend(t, 7, emu.WRRDMAWrite, RxeSge{Addr: x.buf, Length: 64, Lkey: x.lkey}, y.buf, y.rkey)
	if !responded || !done {
		t.Fatalf("POST_SEND response written %v, with the completion in the ring %v", responded, done)
	}
	if wc := x.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != 7 {
		t.Fatalf("completion %+v", wc)
	}
}

func TestWriteWithImmediateKeepsTheWireBytes(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	b.postRecv(t, 4, b.buf, 16)
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: 1, Opcode: uint32(emu.WRRDMAWriteWithImm), Send_flags: uint32(emu.SendSignaled)},
		Dma: RxeDmaInfo{Length: 8, Resid: 8, Num_sge: 1}}
	w.Wr.Ex = [4]byte{0x12, 0x34, 0x56, 0x78} // htonl(0x12345678), as the application stores it
	rd := RxeSendWrRdma{Addr: b.buf + 0x100, Rkey: b.rkey}
	copy(w.Wr.Wr[:], bytesOf(&rd))
	sge := RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}
	a.sq.produce(append(bytesOf(&w), bytesOf(&sge)...))
	must(a.client, CmdPostSend, &PostSend{Qp_handle: a.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	a.cqRing.poll(t)
	wc := b.cqRing.poll(t)
	if wc.Opcode != uint32(emu.WCRecvRDMAWithImm) || wc.Wc_flags != uint32(emu.WCGRH|emu.WCWithImm) || wc.Ex != w.Wr.Ex {
		t.Fatalf("completion %+v, want RECV_RDMA_WITH_IMM, GRH|WITH_IMM and imm bytes %x", wc, w.Wr.Ex)
	}
}

func TestModifyQPAttrMaskBeyondTheABI(t *testing.T) {
	dev := newDevice(t)
	k := setup(t, newClient(t, dev))
	// IB_QP_RATE_LIMIT is for the extended command only.
	_, _, err := do(k.client, CmdModifyQp, &ModifyQp{Qp_handle: k.qp, Attr_mask: uint32(qpstate.AttrRateLimit)}, 0)
	errnoIs(t, err, unix.EOPNOTSUPP)
	// An illegal transition is the state machine's EINVAL.
	_, _, err = do(k.client, CmdModifyQp, &ModifyQp{Qp_handle: k.qp, Qp_state: uint8(qpstate.StateRTS),
		Attr_mask: uint32(qpstate.AttrState)}, 0)
	errnoIs(t, err, unix.EINVAL)
	// The reserved bits are refused by the extended command too.
	h := CmdHdr{Command: CmdFlagExtended | ExCmdModifyQp, In_words: uint16(sizeOf[ExModifyQp]() / 8),
		Out_words: uint16(sizeOf[ExModifyQpResp]() / 8)}
	e := ExCmdHdr{Response: k.resp}
	cmd := ExModifyQp{Base: ModifyQp{Qp_handle: k.qp, Attr_mask: uint32(qpstate.AttrReserved1)}}
	_, err = k.f.Write(append(append(append([]byte(nil), bytesOf(&h)...), bytesOf(&e)...), bytesOf(&cmd)...))
	errnoIs(t, err, unix.EOPNOTSUPP)
	// A proper extended modify to INIT answers with its response length.
	cmd.Base = ModifyQp{Qp_handle: k.qp, Qp_state: uint8(qpstate.StateInit), Port_num: 1,
		Attr_mask: uint32(qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrAccessFlags)}
	if _, err := k.f.Write(append(append(append([]byte(nil), bytesOf(&h)...), bytesOf(&e)...), bytesOf(&cmd)...)); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, sizeOf[ExModifyQpResp]())
	k.mem.ReadAt(out, k.resp)
	if r := load[ExModifyQpResp](out); r.Response_length != uint32(sizeOf[ExModifyQpResp]()) {
		t.Fatalf("EX_MODIFY_QP response %+v", r)
	}
	out, _ = must(k.client, CmdQueryQp, &QueryQp{Qp_handle: k.qp, Attr_mask: uint32(qpstate.AttrState)}, sizeOf[QueryQpResp]())
	if st := load[QueryQpResp](out).Qp_state; st != uint8(qpstate.StateInit) {
		t.Fatalf("state %d after EX_MODIFY_QP to INIT", st)
	}
}

func TestCreateQPTypesOfUsers(t *testing.T) {
	dev := newDevice(t)
	k := setup(t, newClient(t, dev))
	for _, tc := range []struct {
		typ  qpstate.Type
		want unix.Errno
	}{
		{qpstate.TypeGSI, unix.EINVAL},
		{qpstate.TypeSMI, unix.EINVAL},
		{qpstate.TypeRawPacket, unix.EPERM},
		{qpstate.TypeXRCIni, unix.EOPNOTSUPP}, // passes the core, rxe refuses the type
	} {
		_, _, err := do(k.client, CmdCreateQp, &CreateQp{Pd_handle: k.pd, Send_cq_handle: k.cq, Recv_cq_handle: k.cq,
			Max_send_wr: 1, Max_recv_wr: 1, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(tc.typ)},
			sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
		if !errors.Is(err, tc.want) {
			t.Errorf("create %v QP: %v, want %v", tc.typ, err, tc.want)
		}
	}
}

func TestUserPDHasNoDMAKey(t *testing.T) {
	dev := newDevice(t)
	k := setup(t, newClient(t, dev))
	pd := k.f.objects[k.pd].pd
	if pd.LocalDMALKey != 0 || pd.UnsafeGlobalRKey != 0 {
		t.Fatalf("a user PD has DMA keys %#x/%#x: they would reach the device's memory", pd.LocalDMALKey, pd.UnsafeGlobalRKey)
	}
}

func TestCloseReleasesDescriptors(t *testing.T) {
	dev := newDevice(t)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	before := count()
	for range 20 {
		c := newClient(t, dev)
		k := setup(t, c)
		must(c, CmdCreateCompChannel, &CreateCompChannel{}, sizeOf[CreateCompChannelResp]())
		k.connect(t, k.qpn)
		c.f.Close()
	}
	// The client-side mappings the test made stay until its cleanup; the
	// File's memfds, sockets and mappings are gone.
	if after := count(); after > before {
		t.Fatalf("%d descriptors open after 20 clients came and went, %d before", after, before)
	}
}

func TestHostileRingIndicesStayInTheRing(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	// Indices far outside the ring: the device masks them, as rxe does.
	atomic.StoreUint32(a.sq.word(qbProducer), 0xFFFFFFF3)
	atomic.StoreUint32(a.cqRing.word(qbConsumer), 0x7FFFFFFF)
	atomic.StoreUint32(a.rq.word(qbProducer), 0xFFFFFFFF)
	must(a.client, CmdPostSend, &PostSend{Qp_handle: a.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	// Another pair on the device, well behaved, still gets its transfer
	// through with its data intact.
	c, d := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	c.connect(t, d.qpn)
	d.connect(t, c.qpn)
	c.mem.WriteAt([]byte("intact"), c.buf)
	c.postSend(t, 2, emu.WRRDMAWrite, RxeSge{Addr: c.buf, Length: 6, Lkey: c.lkey}, d.buf+0x200, d.rkey)
	if wc := c.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("the well-behaved client's WRITE: %+v", wc)
	}
	got := make([]byte, 6)
	d.mem.ReadAt(got, d.buf+0x200)
	if string(got) != "intact" {
		t.Fatalf("got %q", got)
	}
}

func TestOneDoorbellPostsEveryWaitingWQE(t *testing.T) {
	dev := newDevice(t)
	cs := []*client{newClient(t, dev), newClient(t, dev)}
	var k [2]*conn
	for i, c := range cs {
		k[i] = &conn{client: c, buf: clientBase + bufOff}
		must(c, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
		out, _ := must(c, CmdAllocPd, &AllocPd{}, sizeOf[AllocPdResp]())
		k[i].pd = load[AllocPdResp](out).Handle
		out, _ = must(c, CmdRegMr, &RegMr{Start: k[i].buf, Length: 0x10000, Hca_va: k[i].buf, Pd_handle: k[i].pd,
			Access_flags: uint32(ib.AccessLocalWrite)}, sizeOf[RegMrResp]())
		k[i].lkey = load[RegMrResp](out).Lkey
		out, _ = must(c, CmdCreateCq, &CreateCq{Cqe: 64, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
		k[i].cq = load[CreateCqResp](out).Handle
		k[i].cqRing = c.mapQueue(load[RxeCreateCqResp](out[sizeOf[CreateCqResp]():]).Mi)
		out, _ = must(c, CmdCreateQp, &CreateQp{Pd_handle: k[i].pd, Send_cq_handle: k[i].cq, Recv_cq_handle: k[i].cq,
			Max_send_wr: 32, Max_recv_wr: 32, Max_send_sge: 1, Max_recv_sge: 1, Max_inline_data: 32, Qp_type: uint8(qpstate.TypeRC)},
			sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
		qr := load[CreateQpResp](out)
		k[i].qp, k[i].qpn = qr.Qp_handle, qr.Qpn
		mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
		k[i].rq, k[i].sq = c.mapQueue(mi.Rq_mi), c.mapQueue(mi.Sq_mi)
	}
	k[0].connect(t, k[1].qpn)
	k[1].connect(t, k[0].qpn)
	const n = 20 // more than one doorbell batch
	for i := range n {
		k[1].postRecv(t, uint64(i), k[1].buf+uint64(i)*64, 64)
	}
	// n inline SENDs with different data on the ring, then one doorbell.
	for i := range n {
		msg := fmt.Appendf(nil, "message %02d", i)
		w := RxeSendWqe{Wr: RxeSendWr{Wr_id: uint64(i), Opcode: uint32(emu.WRSend), Send_flags: uint32(emu.SendSignaled | emu.SendInline)},
			Dma: RxeDmaInfo{Length: uint32(len(msg)), Resid: uint32(len(msg))}}
		if !k[0].sq.produce(append(bytesOf(&w), msg...)) {
			t.Fatal("SQ full")
		}
	}
	must(cs[0], CmdPostSend, &PostSend{Qp_handle: k[0].qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	for i := range n {
		if wc := k[1].cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != uint64(i) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		got := make([]byte, 10)
		cs[1].mem.ReadAt(got, k[1].buf+uint64(i)*64)
		if want := fmt.Sprintf("message %02d", i); string(got) != want {
			t.Fatalf("receive %d holds %q, want %q", i, got, want)
		}
	}
	for range n {
		if wc := k[0].cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) {
			t.Fatalf("send completion %+v", wc)
		}
	}
}

func TestDoorbellWaitsForRoomInTheDevice(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	a.connect(t, b.qpn)
	b.connect(t, a.qpn)
	// The client keeps its ring full, as perftest does: the device's send
	// queue is as deep as the ring, so WQEs wait on the ring until
	// completions make room, and the doorbell after a completion takes
	// them.
	depth := int(a.sq.mask())
	total, sent, done := 3*depth, 0, 0
	for done < total {
		for sent < total && sent-done < int(a.cqRing.mask()) {
			w := RxeSendWqe{Wr: RxeSendWr{Wr_id: uint64(sent), Opcode: uint32(emu.WRRDMAWrite), Send_flags: uint32(emu.SendSignaled)},
				Dma: RxeDmaInfo{Length: 8, Resid: 8, Num_sge: 1}}
			rd := RxeSendWrRdma{Addr: b.buf, Rkey: b.rkey}
			copy(w.Wr.Wr[:], bytesOf(&rd))
			sge := RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}
			if !a.sq.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
				break
			}
			sent++
		}
		must(a.client, CmdPostSend, &PostSend{Qp_handle: a.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
		if wc := a.cqRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != uint64(done) {
			t.Fatalf("completion %d: %+v", done, wc)
		}
		done++
	}
}

func TestStalledDoorbellResumesOnCompletions(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	// a second QP of a's with a CQ deep enough for two rings' worth.
	out, _ := must(a.client, CmdCreateCq, &CreateCq{Cqe: 256, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	big := load[CreateCqResp](out).Handle
	bigRing := ring(a.client.mapQueue(load[RxeCreateCqResp](out[sizeOf[CreateCqResp]():]).Mi))
	out, _ = must(a.client, CmdCreateQp, &CreateQp{Pd_handle: a.pd, Send_cq_handle: big, Recv_cq_handle: big,
		Max_send_wr: 16, Max_recv_wr: 1, Max_send_sge: 1, Max_recv_sge: 1, Qp_type: uint8(qpstate.TypeRC)},
		sizeOf[CreateQpResp]()+sizeOf[RxeCreateQpResp]())
	qr := load[CreateQpResp](out)
	mi := load[RxeCreateQpResp](out[sizeOf[CreateQpResp]():])
	a2 := &conn{client: a.client, pd: a.pd, lkey: a.lkey, buf: a.buf, qp: qr.Qp_handle, qpn: qr.Qpn,
		rq: a.client.mapQueue(mi.Rq_mi), sq: a.client.mapQueue(mi.Sq_mi), cqRing: bigRing}
	a2.connectWith(t, b.qpn, 8, 7) // 1 ms local ACK timeout
	depth := int(a2.sq.mask())
	post := func(from int) {
		for i := from; i < from+depth; i++ {
			w := RxeSendWqe{Wr: RxeSendWr{Wr_id: uint64(i), Opcode: uint32(emu.WRRDMAWrite), Send_flags: uint32(emu.SendSignaled)},
				Dma: RxeDmaInfo{Length: 8, Resid: 8, Num_sge: 1}}
			rd := RxeSendWrRdma{Addr: b.buf, Rkey: b.rkey}
			copy(w.Wr.Wr[:], bytesOf(&rd))
			sge := RxeSge{Addr: a.buf, Length: 8, Lkey: a.lkey}
			for !a2.sq.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
				runtime.Gosched()
			}
		}
		must(a.client, CmdPostSend, &PostSend{Qp_handle: a2.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	}
	// Two rings' worth with one doorbell each: whatever the device cannot
	// hold at the second doorbell waits on the ring, and no doorbell comes
	// after it; the completions of the first ones must move it.
	// b is not connected yet: the first ring's worth stays in flight in the
	// device, so the second waits on the ring.
	post(0)
	post(depth)
	if a2.sq.empty() {
		t.Fatal("the device took more WQEs than its send queue holds")
	}
	b.connect(t, a2.qpn)
	for i := range 2 * depth {
		if wc := bigRing.poll(t); wc.Status != uint32(emu.WCSuccess) || wc.Wr_id != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
}

// produceSend writes a signaled 8-byte SEND from k.buf, WR id id, on the
// SQ ring (no doorbell yet).
func (k *conn) produceSend(t testing.TB, id uint64) {
	t.Helper()
	w := RxeSendWqe{Wr: RxeSendWr{Wr_id: id, Opcode: uint32(emu.WRSend), Send_flags: uint32(emu.SendSignaled)},
		Dma: RxeDmaInfo{Length: 8, Resid: 8, Num_sge: 1}}
	sge := RxeSge{Addr: k.buf, Length: 8, Lkey: k.lkey}
	if !k.sq.produce(append(bytesOf(&w), bytesOf(&sge)...)) {
		t.Fatal("SQ full")
	}
}

// TestPostSendBeforeRTSIsEINVAL checks rxe_post_send's answer to a
// doorbell on a QP that is not ready to send: EINVAL, with the response
// (bad_wr 0) written as ib_uverbs_post_send writes it; the WQE stays on
// the ring and goes once a modify takes the QP to RTS.
func TestPostSendBeforeRTSIsEINVAL(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	b.connect(t, a.qpn)
	a.produceSend(t, 5)
	b.postRecv(t, 9, b.buf, 64)
	a.mem.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, a.resp)
	out, _, err := do(a.client, CmdPostSend, &PostSend{Qp_handle: a.qp, Wqe_size: uint32(sizeOf[SendWr]())}, sizeOf[PostSendResp]())
	errnoIs(t, err, unix.EINVAL)
	if load[PostSendResp](out).Wr != 0 {
		t.Errorf("response bad_wr %d, want 0 written", load[PostSendResp](out).Wr)
	}
	if !a.cqRing.empty() {
		t.Fatal("a completion before RTS")
	}
	a.connect(t, b.qpn)
	if wc := a.cqRing.poll(t); wc.Wr_id != 5 || wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("completion after RTS %+v", wc)
	}
}

// TestDoorbellRingsWithoutAResponse: File.Doorbell rings a QP's send
// doorbell as a POST_SEND with no WRs does but writes no response (the
// client answered itself): a handle that names no QP and a QP before RTS
// are EINVAL, a QP at RTS sends what waits on its ring and says how many
// WQEs it took.
func TestDoorbellRingsWithoutAResponse(t *testing.T) {
	dev := newDevice(t)
	a, b := setup(t, newClient(t, dev)), setup(t, newClient(t, dev))
	_, err := a.client.f.Doorbell(a.qp + 100)
	errnoIs(t, err, unix.EINVAL)
	_, err = a.client.f.Doorbell(a.qp)
	errnoIs(t, err, unix.EINVAL)
	b.connect(t, a.qpn)
	a.connect(t, b.qpn)
	a.produceSend(t, 6)
	b.postRecv(t, 9, b.buf, 64)
	a.mem.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, a.resp)
	if !a.cqRing.empty() {
		t.Fatal("a completion before the doorbell")
	}
	if took, err := a.client.f.Doorbell(a.qp); took != 1 || err != nil {
		t.Fatalf("Doorbell = %d, %v; want 1 WQE taken", took, err)
	}
	if wc := a.cqRing.poll(t); wc.Wr_id != 6 || wc.Status != uint32(emu.WCSuccess) {
		t.Fatalf("completion %+v", wc)
	}
	if took, err := a.client.f.Doorbell(a.qp); took != 0 || err != nil {
		t.Fatalf("Doorbell of an empty ring = %d, %v; want 0", took, err)
	}
	var resp [4]byte
	a.mem.ReadAt(resp[:], a.resp)
	if resp != [4]byte{0xff, 0xff, 0xff, 0xff} {
		t.Errorf("the doorbell wrote %x at the response address", resp)
	}
}

// TestNullPostSendIsLibrxesDoorbell: only a POST_SEND with no WRs names a
// QP handle.
func TestNullPostSendIsLibrxesDoorbell(t *testing.T) {
	cmd := func(c uint32, p PostSend) []byte {
		h := CmdHdr{Command: c, In_words: uint16((hdrSize + sizeOf[PostSend]()) / 4), Out_words: 1}
		return append(bytesOf(&h), bytesOf(&p)...)
	}
	if h, ok := NullPostSend(cmd(CmdPostSend, PostSend{Qp_handle: 3, Wqe_size: 128})); !ok || h != 3 {
		t.Errorf("null post send: %d %v", h, ok)
	}
	for name, b := range map[string][]byte{
		"with WRs":        cmd(CmdPostSend, PostSend{Qp_handle: 3, Wr_count: 1}),
		"another command": cmd(CmdPostRecv, PostSend{Qp_handle: 3}),
		"short":           cmd(CmdPostSend, PostSend{Qp_handle: 3})[:hdrSize+8],
	} {
		if _, ok := NullPostSend(b); ok {
			t.Errorf("%s reads as a doorbell", name)
		}
	}
}
