//go:build linux

package ucma

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/uverbs"
	"golang.org/x/sys/unix"
)

const udType = qpstate.TypeUD

// Address families of struct sockaddr.
const (
	afInet  = unix.AF_INET
	afInet6 = unix.AF_INET6
	afIB    = 27
)

// A command handler: in is the command after the header (at least the
// command's size, zero-filled past what the client wrote), inLen and
// outLen the header's sizes.
type handler func(f *File, in []byte, inLen, outLen int) error

// cmdTable is ucma_cmd_table; GET_OPTION has no handler (ENOSYS).
var cmdTable = [...]struct {
	name string
	fn   handler
}{
	uverbs.UcmCmdCreateID:     {"CREATE_ID", (*File).createID},
	uverbs.UcmCmdDestroyID:    {"DESTROY_ID", (*File).destroyID},
	uverbs.UcmCmdBindIP:       {"BIND_IP", (*File).bindIP},
	uverbs.UcmCmdResolveIP:    {"RESOLVE_IP", (*File).resolveIP},
	uverbs.UcmCmdResolveRoute: {"RESOLVE_ROUTE", (*File).resolveRoute},
	uverbs.UcmCmdQueryRoute:   {"QUERY_ROUTE", (*File).queryRoute},
	uverbs.UcmCmdConnect:      {"CONNECT", (*File).connect},
	uverbs.UcmCmdListen:       {"LISTEN", (*File).listen},
	uverbs.UcmCmdAccept:       {"ACCEPT", (*File).accept},
	uverbs.UcmCmdReject:       {"REJECT", (*File).reject},
	uverbs.UcmCmdDisconnect:   {"DISCONNECT", (*File).disconnect},
	uverbs.UcmCmdInitQPAttr:   {"INIT_QP_ATTR", (*File).initQPAttr},
	uverbs.UcmCmdGetEvent:     {"GET_EVENT", (*File).getEvent},
	uverbs.UcmCmdGetOption:    {"GET_OPTION", nil},
	uverbs.UcmCmdSetOption:    {"SET_OPTION", (*File).setOption},
	uverbs.UcmCmdNotify:       {"NOTIFY", (*File).notify},
	uverbs.UcmCmdJoinIPMcast:  {"JOIN_IP_MCAST", (*File).joinIPMcast},
	uverbs.UcmCmdLeaveMcast:   {"LEAVE_MCAST", (*File).leaveMcast},
	uverbs.UcmCmdMigrateID:    {"MIGRATE_ID", (*File).migrateID},
	uverbs.UcmCmdQuery:        {"QUERY", (*File).query},
	uverbs.UcmCmdBind:         {"BIND", (*File).bind},
	uverbs.UcmCmdResolveAddr:  {"RESOLVE_ADDR", (*File).resolveAddr},
	uverbs.UcmCmdJoinMcast:    {"JOIN_MCAST", (*File).joinMcast},
}

// maxCmd is the largest command structure: the zero-filled room a handler
// may read.
const maxCmd = 512

var hdrSize = sizeOf[uverbs.UcmCmdHdr]()

// Write is write(fd, buf) (ucma_write): the header, then the command;
// responses go to the client's memory. It returns write()'s result (the
// whole length) or an error wrapping the kernel's errno.
func (f *File) Write(buf []byte) (int, error) {
	if len(buf) < hdrSize {
		return 0, errorf(unix.EINVAL, "write of %d bytes: shorter than the header", len(buf))
	}
	hdr := load[uverbs.UcmCmdHdr](buf)
	if int(hdr.Cmd) >= len(cmdTable) {
		return 0, errorf(unix.EINVAL, "command %d", hdr.Cmd)
	}
	if int(hdr.In)+hdrSize > len(buf) {
		return 0, errorf(unix.EINVAL, "in %d bytes, the write holds %d", hdr.In, len(buf)-hdrSize)
	}
	c := cmdTable[hdr.Cmd]
	if c.fn == nil {
		return 0, errorf(unix.ENOSYS, "command %d", hdr.Cmd)
	}
	// copy_from_user of the whole command structure: what the client did
	// not write reads as zero.
	in := make([]byte, maxCmd)
	copy(in, buf[hdrSize:])
	if err := c.fn(f, in, int(hdr.In), int(hdr.Out)); err != nil {
		return 0, err
	}
	return len(buf), nil
}

// copyOut is copy_to_user of v's first n bytes (all of v if n covers it).
func (f *File) copyOut(addr uint64, b []byte) error {
	if _, err := f.mem.WriteAt(b, addr); err != nil {
		return errorf(unix.EFAULT, "response at %#x", addr)
	}
	return nil
}

