//go:build linux

package uverbs

import (
	"encoding/binary"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"sync"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// be64 returns the value whose bytes in memory are x in network byte order
// (a __be64 field of a host-order structure).
func be64(x uint64) uint64 {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(x >> (56 - 8*i))
	}
	return binary.NativeEndian.Uint64(b[:])
}

// getContext is ib_uverbs_get_context: the file's ucontext and its async
// event file, whose fd the client receives (async_fd).
func (c *call) getContext() error {
	if _, err := request[GetContext](c); err != nil {
		return err
	}
	f := c.f
	if f.context {
		return errorf(unix.EINVAL, "GET_CONTEXT: the file has a context")
	}
	ev, err := newEventFile(true)
	if err != nil {
		return err
	}
	resp := GetContextResp{Async_fd: ^uint32(0), Num_comp_vectors: uint32(f.dev.Query().NumCompVectors)}
	if err := c.respond(bytesOf(&resp)); err != nil {
		ev.close()
		return err
	}
	f.startContext()
	f.handAsync(ev, c.resp)
	return nil
}

// startContext makes the file's ucontext (ib_init_ucontext); f.mu held.
func (f *File) startContext() {
	f.context = true
	watchPorts(f)
}

// handAsync makes ev an async event file of f, handed to the client with
// the reply, its number stored at at: the first is the file's default,
// which gets the events (ib_uverbs_init_async_event_file); f.mu held.
func (f *File) handAsync(ev *eventFile, at uint64) {
	if !f.async.CompareAndSwap(nil, ev) {
		f.asyncMore = append(f.asyncMore, ev)
	}
	ev.at, ev.fd = at, fdPending
	f.reply.Files = append(f.reply.Files, PassFile{File: ev.theirs, At: at})
	f.passing = append(f.passing, ev)
}

// portWatchers holds, per device, the files whose async event files get
// the device's port events: one device event handler serves them all (the
// device has no way to unregister a handler, and a daemon opens many files).
var portWatchers sync.Map // *emu.Device -> *watchers

type watchers struct {
	mu    sync.Mutex
	files map[*File]struct{}
}

// watchPorts adds f to its device's port event watchers.
func watchPorts(f *File) {
	w, loaded := portWatchers.LoadOrStore(f.dev, &watchers{files: map[*File]struct{}{}})
	ws := w.(*watchers)
	if !loaded {
		f.dev.RegisterEventHandler(ws.event)
	}
	ws.mu.Lock()
	ws.files[f] = struct{}{}
	ws.mu.Unlock()
}

// unwatchPorts removes f.
func unwatchPorts(f *File) {
	if w, ok := portWatchers.Load(f.dev); ok {
		ws := w.(*watchers)
		ws.mu.Lock()
		delete(ws.files, f)
		ws.mu.Unlock()
	}
}

// event queues a device or port event on every watching file's async event
// file (ib_uverbs_event_handler: the element is the port number).
func (ws *watchers) event(e emu.Event) {
	if e.QP != nil || e.CQ != nil || e.SRQ != nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for f := range ws.files {
		if async := f.async.Load(); async != nil {
			async.sendAsync(uint64(e.Port), uint32(e.Type), nil)
		}
	}
}

// deviceResp fills struct ib_uverbs_query_device_resp
// (copy_query_dev_fields).
func deviceResp(a emu.DeviceAttr) QueryDeviceResp {
	return QueryDeviceResp{
		Fw_ver: a.FWVer, Node_guid: be64(a.NodeGUID), Sys_image_guid: be64(a.SysImageGUID),
		Max_mr_size: a.MaxMRSize, Page_size_cap: a.PageSizeCap,
		Vendor_id: a.VendorID, Vendor_part_id: a.VendorPartID, Hw_ver: a.HWVer,
		Max_qp: uint32(a.MaxQP), Max_qp_wr: uint32(a.MaxQPWR), Device_cap_flags: uint32(a.DeviceCapFlags),
		Max_sge: uint32(min(a.MaxSendSGE, a.MaxRecvSGE)), Max_sge_rd: uint32(a.MaxSGERd),
		Max_cq: uint32(a.MaxCQ), Max_cqe: uint32(a.MaxCQE), Max_mr: uint32(a.MaxMR), Max_pd: uint32(a.MaxPD),
		Max_qp_rd_atom: uint32(a.MaxQPRdAtom), Max_ee_rd_atom: uint32(a.MaxEERdAtom),
		Max_res_rd_atom: uint32(a.MaxResRdAtom), Max_qp_init_rd_atom: uint32(a.MaxQPInitRdAtom),
		Max_ee_init_rd_atom: uint32(a.MaxEEInitRdAtom), Atomic_cap: uint32(a.AtomicCap),
		Max_ee: uint32(a.MaxEE), Max_rdd: uint32(a.MaxRDD), Max_mw: uint32(a.MaxMW),
		Max_raw_ipv6_qp: uint32(a.MaxRawIPv6QP), Max_raw_ethy_qp: uint32(a.MaxRawEthyQP),
		Max_mcast_grp: uint32(a.MaxMcastGrp), Max_mcast_qp_attach: uint32(a.MaxMcastQPAttach),
		Max_total_mcast_qp_attach: uint32(a.MaxTotalMcastQPAttach), Max_ah: uint32(a.MaxAH),
		Max_srq: uint32(a.MaxSRQ), Max_srq_wr: uint32(a.MaxSRQWR), Max_srq_sge: uint32(a.MaxSRQSGE),
		Max_pkeys: a.MaxPKeys, Local_ca_ack_delay: a.LocalCAAckDelay, Phys_port_cnt: uint8(a.PhysPortCnt),
	}
}

