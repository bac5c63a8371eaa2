//go:build linux

package uverbs

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The ioctl ABI: ioctl(cmd_fd, RDMA_VERBS_IOCTL, hdr) with struct
// ib_uverbs_ioctl_hdr and its attributes (drivers/infiniband/core/
// uverbs_ioctl.c). The daemon serves the methods of the device object
// (INVOKE_WRITE, which runs any write command, GET_CONTEXT,
// QUERY_CONTEXT, QUERY_PORT, INFO_HANDLES), ASYNC_EVENT_ALLOC, and the
// object methods of ioctl_objects.go; any other method is
// EPROTONOSUPPORT, on which libibverbs runs the verb's write command
// through INVOKE_WRITE instead.

const (
	ioctlHdrSize  = int(24) // sizeof(struct ib_uverbs_ioctl_hdr)
	ioctlAttrSize = int(16) // sizeof(struct ib_uverbs_attr)
	pageSize      = 4096    // the kernel's PAGE_SIZE bound on hdr.length
)

// attrType is an attribute's kind (enum uverbs_attr_type).
type attrType uint8

const (
	attrPtrIn attrType = iota + 1
	attrPtrOut
	attrFdNew  // UVERBS_ATTR_TYPE_FD with UVERBS_ACCESS_NEW
	attrFdRead // UVERBS_ATTR_TYPE_FD with UVERBS_ACCESS_READ
	attrIdr    // UVERBS_ATTR_TYPE_IDR: a handle of an object of kind
)

// idrAccess is an IDR attribute's UVERBS_ACCESS_*.
type idrAccess uint8

const (
	accessRead idrAccess = iota + 1
	accessNew
	accessDestroy
)

// attrSpec is struct uverbs_attr_spec: what an attribute of a method
// takes.
type attrSpec struct {
	typ          attrType
	minLen, len  int       // ptr.min_len, ptr.len
	zeroTrailing bool      // UVERBS_ATTR_STRUCT: longer is fine if the rest is zero
	mandatory    bool      // UA_MANDATORY
	kind         objKind   // attrIdr: the object's type (0: one rxe has none of)
	access       idrAccess // attrIdr
}

func idr(kind objKind, access idrAccess, mandatory bool) attrSpec {
	return attrSpec{typ: attrIdr, kind: kind, access: access, mandatory: mandatory}
}

// u32In and u64In are UVERBS_ATTR_TYPE(u32), (u64) inputs; flagsIn is
// UVERBS_ATTR_FLAGS_IN (a u32 or a u64).
func u32In(mandatory bool) attrSpec   { return ptrIn(4, 4, mandatory) }
func u64In(mandatory bool) attrSpec   { return ptrIn(8, 8, mandatory) }
func flagsIn(mandatory bool) attrSpec { return ptrIn(4, 8, mandatory) }

const anyLen = 0xffff // UVERBS_ATTR_MIN_SIZE: len USHRT_MAX

func ptrIn(minLen, n int, mandatory bool) attrSpec {
	return attrSpec{typ: attrPtrIn, minLen: minLen, len: n, mandatory: mandatory}
}

func ptrOut(minLen, n int, mandatory bool) attrSpec {
	return attrSpec{typ: attrPtrOut, minLen: minLen, len: n, mandatory: mandatory}
}

// constIn is UVERBS_ATTR_CONST_IN: a u64 inline.
func constIn(mandatory bool) attrSpec { return ptrIn(8, 8, mandatory) }

// ioctlMethod is struct uverbs_api_ioctl_method.
type ioctlMethod struct {
	name   string
	attrs  map[uint16]attrSpec
	udata  bool // UVERBS_ATTR_UHW: UHW_IN and UHW_OUT
	fn     func(*bundle) error
	cmd    int // the write command of the same verb, if hasCmd
	hasCmd bool
}

// ioctlMethods is the uapi's method tree for rxe: object<<16 | method.
var ioctlMethods map[uint32]*ioctlMethod

func methodKey(object, method uint16) uint32 { return uint32(object)<<16 | uint32(method) }