// get is ucma_get_ctx: a context of another file is EINVAL, none ENOENT,
// one whose ID the device's removal closed ENXIO.
func (f *File) get(id uint32) (*context, error) {
	c, err := f.find(id)
	if err == nil && c.removed.Load() {
		return nil, errorf(unix.ENXIO, "context %d: its device was removed", id)
	}
	return c, err
}

// find is _ucma_find_context: get without the removal's ENXIO.
func (f *File) find(id uint32) (*context, error) {
	s := f.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ctxs[id]
	if c == nil {
		return nil, errorf(unix.ENOENT, "context %d", id)
	}
	if c.file.Load() != f {
		return nil, errorf(unix.EINVAL, "context %d belongs to another file", id)
	}
	return c, nil
}

func (f *File) createID(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmCreateID](in)
	if outLen < sizeOf[uverbs.UcmCreateIDResp]() {
		return errorf(unix.ENOSPC, "CREATE_ID: response room %d", outLen)
	}
	var qt qpstate.Type
	switch cma.PortSpace(cmd.Ps) {
	case cma.PSTCP:
		qt = qpstate.TypeRC
	case cma.PSUDP, cma.PSIPoIB:
		qt = qpstate.TypeUD
	case cma.PSIB:
		qt = qpstate.Type(cmd.Type)
	default:
		return errorf(unix.EINVAL, "CREATE_ID: port space %#x", cmd.Ps)
	}
	s := f.svc
	c := &context{uid: cmd.Uid}
	c.file.Store(f)
	id, err := s.cm.CreateID(cma.PortSpace(cmd.Ps), qt, s.handler, c)
	if err != nil {
		return errorf(errnoOf(err), "CREATE_ID: %v", err)
	}
	c.cmID.Store(id)
	s.mu.Lock()
	for s.ctxs[s.next] != nil {
		s.next++
	}
	c.id = s.next
	s.next++
	s.ctxs[c.id] = c
	s.mu.Unlock()
	resp := uverbs.UcmCreateIDResp{Id: c.id}
	if err := f.copyOut(cmd.Response, bytesOf(&resp)); err != nil {
		s.mu.Lock()
		delete(s.ctxs, c.id)
		s.mu.Unlock()
		id.Destroy()
		return err
	}
	return nil
}

func (f *File) destroyID(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmDestroyID](in)
	if outLen < sizeOf[uverbs.UcmDestroyIDResp]() {
		return errorf(unix.ENOSPC, "DESTROY_ID: response room %d", outLen)
	}
	c, err := f.find(cmd.Id)
	if err != nil {
		return err
	}
	s := f.svc
	s.mu.Lock()
	if s.ctxs[c.id] != c {
		s.mu.Unlock()
		return errorf(unix.ENOENT, "DESTROY_ID: context %d", cmd.Id)
	}
	delete(s.ctxs, c.id)
	s.mu.Unlock()
	resp := uverbs.UcmDestroyIDResp{Reported: f.destroyContext(c)}
	return f.copyOut(cmd.Response, bytesOf(&resp))
}

// sockaddr decodes a struct sockaddr_in or sockaddr_in6 of size bytes (0:
// whatever the family says); AF_IB is not served (EAFNOSUPPORT).
func sockaddr(b []byte, size int) (netip.AddrPort, error) {
	fam := binary.NativeEndian.Uint16(b)
	want := 0
	switch fam {
	case afInet:
		want = 16
	case afInet6:
		want = 28
	case afIB:
		return netip.AddrPort{}, errorf(unix.EAFNOSUPPORT, "AF_IB addresses")
	default:
		return netip.AddrPort{}, errorf(unix.EAFNOSUPPORT, "address family %d", fam)
	}
	if size != 0 && size != want {
		return netip.AddrPort{}, errorf(unix.EINVAL, "address of %d bytes for family %d", size, fam)
	}
	port := binary.BigEndian.Uint16(b[2:])
	if fam == afInet {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	}
	a := netip.AddrFrom16([16]byte(b[8:24]))
	if a.Is4In6() {
		a = a.Unmap()
	} else if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 {
		// sin6_scope_id: the interface of a link-local address, which
		// rdma_cm requires of one (cma_check_linklocal).
		a = a.WithZone(strconv.FormatUint(uint64(scope), 10))
	}
	return netip.AddrPortFrom(a, port), nil
}