// queryDevice is ib_uverbs_query_device.
func (c *call) queryDevice() error {
	if _, err := request[QueryDevice](c); err != nil {
		return err
	}
	resp := deviceResp(c.f.dev.Query())
	return c.respond(bytesOf(&resp))
}

// exQueryDevice is ib_uverbs_ex_query_device: comp_mask and reserved must
// be zero (EINVAL); the device's ODP caps (rxe has no RSS, tag matching or
// CQ moderation).
func (c *call) exQueryDevice() error {
	cmd, err := request[ExQueryDevice](c)
	if err != nil {
		return err
	}
	if cmd.Mask != 0 || cmd.Reserved != 0 {
		return errorf(unix.EINVAL, "EX_QUERY_DEVICE: comp_mask %#x reserved %#x", cmd.Mask, cmd.Reserved)
	}
	a := c.f.dev.Query()
	resp := ExQueryDeviceResp{Base: deviceResp(a), Device_cap_flags_ex: a.DeviceCapFlags}
	o := a.ODPCaps
	resp.Odp_caps = OdpCaps{General_caps: o.General,
		Per_transport_caps: OdpPerTransportCaps{Rc_odp_caps: o.RC, Uc_odp_caps: o.UC, Ud_odp_caps: o.UD}}
	resp.Xrc_odp_caps = o.XRC
	resp.Response_length = c.respLen(sizeOf[ExQueryDeviceResp]())
	return c.respond(bytesOf(&resp))
}

// Port flag bits of ib_uverbs_query_port.
const (
	pcfIPBasedGIDs  = 1 << 26 // IB_UVERBS_PCF_IP_BASED_GIDS
	pqfGRHRequired  = 1 << 0  // IB_UVERBS_PQF_GRH_REQUIRED
	linkLayerEthMax = 255
)

// queryPort is ib_uverbs_query_port (copy_port_attr_to_resp).
func (c *call) queryPort() error {
	cmd, err := request[QueryPort](c)
	if err != nil {
		return err
	}
	resp, err := c.f.portResp(uint32(cmd.Num))
	if err != nil {
		return wrap("QUERY_PORT", err)
	}
	return c.respond(bytesOf(&resp))
}

// portResp is copy_port_attr_to_resp: port's attributes as QUERY_PORT
// answers them, on either ABI.
func (f *File) portResp(port uint32) (QueryPortResp, error) {
	d := f.dev
	a, err := d.QueryPort(port)
	if err != nil {
		return QueryPortResp{}, err
	}
	resp := QueryPortResp{
		Port_cap_flags: a.PortCapFlags &^ pcfIPBasedGIDs, Max_msg_sz: a.MaxMsgSz,
		Bad_pkey_cntr: a.BadPKeyCntr, Qkey_viol_cntr: a.QKeyViolCntr, Gid_tbl_len: uint32(a.GIDTblLen),
		Pkey_tbl_len: a.PKeyTblLen, Lid: kverbs.LIDCPU16(a.LID), Sm_lid: kverbs.LIDCPU16(a.SMLID),
		State: uint8(a.State), Max_mtu: uint8(a.MaxMTU), Active_mtu: uint8(a.ActiveMTU), Lmc: a.LMC,
		Max_vl_num: a.MaxVLNum, Sm_sl: a.SMSL, Subnet_timeout: a.SubnetTimeout, Init_type_reply: a.InitTypeReply,
		Active_width: uint8(a.ActiveWidth), Active_speed: uint8(a.ActiveSpeed), Phys_state: uint8(a.PhysState),
		Link_layer: uint8(d.LinkLayer(port)),
	}
	if a.IPGids {
		resp.Port_cap_flags |= pcfIPBasedGIDs
	}
	if d.IsGRHRequired(port) {
		resp.Flags |= pqfGRHRequired
	}
	return resp, nil
}

// allocPD is ib_uverbs_alloc_pd. The PD's user MRs lie in the client's
// memory (its MRSpace, if it has one).
func (c *call) allocPD() error {
	if _, err := request[AllocPd](c); err != nil {
		return err
	}
	pd, err := c.f.dev.AllocUserPD(c.f.mrSpace())
	if err != nil {
		return wrap("ALLOC_PD", err)
	}
	o := &object{kind: kindPD, pd: pd}
	h := c.f.newObject(o)
	resp := AllocPdResp{Handle: h}
	if err := c.respond(bytesOf(&resp)); err != nil {
		delete(c.f.objects, h)
		pd.Dealloc()
		return err
	}
	return nil
}