func init() {
	ioctlMethods = map[uint32]*ioctlMethod{
		methodKey(ObjectDevice, MethodInvokeWrite): {name: "UVERBS_METHOD_INVOKE_WRITE", udata: true, fn: (*bundle).invokeWrite,
			attrs: map[uint16]attrSpec{
				AttrWriteCmd: constIn(true),
				AttrCoreIn:   ptrIn(4, anyLen, false),
				AttrCoreOut:  ptrOut(0, anyLen, false),
			}},
		methodKey(ObjectDevice, MethodGetContext): {name: "UVERBS_METHOD_GET_CONTEXT", udata: true, fn: (*bundle).getContext, cmd: CmdGetContext, hasCmd: true,
			attrs: map[uint16]attrSpec{
				AttrGetContextNumComp: ptrOut(4, 4, false),
				AttrGetContextCore:    ptrOut(8, 8, false),
			}},
		methodKey(ObjectDevice, MethodQueryContext): {name: "UVERBS_METHOD_QUERY_CONTEXT", fn: (*bundle).queryContext,
			attrs: map[uint16]attrSpec{
				AttrQueryContextNumComp: ptrOut(4, 4, false),
				AttrQueryContextCore:    ptrOut(8, 8, false),
			}},
		methodKey(ObjectDevice, MethodInfoHandles): {name: "UVERBS_METHOD_INFO_HANDLES", fn: (*bundle).infoHandles,
			attrs: map[uint16]attrSpec{
				AttrInfoObjectID:     constIn(true),
				AttrInfoTotalHandles: ptrOut(4, 4, false),
				AttrInfoHandlesList:  ptrOut(4, anyLen, false),
			}},
		methodKey(ObjectDevice, MethodQueryPort): {name: "UVERBS_METHOD_QUERY_PORT", fn: (*bundle).queryPort, cmd: CmdQueryPort, hasCmd: true,
			attrs: map[uint16]attrSpec{
				AttrQueryPortPortNum: constIn(true),
				AttrQueryPortResp: {typ: attrPtrOut, minLen: sizeOf[QueryPortRespEx](), len: sizeOf[QueryPortRespEx](),
					zeroTrailing: true, mandatory: true},
			}},
		methodKey(ObjectAsyncEvent, MethodAsyncEventAlloc): {name: "UVERBS_METHOD_ASYNC_EVENT_ALLOC", fn: (*bundle).asyncEventAlloc,
			attrs: map[uint16]attrSpec{
				AttrAsyncEventAllocFd: {typ: attrFdNew, mandatory: true},
			}},
	}
	addObjectMethods()
	for _, m := range ioctlMethods {
		if m.udata {
			m.attrs[AttrUhwIn] = ptrIn(0, anyLen, false)
			m.attrs[AttrUhwOut] = ptrOut(0, anyLen, false)
		}
	}
}

// MethodName names the method an ioctl request (its header first) calls
// (MethodNameOf), or "" for a buffer shorter than the header.
func MethodName(buf []byte) string {
	if len(buf) < ioctlHdrSize {
		return ""
	}
	hdr := load[IoctlHdr](buf)
	cmd := int64(-1)
	n := min(int(hdr.Num_attrs), (len(buf)-ioctlHdrSize)/ioctlAttrSize)
	for i := range n {
		if a := load[IoctlAttr](buf[ioctlHdrSize+i*ioctlAttrSize:]); a.Attr_id == AttrWriteCmd && a.Data <= 0xffffffff {
			cmd = int64(a.Data)
		}
	}
	return MethodNameOf(hdr.Object_id, hdr.Method_id, cmd)
}

// MethodVerb names the write command of the verb an ioctl request runs
// (uverbs.CommandName): INVOKE_WRITE's command, or the command of the
// same verb ("IB_USER_VERBS_CMD_CREATE_QP" for QP_CREATE); "" for a
// method without one, and for an INVOKE_WRITE without a core request
// (libibverbs' probe of the method, has_ioctl_write, no verb). Faults
// and coverage name verbs so on either ABI.
func MethodVerb(buf []byte) string {
	if len(buf) < ioctlHdrSize {
		return ""
	}
	hdr := load[IoctlHdr](buf)
	m := ioctlMethods[methodKey(hdr.Object_id, hdr.Method_id)]
	if m == nil {
		return ""
	}
	var b [hdrSize]byte
	if name := MethodName(buf); strings.Contains(name, "/") {
		n := min(int(hdr.Num_attrs), (len(buf)-ioctlHdrSize)/ioctlAttrSize)
		for i := range n {
			if load[IoctlAttr](buf[ioctlHdrSize+i*ioctlAttrSize:]).Attr_id == AttrCoreIn {
				_, c, _ := strings.Cut(name, "/")
				return c
			}
		}
		return ""
	}
	if !m.hasCmd {
		return ""
	}
	binary.NativeEndian.PutUint32(b[:], uint32(m.cmd))
	return CommandName(b[:])
}