// putSockaddr encodes a as a struct sockaddr_in or sockaddr_in6 into b and
// returns its size (rdma_addr_size); an invalid a is AF_UNSPEC (0 bytes).
func putSockaddr(b []byte, a netip.AddrPort) int {
	clear(b)
	if !a.Addr().IsValid() {
		return 0
	}
	binary.BigEndian.PutUint16(b[2:], a.Port())
	if a.Addr().Is4() {
		binary.NativeEndian.PutUint16(b, afInet)
		v := a.Addr().As4()
		copy(b[4:8], v[:])
		return 16
	}
	binary.NativeEndian.PutUint16(b, afInet6)
	v := a.Addr().As16()
	copy(b[8:24], v[:])
	if scope, err := strconv.ParseUint(a.Addr().Zone(), 10, 32); err == nil {
		binary.NativeEndian.PutUint32(b[24:28], uint32(scope))
	}
	return 28
}

func (f *File) bindIP(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmBindIP](in)
	a, err := sockaddr(bytesOf(&cmd.Addr), 0)
	if err != nil {
		return err
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if err := f.svc.route(c, a.Addr()); err != nil {
		return wrap("BIND_IP", err)
	}
	return wrap("BIND_IP", c.cmID.Load().Bind(a))
}

func (f *File) bind(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmBind](in)
	if cmd.Reserved != 0 || cmd.Size == 0 {
		return errorf(unix.EINVAL, "BIND: size %d, reserved %d", cmd.Size, cmd.Reserved)
	}
	a, err := sockaddr(cmd.Addr.Anon0[:], int(cmd.Size))
	if err != nil {
		return err
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if err := f.svc.route(c, a.Addr()); err != nil {
		return wrap("BIND", err)
	}
	return wrap("BIND", c.cmID.Load().Bind(a))
}

func (f *File) resolveIP(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmResolveIP](in)
	var src netip.AddrPort
	if binary.NativeEndian.Uint16(bytesOf(&cmd.Src_addr)) != 0 {
		a, err := sockaddr(bytesOf(&cmd.Src_addr), 0)
		if err != nil {
			return err
		}
		src = a
	}
	dst, err := sockaddr(bytesOf(&cmd.Dst_addr), 0)
	if err != nil {
		return err
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if err := routeResolve(f, c, src, dst); err != nil {
		return wrap("RESOLVE_IP", err)
	}
	return wrap("RESOLVE_IP", c.cmID.Load().ResolveAddr(src, dst, time.Duration(cmd.Timeout_ms)*time.Millisecond))
}

func (f *File) resolveAddr(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmResolveAddr](in)
	if cmd.Reserved != 0 || cmd.Dst_size == 0 {
		return errorf(unix.EINVAL, "RESOLVE_ADDR: sizes %d/%d, reserved %d", cmd.Src_size, cmd.Dst_size, cmd.Reserved)
	}
	var src netip.AddrPort
	if cmd.Src_size != 0 {
		a, err := sockaddr(cmd.Src_addr.Anon0[:], int(cmd.Src_size))
		if err != nil {
			return err
		}
		src = a
	}
	dst, err := sockaddr(cmd.Dst_addr.Anon0[:], int(cmd.Dst_size))
	if err != nil {
		return err
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if err := routeResolve(f, c, src, dst); err != nil {
		return wrap("RESOLVE_ADDR", err)
	}
	return wrap("RESOLVE_ADDR", c.cmID.Load().ResolveAddr(src, dst, time.Duration(cmd.Timeout_ms)*time.Millisecond))
}

// routeResolve routes an ID that resolves dst from src (src's device, or
// dst's when dst is a local address: the kernel's route to a local
// address is the loopback, on dst's device) before the resolution.
func routeResolve(f *File, c *context, src, dst netip.AddrPort) error {
	if src.Addr().IsValid() && !src.Addr().IsUnspecified() {
		return f.svc.route(c, src.Addr())
	}
	return f.svc.route(c, dst.Addr())
}

func (f *File) resolveRoute(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmResolveRoute](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	return wrap("RESOLVE_ROUTE", c.cmID.Load().ResolveRoute(time.Duration(cmd.Ms)*time.Millisecond))
}

// be64 returns v as the bytes of a __be64 read in host order (the kernel
// copies the device's big-endian node GUID as it is).
func be64(v uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return binary.NativeEndian.Uint64(b[:])
}

func be16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

func be32(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}

// userPath is ib_copy_path_rec_to_user of a RoCE path.
func userPath(p *cma.PathRecord) uverbs.UserPathRec {
	return uverbs.UserPathRec{Dgid: p.DGID, Sgid: p.SGID, Flow_label: be32(p.FlowLabel), Reversible: 1,
		Mtu: uint32(p.MTU), Pkey: be16(p.PKey), Hop_limit: p.HopLimit, Traffic_class: p.TrafficClass, Numb_path: 1,
		Sl: p.SL, Mtu_selector: 2, Rate_selector: 2, Rate: p.Rate, Packet_life_time_selector: 2,
		Packet_life_time: p.PacketLife}
}