// deallocPD is ib_uverbs_dealloc_pd: EBUSY while objects use the PD.
func (c *call) deallocPD() error {
	cmd, err := request[DeallocPd](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindPD, cmd.Handle)
	if err != nil {
		return err
	}
	if err := o.pd.DeallocUser(&emu.UData{}); err != nil {
		return wrap("DEALLOC_PD", err)
	}
	delete(c.f.objects, o.handle)
	return nil
}

// regMR is ib_uverbs_reg_mr: start and length lie in the client's memory;
// the low 12 bits of start and hca_va must agree (EINVAL).
func (c *call) regMR() error {
	cmd, err := request[RegMr](c)
	if err != nil {
		return err
	}
	if (cmd.Start^cmd.Hca_va)&4095 != 0 {
		return errorf(unix.EINVAL, "REG_MR: start %#x and hca_va %#x differ in the page offset", cmd.Start, cmd.Hca_va)
	}
	pdo, err := c.f.get(kindPD, cmd.Pd_handle)
	if err != nil {
		return err
	}
	mr, err := pdo.pd.RegUserMR(cmd.Start, cmd.Length, cmd.Hca_va, ib.AccessFlags(cmd.Access_flags))
	if err != nil {
		return wrap("REG_MR", err)
	}
	o := &object{kind: kindMR, mr: mr}
	h := c.f.newObject(o)
	resp := RegMrResp{Handle: h, Lkey: mr.LKey(), Rkey: mr.RKey()}
	if err := c.respond(bytesOf(&resp)); err != nil {
		delete(c.f.objects, h)
		mr.Dereg()
		return err
	}
	return nil
}

// deregMR is ib_uverbs_dereg_mr.
func (c *call) deregMR() error {
	cmd, err := request[DeregMr](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindMR, cmd.Handle)
	if err != nil {
		return err
	}
	lkey := o.mr.LKey()
	if err := o.mr.DeregUser(&emu.UData{}); err != nil {
		return wrap("DEREG_MR", err)
	}
	if c.f.check != nil {
		c.f.check.MRDeregistered(o.handle, lkey)
	}
	delete(c.f.objects, o.handle)
	return nil
}

// createCompChannel is ib_uverbs_create_comp_channel: a completion event
// file whose fd the client receives.
func (c *call) createCompChannel() error {
	if _, err := request[CreateCompChannel](c); err != nil {
		return err
	}
	if len(c.f.channels) >= maxChannels {
		return errorf(unix.EMFILE, "CREATE_COMP_CHANNEL: %d channels open", len(c.f.channels))
	}
	ev, err := newEventFile(false)
	if err != nil {
		return err
	}
	resp := CreateCompChannelResp{Fd: ^uint32(0)}
	if err := c.respond(bytesOf(&resp)); err != nil {
		ev.close()
		return err
	}
	ev.at, ev.fd = c.resp, fdPending
	c.f.channels = append(c.f.channels, ev)
	c.f.reply.Files = append(c.f.reply.Files, PassFile{File: ev.theirs, At: c.resp})
	c.f.passing = append(c.f.passing, ev)
	return nil
}

// maxChannels bounds the completion channels of one File: each holds
// descriptors of the daemon, which serves every client. The kernel's bound
// is the client's RLIMIT_NOFILE (EMFILE), 1024 by default.
const maxChannels = 1024

// channelOf finds the completion channel a CQ command names by the fd
// number the client holds (ib_uverbs_lookup_comp_file; -1: none). The
// number is the one the client stored in the CREATE_COMP_CHANNEL response,
// read back by resolveFds. An fd that is no channel of this file is
// EINVAL.
func (f *File) channelOf(fd int32) (*eventFile, error) {
	if fd < 0 {
		return nil, nil
	}
	for _, ev := range f.channels {
		if ev.fd == fd {
			return ev, nil
		}
	}
	return nil, errorf(unix.EINVAL, "completion channel fd %d: not a channel of this file", fd)
}

// FilesStored tells the File the numbers the client received for the
// files the last Write passed (Reply.Files, in that order), before the
// client's write() returns: a completion channel is then known by the fd
// CREATE_CQ names. A client that lies about its numbers only misdirects its
// own channel lookups.
func (f *File) FilesStored(fds []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ev := range f.handed {
		if i < len(fds) && ev.fd == fdPending {
			ev.fd = int32(fds[i])
		}
	}
	f.handed = nil
}

// resolveFds is the fallback for a daemon that does not call FilesStored:
// it reads back the fd numbers the client stored in the responses of the
// previous command, which holds only while the client has not reused that
// memory; f.mu held.
func (f *File) resolveFds() {
	f.handed = nil
	for _, ev := range f.channels {
		if ev.fd != fdPending {
			continue
		}
		var b [4]byte
		ev.fd = fdUnknown
		if _, err := f.mem.ReadAt(b[:], ev.at); err == nil {
			ev.fd = int32(binary.NativeEndian.Uint32(b[:]))
		}
	}
}