// MethodNameOf names a method as the kernel's uapi does
// ("UVERBS_METHOD_QUERY_PORT"); for INVOKE_WRITE, with writeCmd (-1:
// none) the write command's name after a slash
// ("UVERBS_METHOD_INVOKE_WRITE/IB_USER_VERBS_CMD_ALLOC_PD"). A method the
// daemon does not serve is "ioctl:OBJECT/METHOD".
func MethodNameOf(object, method uint16, writeCmd int64) string {
	m := ioctlMethods[methodKey(object, method)]
	if m == nil {
		return fmt.Sprintf("ioctl:%d/%d", object, method)
	}
	if object != ObjectDevice || method != MethodInvokeWrite || writeCmd < 0 || writeCmd > 0xffffffff {
		return m.name
	}
	var b [hdrSize]byte
	binary.NativeEndian.PutUint32(b[:], uint32(writeCmd))
	if c := CommandName(b[:]); c != "" {
		return m.name + "/" + c
	}
	return m.name
}

// bundle is struct uverbs_attr_bundle: one ioctl's attributes.
type bundle struct {
	f       *File
	m       *ioctlMethod
	arg     uint64 // client address of the header
	attrs   []IoctlAttr
	present map[uint16]int // attribute id -> index in attrs
}

// attrAt is the client address of attribute i.
func (b *bundle) attrAt(i int) uint64 { return b.arg + uint64(ioctlHdrSize+i*ioctlAttrSize) }

// Ioctl is ioctl(cmd_fd, RDMA_VERBS_IOCTL, arg) (ib_uverbs_ioctl): buf is
// the header at client address arg and, when the client could read them,
// its attributes (a buffer of the header alone stands for attributes
// that cannot be read: EFAULT once they are needed). Outputs go to the
// client's memory. It returns the files the method hands over, or an
// error wrapping the kernel's errno.
func (f *File) Ioctl(arg uint64, buf []byte) (Reply, error) {
	if len(buf) < ioctlHdrSize {
		return Reply{}, errorf(unix.EFAULT, "ioctl header of %d bytes", len(buf))
	}
	hdr := load[IoctlHdr](buf)
	want := ioctlHdrSize + int(hdr.Num_attrs)*ioctlAttrSize
	if int(hdr.Length) > pageSize || int(hdr.Length) != want {
		return Reply{}, errorf(unix.EINVAL, "ioctl: length %d for %d attributes", hdr.Length, hdr.Num_attrs)
	}
	if hdr.Reserved1 != 0 || hdr.Reserved2 != 0 {
		return Reply{}, errorf(unix.EPROTONOSUPPORT, "ioctl: reserved fields %#x %#x", hdr.Reserved1, hdr.Reserved2)
	}
	if hdr.Driver_id != DriverRxe {
		return Reply{}, errorf(unix.EINVAL, "ioctl: driver_id %d, the device's is %d", hdr.Driver_id, DriverRxe)
	}
	m := ioctlMethods[methodKey(hdr.Object_id, hdr.Method_id)]
	if m == nil {
		return Reply{}, errorf(unix.EPROTONOSUPPORT, "ioctl: object %d method %d", hdr.Object_id, hdr.Method_id)
	}
	if len(buf) != want {
		return Reply{}, errorf(unix.EFAULT, "%s: attributes cannot be read", m.name)
	}
	b := &bundle{f: f, m: m, arg: arg, present: map[uint16]int{}}
	for i := range int(hdr.Num_attrs) {
		b.attrs = append(b.attrs, load[IoctlAttr](buf[ioctlHdrSize+i*ioctlAttrSize:]))
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Reply{}, errorf(unix.EIO, "%s: the file is closed", m.name)
	}
	for i := range b.attrs {
		if err := b.setAttr(i); err != nil {
			return Reply{}, err
		}
	}
	for id, s := range m.attrs {
		if _, ok := b.present[id]; s.mandatory && !ok {
			return Reply{}, errorf(unix.EINVAL, "%s: mandatory attribute %#x missing", m.name, id)
		}
	}
	f.resolveFds()
	f.reply, f.passing = Reply{}, nil
	if err := m.fn(b); err != nil {
		f.reply, f.passing = Reply{}, nil
		return Reply{}, err
	}
	if i, ok := b.present[AttrUhwOut]; ok && m.udata {
		if err := b.setOutput(i); err != nil {
			f.reply, f.passing = Reply{}, nil
			return Reply{}, err
		}
	}
	r := f.reply
	f.reply, f.handed, f.passing = Reply{}, f.passing, nil
	return r, nil
}