func (f *File) queryRoute(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmQuery](in)
	if outLen < sizeOf[uverbs.UcmQueryRouteResp]() {
		return errorf(unix.ENOSPC, "QUERY_ROUTE: response room %d", outLen)
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	info := c.cmID.Load().Info()
	var resp uverbs.UcmQueryRouteResp
	putSockaddr(bytesOf(&resp.Src_addr), info.Src)
	putSockaddr(bytesOf(&resp.Dst_addr), info.Dst)
	if info.HasDevice {
		resp.Node_guid = be64(info.NodeGUID)
		resp.Port_num = info.PortNum
		resp.Ibdev_index = 0xffffffff
		resp.Num_paths = uint32(info.NumPaths)
		if info.NumPaths > 0 {
			resp.Ib_route[0] = userPath(&info.Path)
		} else {
			resp.Ib_route[0].Dgid, resp.Ib_route[0].Sgid = info.DGID, info.SGID
			resp.Ib_route[0].Pkey = be16(0xffff)
		}
	}
	return f.copyOut(cmd.Response, bytesOf(&resp))
}

func (f *File) query(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmQuery](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	info := c.cmID.Load().Info()
	switch cmd.Option {
	case uverbs.UcmQueryAddr:
		if outLen < sizeOf[uverbs.UcmQueryAddrResp]() {
			return errorf(unix.ENOSPC, "QUERY addr: response room %d", outLen)
		}
		var resp uverbs.UcmQueryAddrResp
		resp.Src_size = uint16(putSockaddr(resp.Src_addr.Anon0[:], info.Src))
		resp.Dst_size = uint16(putSockaddr(resp.Dst_addr.Anon0[:], info.Dst))
		if info.HasDevice {
			resp.Node_guid, resp.Port_num, resp.Pkey = be64(info.NodeGUID), info.PortNum, be16(info.PKey)
			resp.Ibdev_index = 0xffffffff
		}
		return f.copyOut(cmd.Response, bytesOf(&resp))
	case uverbs.UcmQueryPath:
		hs := sizeOf[uverbs.UcmQueryPathResp]()
		if outLen < hs {
			return errorf(unix.ENOSPC, "QUERY path: response room %d", outLen)
		}
		n := 0
		if info.NumPaths > 0 && outLen-hs > sizeOf[uverbs.PathRecData]() {
			n = 1
		}
		out := make([]byte, hs+n*sizeOf[uverbs.PathRecData]())
		binary.NativeEndian.PutUint32(out, uint32(info.NumPaths))
		if n == 1 {
			const gmpPrimaryBidir = 1<<2 | 1<<3 | 1<<4 // IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL
			binary.NativeEndian.PutUint32(out[hs:], gmpPrimaryBidir)
			packPath(out[hs+8:hs+72], &info.Path)
		}
		return f.copyOut(cmd.Response, out)
	case uverbs.UcmQueryGID:
		if outLen < sizeOf[uverbs.UcmQueryAddrResp]() {
			return errorf(unix.ENOSPC, "QUERY gid: response room %d", outLen)
		}
		var resp uverbs.UcmQueryAddrResp
		if info.HasDevice {
			resp.Node_guid, resp.Port_num, resp.Pkey = be64(info.NodeGUID), info.PortNum, be16(info.PKey)
			resp.Ibdev_index = 0xffffffff
		}
		resp.Src_size = uint16(putSockaddrIB(resp.Src_addr.Anon0[:], info.SGID, info.PKey, serviceIDOf(c.cmID.Load(), info.Src.Port())))
		resp.Dst_size = uint16(putSockaddrIB(resp.Dst_addr.Anon0[:], info.DGID, info.PKey, serviceIDOf(c.cmID.Load(), info.Dst.Port())))
		return f.copyOut(cmd.Response, bytesOf(&resp))
	}
	return errorf(unix.ENOSYS, "QUERY option %d", cmd.Option)
}

func serviceIDOf(id *cma.ID, port uint16) uint64 {
	return uint64(id.PortSpace())<<16 | uint64(port)
}

// putSockaddrIB writes a struct sockaddr_ib (48 bytes): family, pkey,
// flow info, the GID, the service ID and its mask, scope.
func putSockaddrIB(b []byte, gid emu.GID, pkey uint16, sid uint64) int {
	clear(b[:48])
	binary.NativeEndian.PutUint16(b, afIB)
	binary.BigEndian.PutUint16(b[2:], pkey)
	copy(b[8:24], gid[:])
	binary.BigEndian.PutUint64(b[24:], sid)
	binary.BigEndian.PutUint64(b[32:], ^uint64(0))
	return 48
}

// packPath is ib_sa_pack_path: the 64-byte SA PathRecord.
func packPath(b []byte, p *cma.PathRecord) {
	clear(b)
	binary.BigEndian.PutUint64(b[0:], p.ServiceID)
	copy(b[8:24], p.DGID[:])
	copy(b[24:40], p.SGID[:])
	binary.BigEndian.PutUint32(b[44:], p.FlowLabel<<8|uint32(p.HopLimit))
	b[48] = p.TrafficClass
	b[49] = 0x80 | 1 // reversible, one path
	binary.BigEndian.PutUint16(b[50:], p.PKey)
	binary.BigEndian.PutUint16(b[52:], uint16(p.SL))
	b[54] = 2<<6 | uint8(p.MTU)
	b[55] = 2<<6 | p.Rate
	b[56] = 2<<6 | p.PacketLife
}

// connParam is ucma_copy_conn_param.
func connParam(p *uverbs.UcmConnParam) *cma.ConnParam {
	return &cma.ConnParam{PrivateData: append([]byte(nil), p.Private_data[:p.Private_data_len]...),
		ResponderResources: p.Responder_resources, InitiatorDepth: p.Initiator_depth, FlowControl: p.Flow_control,
		RetryCount: p.Retry_count, RNRRetryCount: p.Rnr_retry_count, SRQ: p.Srq, QPNum: p.Qp_num}
}

// connectMinIn is offsetofend(struct rdma_ucm_connect, reserved): the
// shortest CONNECT (and, with uid in front, ACCEPT) the kernel takes.
var connectMinIn = sizeOf[uverbs.UcmConnParam]() + 8