// setAttr is uverbs_set_attr and uverbs_process_attr of attribute i.
func (b *bundle) setAttr(i int) error {
	a := &b.attrs[i]
	s, ok := b.m.attrs[a.Attr_id]
	if !ok {
		if a.Flags&AttrFMandatory != 0 {
			return errorf(unix.EPROTONOSUPPORT, "%s: unknown mandatory attribute %#x", b.m.name, a.Attr_id)
		}
		return nil
	}
	if _, dup := b.present[a.Attr_id]; dup {
		return errorf(unix.EINVAL, "%s: attribute %#x twice", b.m.name, a.Attr_id)
	}
	reserved := binary.NativeEndian.Uint16(a.Attr_data[:])
	switch s.typ {
	case attrPtrIn, attrPtrOut:
		n := int(a.Len)
		if s.typ == attrPtrIn && n > s.len && s.zeroTrailing {
			data, err := b.read(a)
			if err != nil || slices.ContainsFunc(data[s.len:], func(c byte) bool { return c != 0 }) {
				return errorf(unix.EOPNOTSUPP, "%s: attribute %#x: %d bytes past its %d are not zero", b.m.name, a.Attr_id, n-s.len, s.len)
			}
		}
		if n < s.minLen || !s.zeroTrailing && n > s.len {
			return errorf(unix.EINVAL, "%s: attribute %#x of %d bytes, takes %d..%d", b.m.name, a.Attr_id, n, s.minLen, s.len)
		}
		if reserved != 0 {
			return errorf(unix.EINVAL, "%s: attribute %#x: reserved %#x", b.m.name, a.Attr_id, reserved)
		}
	case attrFdNew, attrFdRead, attrIdr:
		if reserved != 0 || a.Len != 0 {
			return errorf(unix.EINVAL, "%s: attribute %#x: reserved %#x, len %d", b.m.name, a.Attr_id, reserved, a.Len)
		}
		if (s.typ == attrFdNew || s.typ == attrIdr && s.access == accessNew) && !b.f.context {
			return errorf(unix.EINVAL, "%s: no context (GET_CONTEXT first)", b.m.name)
		}
		if s.typ == attrIdr && s.access != accessNew {
			// lookup_get_idr_uobject: a negative id is EINVAL, one
			// that names nothing ENOENT.
			if int64(a.Data) < 0 {
				return errorf(unix.EINVAL, "%s: attribute %#x: handle %d", b.m.name, a.Attr_id, int64(a.Data))
			}
			if a.Data > 0xffffffff || s.kind == 0 {
				return errorf(unix.ENOENT, "%s: attribute %#x: no object %d", b.m.name, a.Attr_id, a.Data)
			}
			if _, err := b.f.lookup(s.kind, uint32(a.Data)); err != nil {
				return err
			}
		}
	}
	b.present[a.Attr_id] = i
	return nil
}

// read returns a pointer attribute's bytes: inline in data up to 8
// bytes, else at the address data holds (EFAULT where it cannot be read).
func (b *bundle) read(a *IoctlAttr) ([]byte, error) {
	if a.Len <= 8 {
		var d [8]byte
		binary.NativeEndian.PutUint64(d[:], a.Data)
		return d[:a.Len], nil
	}
	d := make([]byte, a.Len)
	if _, err := b.f.mem.ReadAt(d, a.Data); err != nil {
		return nil, errorf(unix.EFAULT, "%s: attribute %#x at %#x: %v", b.m.name, a.Attr_id, a.Data, err)
	}
	return d, nil
}

// get returns attribute id, or nil when the request has none.
func (b *bundle) get(id uint16) *IoctlAttr {
	if i, ok := b.present[id]; ok {
		return &b.attrs[i]
	}
	return nil
}

// constant is _uverbs_get_const: attribute id as a value of at most max
// (EINVAL above it; ENOENT when absent).
func (b *bundle) constant(id uint16, max uint64) (uint64, error) {
	a := b.get(id)
	if a == nil {
		return 0, errorf(unix.ENOENT, "%s: attribute %#x missing", b.m.name, id)
	}
	if a.Data > max {
		return 0, errorf(unix.EINVAL, "%s: attribute %#x: %d above %d", b.m.name, id, a.Data, max)
	}
	return a.Data, nil
}