func (f *File) connect(in []byte, inLen, _ int) error {
	if inLen < connectMinIn {
		return errorf(unix.EINVAL, "CONNECT: %d bytes", inLen)
	}
	cmd := load[uverbs.UcmConnect](in)
	if cmd.Param.Valid == 0 {
		return errorf(unix.EINVAL, "CONNECT: parameters not valid")
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	return wrap("CONNECT", c.cmID.Load().Connect(connParam(&cmd.Param)))
}

func (f *File) listen(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmListen](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	backlog := int(cmd.Backlog)
	if cmd.Backlog == 0 || cmd.Backlog >= MaxBacklog {
		backlog = MaxBacklog
	}
	f.mu.Lock()
	c.backlog = backlog
	c.listenBacklog = backlog
	f.mu.Unlock()
	if err := c.cmID.Load().Listen(backlog); err != nil {
		return wrap("LISTEN", err)
	}
	f.svc.listenOnAll(c, backlog)
	return nil
}

func (f *File) accept(in []byte, inLen, _ int) error {
	if inLen < connectMinIn+8 {
		return errorf(unix.EINVAL, "ACCEPT: %d bytes", inLen)
	}
	cmd := load[uverbs.UcmAccept](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if cmd.Param.Valid == 0 {
		return wrap("ACCEPT", c.cmID.Load().Accept(nil))
	}
	// The uid is set before the REP goes out, so that the ESTABLISHED
	// the RTU brings finds it (ucma_accept holds file->mut around
	// __rdma_accept for the same reason).
	f.mu.Lock()
	old := c.uid
	c.uid = cmd.Uid
	f.mu.Unlock()
	if err := c.cmID.Load().Accept(connParam(&cmd.Param)); err != nil {
		f.mu.Lock()
		c.uid = old
		f.mu.Unlock()
		return wrap("ACCEPT", err)
	}
	return nil
}

func (f *File) reject(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmReject](in)
	reason := mad.RejReason(cmd.Reason)
	switch reason {
	case 0:
		reason = mad.RejConsumerDefined
	case mad.RejConsumerDefined, 35: // IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED
	default:
		return errorf(unix.EINVAL, "REJECT: reason %d", cmd.Reason)
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	return wrap("REJECT", c.cmID.Load().Reject(cmd.Data[:cmd.Data_len], reason))
}

func (f *File) disconnect(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmDisconnect](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	return wrap("DISCONNECT", c.cmID.Load().Disconnect())
}

func (f *File) notify(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmNotify](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	return wrap("NOTIFY", c.cmID.Load().Notify(int(cmd.Event)))
}

func (f *File) initQPAttr(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmInitQPAttr](in)
	if outLen < sizeOf[uverbs.QPAttr]() {
		return errorf(unix.ENOSPC, "INIT_QP_ATTR: response room %d", outLen)
	}
	if cmd.State > uint32(qpstate.StateErr) {
		return errorf(unix.EINVAL, "INIT_QP_ATTR: state %d", cmd.State)
	}
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	a, mask, err := c.cmID.Load().InitQPAttr(qpstate.State(cmd.State))
	if err != nil {
		return wrap("INIT_QP_ATTR", err)
	}
	resp := qpAttrToUser(&a, mask)
	return f.copyOut(cmd.Response, bytesOf(&resp))
}

// ahToUser is ib_copy_ah_attr_to_user.
func ahToUser(a *ib.AHAttr) uverbs.AhAttr {
	u := uverbs.AhAttr{Sl: a.SL, Static_rate: a.StaticRate, Port_num: uint8(a.PortNum)}
	if a.AHFlags&ib.AHGRH != 0 {
		u.Is_global = 1
		u.Grh = uverbs.GlobalRoute{Dgid: a.GRH.DGID, Flow_label: a.GRH.FlowLabel, Sgid_index: a.GRH.SGIDIndex,
			Hop_limit: a.GRH.HopLimit, Traffic_class: a.GRH.TrafficClass}
	}
	return u
}

// qpAttrToUser is ib_copy_qp_attr_to_user.
func qpAttrToUser(a *qpstate.Attr, mask qpstate.AttrMask) uverbs.QPAttr {
	return uverbs.QPAttr{Qp_attr_mask: uint32(mask), Qp_state: uint32(a.QPState), Cur_qp_state: uint32(a.CurQPState),
		Path_mtu: uint32(a.PathMTU), Path_mig_state: uint32(a.PathMigState), Qkey: a.QKey, Rq_psn: a.RQPSN,
		Sq_psn: a.SQPSN, Dest_qp_num: a.DestQPNum, Qp_access_flags: uint32(a.QPAccessFlags),
		Ah_attr: ahToUser(&a.AHAttr), Alt_ah_attr: ahToUser(&a.AltAHAttr), Max_send_wr: a.Cap.MaxSendWR,
		Max_recv_wr: a.Cap.MaxRecvWR, Max_send_sge: a.Cap.MaxSendSGE, Max_recv_sge: a.Cap.MaxRecvSGE,
		Max_inline_data: a.Cap.MaxInlineData, Pkey_index: a.PKeyIndex, Alt_pkey_index: a.AltPKeyIndex,
		En_sqd_async_notify: a.EnSQDAsyncNotify, Sq_draining: a.SQDraining, Max_rd_atomic: a.MaxRdAtomic,
		Max_dest_rd_atomic: a.MaxDestRdAtomic, Min_rnr_timer: a.MinRNRTimer, Port_num: uint8(a.PortNum),
		Timeout: a.Timeout, Retry_cnt: a.RetryCnt, Rnr_retry: a.RNRRetry, Alt_port_num: uint8(a.AltPortNum),
		Alt_timeout: a.AltTimeout}
}

// getEvent is ucma_get_event without the wait: the client waits on the
// event file first; an empty queue is EAGAIN.
func (f *File) getEvent(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmGetEvent](in)
	if outLen < sizeOf[uverbs.UcmEventResp]() {
		return errorf(unix.ENOSPC, "GET_EVENT: response room %d", outLen)
	}
	s := f.svc
	f.mu.Lock()
	if len(f.events) == 0 {
		f.mu.Unlock()
		return errorf(unix.EAGAIN, "GET_EVENT: no event")
	}
	e := f.events[0]
	var nc *context
	if e.resp.Event == uint32(cma.EventConnectRequest) {
		nc = &context{}
		nc.cmID.Store(e.cmID)
		nc.file.Store(f)
		s.mu.Lock()
		for s.ctxs[s.next] != nil {
			s.next++
		}
		nc.id = s.next
		s.next++
		s.ctxs[nc.id] = nc
		s.mu.Unlock()
		e.ctx.backlog++
		e.cmID.SetContext(nc)
		e.resp.Id = nc.id
		e.resp.Event = uint32(cma.EventConnectRequest)
	}
	resp := e.resp
	if err := f.copyOut(cmd.Response, bytesOf(&resp)); err != nil {
		// The event stays queued (and counted) for the next try.
		f.mu.Unlock()
		f.signal(1)
		return err
	}
	f.events[0] = nil
	f.events = f.events[1:]
	e.ctx.reported++
	if e.mc != nil {
		e.mc.reported++
	}
	f.mu.Unlock()
	return nil
}

// Socket option levels and names (rdma_user_cm.h).
const (
	optionID           = 0
	optionIB           = 1
	optionIDTOS        = 0
	optionIDReuseAddr  = 1
	optionIDAFOnly     = 2
	optionIDAckTimeout = 3
	optionIBPath       = 1
	maxOptLen          = 4096
)

func (f *File) setOption(in []byte, _, _ int) error {
	cmd := load[uverbs.UcmSetOption](in)
	c, err := f.get(cmd.Id)
	if err != nil {
		return err
	}
	if cmd.Optlen > maxOptLen {
		return errorf(unix.EINVAL, "SET_OPTION: optlen %d", cmd.Optlen)
	}
	val := make([]byte, cmd.Optlen)
	if _, err := f.mem.ReadAt(val, cmd.Optval); err != nil && len(val) > 0 {
		return errorf(unix.EFAULT, "SET_OPTION: optval at %#x", cmd.Optval)
	}
	intVal := func() (int32, error) {
		if len(val) != 4 {
			return 0, errorf(unix.EINVAL, "SET_OPTION %d: optlen %d", cmd.Optname, len(val))
		}
		return int32(binary.NativeEndian.Uint32(val)), nil
	}
	switch cmd.Level {
	case optionID:
		switch cmd.Optname {
		case optionIDTOS:
			if len(val) != 1 {
				return errorf(unix.EINVAL, "SET_OPTION TOS: optlen %d", len(val))
			}
			tos := val[0]
			c.cmID.Load().SetTOS(tos)
			f.keepOpt(c, optTOS, func(id *cma.ID) error { id.SetTOS(tos); return nil })
			return nil
		case optionIDReuseAddr:
			v, err := intVal()
			if err != nil {
				return err
			}
			return f.setOpt(c, optReuseAddr, func(id *cma.ID) error { return id.SetReuseAddr(v != 0) })
		case optionIDAFOnly:
			v, err := intVal()
			if err != nil {
				return err
			}
			return f.setOpt(c, optAFOnly, func(id *cma.ID) error { return id.SetAFOnly(v != 0) })
		case optionIDAckTimeout:
			if len(val) != 1 {
				return errorf(unix.EINVAL, "SET_OPTION ACK_TIMEOUT: optlen %d", len(val))
			}
			t := val[0]
			return f.setOpt(c, optAckTimeout, func(id *cma.ID) error { return id.SetAckTimeout(t) })
		}
	case optionIB:
		if cmd.Optname == optionIBPath {
			return errorf(unix.EINVAL, "SET_OPTION IB_PATH: not on a RoCE port")
		}
	}
	return errorf(unix.ENOSYS, "SET_OPTION level %d name %d", cmd.Level, cmd.Optname)
}

// The ID options a context keeps for the ID that may replace it.
const (
	optTOS = iota
	optReuseAddr
	optAFOnly
	optAckTimeout
	numOpts
)

// setOpt sets option kind on c's ID and keeps it for the ID that may
// replace it (Service.route).
func (f *File) setOpt(c *context, kind int, o func(*cma.ID) error) error {
	if err := o(c.cmID.Load()); err != nil {
		return wrap("SET_OPTION", err)
	}
	f.keepOpt(c, kind, o)
	return nil
}

// keepOpt keeps option kind set on c's ID for the ID that may replace it
// (the last of each kind).
func (f *File) keepOpt(c *context, kind int, o func(*cma.ID) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c.opts[kind] = o
}

// Join flags of JOIN_MCAST (RDMA_MC_JOIN_FLAG_*).
const (
	joinFullMember         = 0
	joinSendOnlyFullMember = 1
)

func (f *File) joinIPMcast(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmJoinIPMcast](in)
	a, err := sockaddr(bytesOf(&cmd.Addr), 0)
	if err != nil {
		return err
	}
	return f.join(cmd.Response, cmd.Uid, cmd.Id, a.Addr(), joinFullMember, outLen)
}

func (f *File) joinMcast(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmJoinMcast](in)
	a, err := sockaddr(cmd.Addr.Anon0[:], int(cmd.Addr_size))
	if err != nil {
		return err
	}
	return f.join(cmd.Response, cmd.Uid, cmd.Id, a.Addr(), int(cmd.Join_flags), outLen)
}