// setOutput is uverbs_set_output: UVERBS_ATTR_F_VALID_OUTPUT in the
// client's copy of attribute i.
func (b *bundle) setOutput(i int) error {
	var f [2]byte
	binary.NativeEndian.PutUint16(f[:], b.attrs[i].Flags|AttrFValidOutput)
	if _, err := b.f.mem.WriteAt(f[:], b.attrAt(i)+4); err != nil {
		return errorf(unix.EFAULT, "%s: attribute flags at %#x: %v", b.m.name, b.attrAt(i)+4, err)
	}
	return nil
}

// copyTo is uverbs_copy_to: as much of v as the attribute has room for,
// then its valid-output flag. An absent attribute is ENOENT, which the
// callers of optional outputs ignore (IS_UVERBS_COPY_ERR).
func (b *bundle) copyTo(id uint16, v []byte) error {
	i, ok := b.present[id]
	if !ok {
		return errorf(unix.ENOENT, "%s: attribute %#x missing", b.m.name, id)
	}
	a := &b.attrs[i]
	if n := min(int(a.Len), len(v)); n > 0 {
		if _, err := b.f.mem.WriteAt(v[:n], a.Data); err != nil {
			return errorf(unix.EFAULT, "%s: attribute %#x at %#x: %v", b.m.name, id, a.Data, err)
		}
	}
	return b.setOutput(i)
}

// copyOptional is copyTo of an optional output: its absence is no error.
func (b *bundle) copyOptional(id uint16, v []byte) error {
	if _, ok := b.present[id]; !ok {
		return nil
	}
	return b.copyTo(id, v)
}

// copyStructOrZero is uverbs_copy_to_struct_or_zero: v, and zeros over
// the rest of a longer attribute.
func (b *bundle) copyStructOrZero(id uint16, v []byte) error {
	if a := b.get(id); a != nil && int(a.Len) > len(v) {
		z := make([]byte, int(a.Len))
		copy(z, v)
		v = z
	}
	return b.copyTo(id, v)
}

// invokeWrite is UVERBS_METHOD_INVOKE_WRITE: a write command with its
// core request and response in CORE_IN and CORE_OUT and the driver's in
// UHW_IN and UHW_OUT.
func (b *bundle) invokeWrite() error {
	cmd, err := b.constant(AttrWriteCmd, 0xffffffff)
	if err != nil {
		return err
	}
	m, err := methodOf(uint32(cmd))
	if err != nil {
		return err
	}
	c := &call{f: b.f, ex: m.ex}
	if a := b.get(AttrCoreIn); a != nil {
		if c.in, err = b.read(a); err != nil {
			return err
		}
	}
	if a := b.get(AttrCoreOut); a != nil {
		c.resp, c.outLen = a.Data, int(a.Len)
	}
	if len(c.in) < m.req || c.outLen < m.resp {
		return errorf(unix.ENOSPC, "%s: request %d bytes, response room %d; needs %d and %d", m.name, len(c.in), c.outLen, m.req, m.resp)
	}
	if a := b.get(AttrUhwIn); a != nil {
		if c.drvIn, err = b.read(a); err != nil {
			return err
		}
	}
	if a := b.get(AttrUhwOut); a != nil {
		c.drvOut, c.drvOutLen = a.Data, int(a.Len)
	}
	if err := b.f.ready(m); err != nil {
		return err
	}
	if err := m.fn(c); err != nil {
		return err
	}
	if c.outLen > 0 {
		return b.setOutput(b.present[AttrCoreOut])
	}
	return nil
}

// getContext is UVERBS_METHOD_GET_CONTEXT: the ucontext, without the
// async event file (ASYNC_EVENT_ALLOC makes it).
func (b *bundle) getContext() error {
	f := b.f
	var n [4]byte
	binary.NativeEndian.PutUint32(n[:], uint32(f.dev.Query().NumCompVectors))
	if err := b.copyOptional(AttrGetContextNumComp, n[:]); err != nil {
		return err
	}
	var cs [8]byte
	binary.NativeEndian.PutUint64(cs[:], CoreSupportOptionalMrAccess)
	if err := b.copyOptional(AttrGetContextCore, cs[:]); err != nil {
		return err
	}
	if f.context {
		return errorf(unix.EINVAL, "%s: the file has a context", b.m.name)
	}
	f.startContext()
	return nil
}