// join is ucma_process_join.
func (f *File) join(response, uid uint64, id uint32, group netip.Addr, flags, outLen int) error {
	if outLen < sizeOf[uverbs.UcmCreateIDResp]() {
		return errorf(unix.ENOSPC, "JOIN: response room %d", outLen)
	}
	if flags != joinFullMember && flags != joinSendOnlyFullMember {
		return errorf(unix.EINVAL, "JOIN: flags %d", flags)
	}
	c, err := f.get(id)
	if err != nil {
		return err
	}
	s := f.svc
	mc := &mcast{uid: uid, ctx: c}
	s.mu.Lock()
	for s.mcs[s.nextMC] != nil {
		s.nextMC++
	}
	mc.id = s.nextMC
	s.nextMC++
	s.mcs[mc.id] = mc
	s.mu.Unlock()
	resp := uverbs.UcmCreateIDResp{Id: mc.id}
	if err := f.copyOut(response, bytesOf(&resp)); err != nil {
		s.mu.Lock()
		delete(s.mcs, mc.id)
		s.mu.Unlock()
		return err
	}
	j, err := c.cmID.Load().JoinMulticast(group, flags == joinSendOnlyFullMember, mc)
	if err != nil {
		s.mu.Lock()
		delete(s.mcs, mc.id)
		s.mu.Unlock()
		return wrap("JOIN", err)
	}
	mc.join = j
	return nil
}

// leaveMcast is ucma_leave_multicast.
func (f *File) leaveMcast(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmDestroyID](in)
	if outLen < sizeOf[uverbs.UcmDestroyIDResp]() {
		return errorf(unix.ENOSPC, "LEAVE_MCAST: response room %d", outLen)
	}
	s := f.svc
	s.mu.Lock()
	mc := s.mcs[cmd.Id]
	switch {
	case mc == nil:
		s.mu.Unlock()
		return errorf(unix.ENOENT, "LEAVE_MCAST: no join %d", cmd.Id)
	case mc.ctx.file.Load() != f || mc.join == nil:
		s.mu.Unlock()
		return errorf(unix.EINVAL, "LEAVE_MCAST: join %d is not this file's", cmd.Id)
	}
	delete(s.mcs, cmd.Id)
	s.mu.Unlock()
	mc.ctx.cmID.Load().LeaveMulticast(mc.join)
	f.mu.Lock()
	kept := f.events[:0]
	for _, e := range f.events {
		if e.mc != mc {
			kept = append(kept, e)
		}
	}
	f.unsignal(len(f.events) - len(kept))
	clear(f.events[len(kept):])
	f.events = kept
	resp := uverbs.UcmDestroyIDResp{Reported: mc.reported}
	f.mu.Unlock()
	return f.copyOut(cmd.Response, bytesOf(&resp))
}

// Tokens the preload library puts in MIGRATE_ID's fd field when the
// client's descriptor is not an rdma_cm file: not open (ENOENT), or open
// on something else (EINVAL).
const (
	TokenNotOpen = 0xffffffff
	TokenNotUcma = 0xfffffffe
)

// migrateID is ucma_migrate_id: the context cmd.Id of the file the token
// names moves, with its queued events, to f.
func (f *File) migrateID(in []byte, _, outLen int) error {
	cmd := load[uverbs.UcmMigrateID](in)
	s := f.svc
	switch cmd.Fd {
	case TokenNotOpen:
		return errorf(unix.ENOENT, "MIGRATE_ID: descriptor not open")
	case TokenNotUcma:
		return errorf(unix.EINVAL, "MIGRATE_ID: not an rdma_cm descriptor")
	}
	s.mu.Lock()
	from := s.files[cmd.Fd]
	s.mu.Unlock()
	if from == nil || from.owner != f.owner {
		return errorf(unix.EINVAL, "MIGRATE_ID: not an rdma_cm descriptor of this process")
	}
	c, err := from.get(cmd.Id)
	if err != nil {
		return err
	}
	var resp uverbs.UcmMigrateResp
	if from != f {
		// Lock both files in a fixed order.
		a, b := from, f
		if a.token > b.token {
			a, b = b, a
		}
		a.mu.Lock()
		b.mu.Lock()
		kept := from.events[:0]
		moved := 0
		for _, e := range from.events {
			if e.ctx == c {
				f.events = append(f.events, e)
				moved++
				continue
			}
			kept = append(kept, e)
		}
		clear(from.events[len(kept):])
		from.events = kept
		s.mu.Lock()
		c.file.Store(f)
		s.mu.Unlock()
		resp.Reported = c.reported
		b.mu.Unlock()
		a.mu.Unlock()
		from.unsignal(moved)
		f.signal(moved)
	} else {
		f.mu.Lock()
		resp.Reported = c.reported
		f.mu.Unlock()
	}
	return f.copyOut(cmd.Response, bytesOf(&resp))
}

// wrap returns a CM error as the command's, keeping its errno.
func wrap(cmd string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Msg: cmd + ": " + err.Error(), Errno: errnoOf(err)}
}