// queryContext is UVERBS_METHOD_QUERY_CONTEXT: rxe has no
// query_ucontext, so after the outputs it is EOPNOTSUPP.
func (b *bundle) queryContext() error {
	f := b.f
	if !f.context {
		return errorf(unix.EINVAL, "%s: no context", b.m.name)
	}
	var n [4]byte
	binary.NativeEndian.PutUint32(n[:], uint32(f.dev.Query().NumCompVectors))
	if err := b.copyOptional(AttrQueryContextNumComp, n[:]); err != nil {
		return err
	}
	var cs [8]byte
	binary.NativeEndian.PutUint64(cs[:], CoreSupportOptionalMrAccess)
	if err := b.copyOptional(AttrQueryContextCore, cs[:]); err != nil {
		return err
	}
	return errorf(unix.EOPNOTSUPP, "%s: rxe has no query_ucontext", b.m.name)
}

// queryPort is UVERBS_METHOD_QUERY_PORT: struct
// ib_uverbs_query_port_resp_ex.
func (b *bundle) queryPort() error {
	f := b.f
	if !f.context {
		return errorf(unix.EINVAL, "%s: no context", b.m.name)
	}
	port, err := b.constant(AttrQueryPortPortNum, 0xff)
	if err != nil {
		return err
	}
	legacy, err := f.portResp(uint32(port))
	if err != nil {
		return wrap(b.m.name, err)
	}
	a, _ := f.dev.QueryPort(uint32(port))
	resp := QueryPortRespEx{Legacy_resp: legacy, Port_cap_flags2: a.PortCapFlags2}
	return b.copyStructOrZero(AttrQueryPortResp, bytesOf(&resp))
}

// objectKinds maps the object ids INFO_HANDLES takes to the file's kinds;
// COMP_CHANNEL and ASYNC_EVENT are objects without handles.
var objectKinds = map[uint64]objKind{
	ObjectDevice: 0, ObjectPD: kindPD, ObjectCompChannel: 0, ObjectCQ: kindCQ, ObjectQP: kindQP,
	ObjectSRQ: kindSRQ, ObjectAH: kindAH, ObjectMR: kindMR, ObjectMW: kindMW, ObjectAsyncEvent: 0,
}

// infoHandles is UVERBS_METHOD_INFO_HANDLES: the handles of one type of
// object, newest first (the file's uobjects list), as many as fit.
func (b *bundle) infoHandles() error {
	a := b.get(AttrInfoHandlesList)
	if a == nil || a.Len == 0 || a.Len%4 != 0 {
		return errorf(unix.EINVAL, "%s: handles list missing or not whole u32s", b.m.name)
	}
	id, err := b.constant(AttrInfoObjectID, 0xffff)
	if err != nil {
		return err
	}
	kind, ok := objectKinds[id]
	if !ok {
		return errorf(unix.EINVAL, "%s: object %d", b.m.name, id)
	}
	var hs []uint32
	for h, o := range b.f.objects {
		if kind != 0 && o.kind == kind {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	slices.Reverse(hs)
	hs = hs[:min(len(hs), int(a.Len)/4)]
	list := make([]byte, 4*len(hs))
	for i, h := range hs {
		binary.NativeEndian.PutUint32(list[4*i:], h)
	}
	if err := b.copyTo(AttrInfoHandlesList, list); err != nil {
		return err
	}
	var total [8]byte
	binary.NativeEndian.PutUint64(total[:], uint64(len(hs)))
	return b.copyTo(AttrInfoTotalHandles, total[:])
}

// asyncEventAlloc is UVERBS_METHOD_ASYNC_EVENT_ALLOC: a new async event
// file, its descriptor number stored in the attribute's data (s64).
func (b *bundle) asyncEventAlloc() error {
	f := b.f
	ev, err := newEventFile(true)
	if err != nil {
		return err
	}
	i := b.present[AttrAsyncEventAllocFd]
	at := b.attrAt(i) + 8
	var zero [8]byte
	if _, err := f.mem.WriteAt(zero[:], at); err != nil {
		ev.close()
		return errorf(unix.EFAULT, "%s: attribute data at %#x: %v", b.m.name, at, err)
	}
	f.handAsync(ev, at)
	return nil
}
