//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// ioctlAt is where the test clients' ioctl headers lie; ioctlOut is an
// area for the attributes' buffers.
const (
	ioctlAt  = clientBase + 0x40000
	ioctlOut = clientBase + 0x50000
)

// attr builds one attribute.
func attr(id uint16, n uint16, flags uint16, data uint64) IoctlAttr {
	return IoctlAttr{Attr_id: id, Len: n, Flags: flags, Data: data}
}

// ioctlBuf lays out a header and its attributes as libibverbs does.
func ioctlBuf(object, method uint16, attrs ...IoctlAttr) []byte {
	h := IoctlHdr{Length: uint16(ioctlHdrSize + len(attrs)*ioctlAttrSize), Object_id: object, Method_id: method,
		Num_attrs: uint16(len(attrs)), Driver_id: DriverRxe}
	b := append([]byte(nil), bytesOf(&h)...)
	for i := range attrs {
		b = append(b, bytesOf(&attrs[i])...)
	}
	return b
}

// ioctl puts buf at ioctlAt in the client's memory and calls Ioctl.
func (c *client) ioctl(buf []byte) (Reply, error) {
	c.mem.WriteAt(buf, ioctlAt)
	return c.f.Ioctl(ioctlAt, buf)
}

// attrFlags reads back the flags the daemon left in attribute i.
func (c *client) attrFlags(i int) uint16 {
	var b [2]byte
	c.mem.ReadAt(b[:], ioctlAt+uint64(ioctlHdrSize+i*ioctlAttrSize)+4)
	return binary.NativeEndian.Uint16(b[:])
}

func (c *client) read(addr uint64, n int) []byte {
	b := make([]byte, n)
	if _, err := c.mem.ReadAt(b, addr); err != nil {
		c.t.Fatal(err)
	}
	return b
}

// getContextIoctl is UVERBS_METHOD_GET_CONTEXT with both outputs.
func getContextIoctl() []byte {
	return ioctlBuf(ObjectDevice, MethodGetContext,
		attr(AttrGetContextNumComp, 4, 0, ioctlOut), attr(AttrGetContextCore, 8, 0, ioctlOut+8))
}

// invokeWrite is UVERBS_METHOD_INVOKE_WRITE of cmd with its core request
// in memory at ioctlOut+0x100 and its response room at ioctlOut+0x200.
func (c *client) invokeWrite(cmd uint32, req []byte, respLen int, drvOut int) (Reply, error) {
	c.mem.WriteAt(req, ioctlOut+0x100)
	in := attr(AttrCoreIn, uint16(len(req)), AttrFMandatory, ioctlOut+0x100)
	if len(req) <= 8 {
		var d [8]byte
		copy(d[:], req)
		in.Data = binary.NativeEndian.Uint64(d[:])
	}
	attrs := []IoctlAttr{attr(AttrWriteCmd, 8, AttrFMandatory, uint64(cmd)), in}
	if respLen > 0 {
		attrs = append(attrs, attr(AttrCoreOut, uint16(respLen), AttrFMandatory, ioctlOut+0x200))
	}
	if drvOut > 0 {
		attrs = append(attrs, attr(AttrUhwOut, uint16(drvOut), 0, ioctlOut+0x200+uint64(respLen)))
	}
	return c.ioctl(ioctlBuf(ObjectDevice, MethodInvokeWrite, attrs...))
}

// TestIoctlContextPortAndWrite: libibverbs' opening sequence on the ioctl
// ABI: GET_CONTEXT's outputs, ASYNC_EVENT_ALLOC's file, QUERY_PORT as the
// write command answers, a write command through INVOKE_WRITE, and
// INFO_HANDLES listing what it made.
func TestIoctlContextPortAndWrite(t *testing.T) {
	dev := newDevice(t)
	c := newClient(t, dev)

	// has_ioctl_write's probe: INVOKE_WRITE of QUERY_DEVICE with no
	// request is ENOSPC (not EPROTONOSUPPORT: the method exists), and no
	// verb.
	probe := ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, CmdQueryDevice))
	_, err := c.ioctl(probe)
	errnoIs(t, err, unix.ENOSPC)
	if v := MethodVerb(probe); v != "" {
		t.Errorf("the probe's verb %q", v)
	}

	if _, err := c.ioctl(getContextIoctl()); err != nil {
		t.Fatal(err)
	}
	if got, want := binary.NativeEndian.Uint32(c.read(ioctlOut, 4)), uint32(dev.Query().NumCompVectors); got != want {
		t.Errorf("num_comp_vectors %d, want %d", got, want)
	}
	if got := binary.NativeEndian.Uint64(c.read(ioctlOut+8, 8)); got != CoreSupportOptionalMrAccess {
		t.Errorf("core_support %#x, want %#x", got, CoreSupportOptionalMrAccess)
	}
	for i := range 2 {
		if c.attrFlags(i)&AttrFValidOutput == 0 {
			t.Errorf("attribute %d: no UVERBS_ATTR_F_VALID_OUTPUT", i)
		}
	}
	_, err = c.ioctl(getContextIoctl())
	errnoIs(t, err, unix.EINVAL) // a second context

	r, err := c.ioctl(ioctlBuf(ObjectAsyncEvent, MethodAsyncEventAlloc, attr(AttrAsyncEventAllocFd, 0, AttrFMandatory, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Files) != 1 || r.Files[0].At != ioctlAt+uint64(ioctlHdrSize)+8 {
		t.Fatalf("ASYNC_EVENT_ALLOC handed %+v, want one file stored in the attribute's data at %#x", r.Files, ioctlAt+uint64(ioctlHdrSize)+8)
	}
	if c.f.async.Load() == nil || c.f.async.Load().theirs != r.Files[0].File {
		t.Error("the allocated file is not the context's async event file")
	}

	// QUERY_PORT: the legacy response as the write command gives it.
	resp := uint64(ioctlOut + 0x300)
	if _, err := c.ioctl(ioctlBuf(ObjectDevice, MethodQueryPort, attr(AttrQueryPortPortNum, 8, AttrFMandatory, 1),
		attr(AttrQueryPortResp, uint16(sizeOf[QueryPortRespEx]()), AttrFMandatory, resp))); err != nil {
		t.Fatal(err)
	}
	ex := load[QueryPortRespEx](c.read(resp, sizeOf[QueryPortRespEx]()))
	legacy, _ := must(c, CmdQueryPort, &QueryPort{Num: 1}, sizeOf[QueryPortResp]())
	if got, want := bytesOf(&ex.Legacy_resp), legacy; string(got) != string(want) {
		t.Errorf("QUERY_PORT ioctl legacy_resp %x, write %x", got, want)
	}
	if ex.Legacy_resp.State != 4 || ex.Legacy_resp.Gid_tbl_len == 0 {
		t.Errorf("port state %d, gid_tbl_len %d", ex.Legacy_resp.State, ex.Legacy_resp.Gid_tbl_len)
	}
	_, err = c.ioctl(ioctlBuf(ObjectDevice, MethodQueryPort, attr(AttrQueryPortPortNum, 8, AttrFMandatory, 2),
		attr(AttrQueryPortResp, uint16(sizeOf[QueryPortRespEx]()), AttrFMandatory, resp)))
	errnoIs(t, err, unix.EINVAL) // rxe has one port

	// ALLOC_PD through INVOKE_WRITE: the handle in CORE_OUT, flagged.
	req := make([]byte, sizeOf[AllocPd]())
	if _, err := c.invokeWrite(CmdAllocPd, req, sizeOf[AllocPdResp](), 0); err != nil {
		t.Fatal(err)
	}
	h := binary.NativeEndian.Uint32(c.read(ioctlOut+0x200, 4))
	if o, err := c.f.lookup(kindPD, h); err != nil || o.pd == nil {
		t.Fatalf("PD handle %d from INVOKE_WRITE: %v", h, err)
	}
	if c.attrFlags(2)&AttrFValidOutput == 0 {
		t.Error("CORE_OUT: no UVERBS_ATTR_F_VALID_OUTPUT")
	}
	// REG_MR with the driver's response room (rxe writes none).
	mr := RegMr{Start: clientBase + 0x1000, Length: 4096, Hca_va: clientBase + 0x1000, Pd_handle: h,
		Access_flags: uint32(ib.AccessLocalWrite)}
	if _, err := c.invokeWrite(CmdRegMr, bytesOf(&mr), sizeOf[RegMrResp](), 8); err != nil {
		t.Fatal(err)
	}
	if c.attrFlags(3)&AttrFValidOutput == 0 {
		t.Error("UHW_OUT: no UVERBS_ATTR_F_VALID_OUTPUT after a method with udata")
	}

	// INFO_HANDLES lists the PD; QUERY_CONTEXT writes its outputs, then
	// rxe has no query_ucontext.
	if _, err := c.ioctl(ioctlBuf(ObjectDevice, MethodInfoHandles, attr(AttrInfoObjectID, 8, AttrFMandatory, ObjectPD),
		attr(AttrInfoTotalHandles, 4, 0, ioctlOut+0x400), attr(AttrInfoHandlesList, 16, 0, ioctlOut+0x410))); err != nil {
		t.Fatal(err)
	}
	if n, first := binary.NativeEndian.Uint32(c.read(ioctlOut+0x400, 4)), binary.NativeEndian.Uint32(c.read(ioctlOut+0x410, 4)); n != 1 || first != h {
		t.Errorf("INFO_HANDLES: %d handles, first %d; want 1, %d", n, first, h)
	}
	c.mem.WriteAt(make([]byte, 4), ioctlOut)
	_, err = c.ioctl(ioctlBuf(ObjectDevice, MethodQueryContext, attr(AttrQueryContextNumComp, 4, 0, ioctlOut)))
	errnoIs(t, err, unix.EOPNOTSUPP)
	if got := binary.NativeEndian.Uint32(c.read(ioctlOut, 4)); got != uint32(dev.Query().NumCompVectors) {
		t.Errorf("QUERY_CONTEXT num_comp_vectors %d", got)
	}
}

// TestIoctlMalformed: each malformed request gets the kernel's errno
// (ib_uverbs_ioctl, ib_uverbs_cmd_verbs, uverbs_set_attr,
// uverbs_process_attr), and none touches another client's objects.
func TestIoctlMalformed(t *testing.T) {
	dev := newDevice(t)
	other := newClient(t, dev)
	must(other, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	pdResp, _ := must(other, CmdAllocPd, &AllocPd{}, sizeOf[AllocPdResp]())
	otherPD := binary.NativeEndian.Uint32(pdResp)

	c := newClient(t, dev)
	port := attr(AttrQueryPortPortNum, 8, AttrFMandatory, 1)
	portResp := attr(AttrQueryPortResp, uint16(sizeOf[QueryPortRespEx]()), AttrFMandatory, ioctlOut)
	hdrWith := func(b []byte, edit func(*IoctlHdr)) []byte {
		h := load[IoctlHdr](b)
		edit(&h)
		copy(b, bytesOf(&h))
		return b
	}
	dealloc := make([]byte, 4)
	binary.NativeEndian.PutUint32(dealloc, otherPD)
	cases := []struct {
		name    string
		context bool // on a file with a context
		buf     []byte
		want    unix.Errno
	}{
		{"length short of the attributes", false, hdrWith(ioctlBuf(ObjectDevice, MethodGetContext), func(h *IoctlHdr) { h.Num_attrs = 1 }), unix.EINVAL},
		{"length past the attributes", false, hdrWith(ioctlBuf(ObjectDevice, MethodGetContext), func(h *IoctlHdr) { h.Length += 16 }), unix.EINVAL},
		{"num_attrs past PAGE_SIZE", false, hdrWith(ioctlBuf(ObjectDevice, MethodGetContext), func(h *IoctlHdr) {
			h.Num_attrs = 300
			h.Length = uint16(ioctlHdrSize + 300*ioctlAttrSize)
		}), unix.EINVAL},
		{"reserved1", false, hdrWith(getContextIoctl(), func(h *IoctlHdr) { h.Reserved1 = 1 }), unix.EPROTONOSUPPORT},
		{"reserved2", false, hdrWith(getContextIoctl(), func(h *IoctlHdr) { h.Reserved2 = 1 }), unix.EPROTONOSUPPORT},
		{"another driver_id", false, hdrWith(getContextIoctl(), func(h *IoctlHdr) { h.Driver_id = DriverRxe + 1 }), unix.EINVAL},
		{"unknown object", false, ioctlBuf(0x200, 0), unix.EPROTONOSUPPORT},
		{"unknown method", false, ioctlBuf(ObjectDevice, 0x99), unix.EPROTONOSUPPORT},
		{"attributes unreadable", false, getContextIoctl()[:ioctlHdrSize], unix.EFAULT},
		{"unknown mandatory attribute", false, ioctlBuf(ObjectDevice, MethodGetContext, attr(0x77, 4, AttrFMandatory, 0)), unix.EPROTONOSUPPORT},
		{"driver namespace attribute, mandatory", false, ioctlBuf(ObjectDevice, MethodQueryContext, attr(AttrUhwIn, 4, AttrFMandatory, 0)), unix.EPROTONOSUPPORT},
		{"duplicate attribute", true, ioctlBuf(ObjectDevice, MethodQueryPort, port, port, portResp), unix.EINVAL},
		{"const of 4 bytes", true, ioctlBuf(ObjectDevice, MethodQueryPort, attr(AttrQueryPortPortNum, 4, AttrFMandatory, 1), portResp), unix.EINVAL},
		{"output shorter than its struct", true, ioctlBuf(ObjectDevice, MethodQueryPort, port, attr(AttrQueryPortResp, 40, AttrFMandatory, ioctlOut)), unix.EINVAL},
		{"u32 output of 8 bytes", false, ioctlBuf(ObjectDevice, MethodGetContext, attr(AttrGetContextNumComp, 8, 0, ioctlOut)), unix.EINVAL},
		{"attribute reserved", true, ioctlBuf(ObjectDevice, MethodQueryPort, IoctlAttr{Attr_id: AttrQueryPortPortNum, Len: 8, Attr_data: [2]byte{1}, Data: 1}, portResp), unix.EINVAL},
		{"mandatory attribute missing", true, ioctlBuf(ObjectDevice, MethodQueryPort, portResp), unix.EINVAL},
		{"fd attribute with a length", true, ioctlBuf(ObjectAsyncEvent, MethodAsyncEventAlloc, attr(AttrAsyncEventAllocFd, 4, AttrFMandatory, 0)), unix.EINVAL},
		{"fd attribute before a context", false, ioctlBuf(ObjectAsyncEvent, MethodAsyncEventAlloc, attr(AttrAsyncEventAllocFd, 0, AttrFMandatory, 0)), unix.EINVAL},
		{"port query before a context", false, ioctlBuf(ObjectDevice, MethodQueryPort, port, portResp), unix.EINVAL},
		{"port number past u8", true, ioctlBuf(ObjectDevice, MethodQueryPort, attr(AttrQueryPortPortNum, 8, AttrFMandatory, 0x101), portResp), unix.EINVAL},
		{"write command past u32", true, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, 1<<32)), unix.EINVAL},
		{"write command unknown", true, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, 200)), unix.EOPNOTSUPP},
		{"core request of 2 bytes", true, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, CmdDeallocPd), attr(AttrCoreIn, 2, 0, 0)), unix.EINVAL},
		{"core request short of the command", true, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, CmdAllocPd)), unix.ENOSPC},
		{"write command before a context", false, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, CmdDeallocPd), attr(AttrCoreIn, 4, 0, uint64(otherPD))), unix.EINVAL},
		{"another client's PD", true, ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, CmdDeallocPd),
			attr(AttrCoreIn, 4, 0, uint64(binary.NativeEndian.Uint32(dealloc)))), unix.ENOENT},
		{"total without the list", true, ioctlBuf(ObjectDevice, MethodInfoHandles, attr(AttrInfoObjectID, 8, AttrFMandatory, ObjectPD), attr(AttrInfoTotalHandles, 4, 0, ioctlOut)), unix.EINVAL},
		{"handles of an unknown object", true, ioctlBuf(ObjectDevice, MethodInfoHandles, attr(AttrInfoObjectID, 8, AttrFMandatory, 0x55), attr(AttrInfoHandlesList, 4, 0, ioctlOut)), unix.EINVAL},
		{"output at an unmapped address", true, ioctlBuf(ObjectDevice, MethodQueryPort, port, attr(AttrQueryPortResp, uint16(sizeOf[QueryPortRespEx]()), AttrFMandatory, 0x1000)), unix.EFAULT},
	}
	// One client never gets a context; c gets one.
	none := newClient(t, dev)
	if _, err := c.ioctl(getContextIoctl()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		cl := none
		if tc.context {
			cl = c
		}
		_, err := cl.ioctl(tc.buf)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// An unknown optional attribute is ignored.
	if _, err := c.ioctl(ioctlBuf(ObjectDevice, MethodQueryPort, attr(0x33, 4, 0, 0), port, portResp)); err != nil {
		t.Errorf("unknown optional attribute: %v", err)
	}
	// The other client's PD is whole, and its file answers as before.
	if o, err := other.f.lookup(kindPD, otherPD); err != nil || o.pd == nil {
		t.Fatalf("the other client's PD %d: %v", otherPD, err)
	}
	if len(other.f.objects) != 1 {
		t.Errorf("the other client has %d objects, want its one PD", len(other.f.objects))
	}
	must(other, CmdDeallocPd, &DeallocPd{Handle: otherPD}, 0)
}

// FuzzIoctl feeds sequences of ioctl requests (a GET_CONTEXT first, then
// the input's) to a fresh File: each returns or fails with an errno,
// nothing panics, and Close leaves no object behind.
func FuzzIoctl(f *testing.F) {
	pd := make([]byte, sizeOf[AllocPd]())
	invoke := func(cmd uint32, in []byte) []byte {
		var d [8]byte
		copy(d[:], in)
		return ioctlBuf(ObjectDevice, MethodInvokeWrite, attr(AttrWriteCmd, 8, AttrFMandatory, uint64(cmd)),
			attr(AttrCoreIn, uint16(len(in)), 0, binary.NativeEndian.Uint64(d[:])), attr(AttrCoreOut, 4, 0, ioctlOut))
	}
	f.Add(writes(ioctlBuf(ObjectAsyncEvent, MethodAsyncEventAlloc, attr(AttrAsyncEventAllocFd, 0, AttrFMandatory, 0))))
	f.Add(writes(ioctlBuf(ObjectDevice, MethodQueryPort, attr(AttrQueryPortPortNum, 8, AttrFMandatory, 1),
		attr(AttrQueryPortResp, 48, AttrFMandatory, ioctlOut))))
	f.Add(writes(invoke(CmdAllocPd, pd), invoke(CmdDeallocPd, []byte{0, 0, 0, 0})))
	f.Add(writes(ioctlBuf(ObjectDevice, MethodInfoHandles, attr(AttrInfoObjectID, 8, AttrFMandatory, ObjectPD),
		attr(AttrInfoTotalHandles, 4, 0, ioctlOut), attr(AttrInfoHandlesList, 64, 0, ioctlOut+8))))
	f.Add(writes(getContextIoctl(), ioctlBuf(ObjectDevice, MethodQueryContext)))
	cq := ioctlBuf(ObjectCQ, MethodCqCreate, attr(AttrCreateCqHandle, 0, AttrFMandatory, 0),
		attr(AttrCreateCqCqe, 4, AttrFMandatory, 8), attr(AttrCreateCqUserHandle, 8, AttrFMandatory, 1),
		attr(AttrCreateCqCompVector, 4, AttrFMandatory, 0), attr(AttrCreateCqRespCqe, 4, AttrFMandatory, ioctlOut),
		attr(AttrUhwOut, uint16(sizeOf[RxeCreateCqResp]()), 0, ioctlOut+0x100))
	qp := ioctlBuf(ObjectQP, MethodQpCreate, attr(AttrCreateQpHandle, 0, AttrFMandatory, 0),
		attr(AttrCreateQpPdHandle, 0, 0, 0), attr(AttrCreateQpSendCqHandle, 0, 0, 1), attr(AttrCreateQpRecvCqHandle, 0, 0, 1),
		attr(AttrCreateQpUserHandle, 8, AttrFMandatory, 2), attr(AttrCreateQpCap, 20, AttrFMandatory, ioctlOut+0x200),
		attr(AttrCreateQpType, 8, AttrFMandatory, 2), attr(AttrCreateQpRespCap, 20, AttrFMandatory, ioctlOut+0x300),
		attr(AttrCreateQpRespQpNum, 4, AttrFMandatory, ioctlOut+0x400), attr(AttrUhwOut, uint16(sizeOf[RxeCreateQpResp]()), 0, ioctlOut+0x500))
	f.Add(writes(invoke(CmdAllocPd, pd), cq, qp,
		ioctlBuf(ObjectQP, MethodQpDestroy, attr(AttrDestroyQpHandle, 0, AttrFMandatory, 2), attr(AttrDestroyQpResp, 4, AttrFMandatory, ioctlOut)),
		ioctlBuf(ObjectCQ, MethodCqDestroy, attr(AttrDestroyCqHandle, 0, AttrFMandatory, 1), attr(AttrDestroyCqResp, 8, AttrFMandatory, ioctlOut)),
		ioctlBuf(ObjectPD, MethodPdDestroy, attr(AttrDestroyPdHandle, 0, AttrFMandatory, 0))))
	f.Add(writes(ioctlBuf(ObjectDevice, MethodQueryGidEntry, attr(AttrGidEntryPort, 8, AttrFMandatory, 1),
		attr(AttrGidEntryIndex, 8, AttrFMandatory, 0), attr(AttrGidEntryResp, 32, AttrFMandatory, ioctlOut))))
	dev := newDeviceFor(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newClient(t, dev)
		if _, err := c.ioctl(getContextIoctl()); err != nil {
			t.Fatal(err)
		}
		for len(in) >= 2 {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				n = len(in)
			}
			buf := in[:n]
			in = in[n:]
			_, err := c.ioctl(buf)
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("ioctl: %v is no uverbs error", err)
			}
		}
		if err := c.f.Close(); err != nil {
			t.Fatal(err)
		}
		if len(c.f.objects) != 0 {
			t.Fatalf("%d objects after Close", len(c.f.objects))
		}
	})
}

// TestIoctlObjectMethods: CQ_CREATE, QP_CREATE and the destroy methods
// make and remove the objects the write commands do, with their outputs
// where the attributes say; QUERY_GID_ENTRY answers as the device's GID
// table; a handle of another client's object is ENOENT and leaves it be.
func TestIoctlObjectMethods(t *testing.T) {
	dev := newDevice(t)
	other := newClient(t, dev)
	must(other, CmdGetContext, &GetContext{}, sizeOf[GetContextResp]())
	otherCQ, _ := must(other, CmdCreateCq, &CreateCq{Cqe: 4, Comp_channel: -1}, sizeOf[CreateCqResp]()+sizeOf[RxeCreateCqResp]())
	otherCQHandle := binary.NativeEndian.Uint32(otherCQ)

	c := newClient(t, dev)
	if _, err := c.ioctl(getContextIoctl()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.invokeWrite(CmdAllocPd, make([]byte, sizeOf[AllocPd]()), sizeOf[AllocPdResp](), 0); err != nil {
		t.Fatal(err)
	}
	pd := binary.NativeEndian.Uint32(c.read(ioctlOut+0x200, 4))

	drv := uint64(ioctlOut + 0x600)
	cq := ioctlBuf(ObjectCQ, MethodCqCreate, attr(AttrCreateCqHandle, 0, AttrFMandatory, 0),
		attr(AttrCreateCqCqe, 4, AttrFMandatory, 16), attr(AttrCreateCqUserHandle, 8, AttrFMandatory, 0xabc),
		attr(AttrCreateCqCompVector, 4, AttrFMandatory, 0), attr(AttrCreateCqRespCqe, 4, AttrFMandatory, ioctlOut),
		attr(AttrUhwOut, uint16(sizeOf[RxeCreateCqResp]()), 0, drv))
	if _, err := c.ioctl(cq); err != nil {
		t.Fatal(err)
	}
	cqHandle := uint32(binary.NativeEndian.Uint64(c.read(ioctlAt+uint64(ioctlHdrSize)+8, 8)))
	if o, err := c.f.lookup(kindCQ, cqHandle); err != nil || o.userHandle != 0xabc {
		t.Fatalf("CQ handle %d: %v", cqHandle, err)
	}
	if cqe := binary.NativeEndian.Uint32(c.read(ioctlOut, 4)); cqe < 16 {
		t.Errorf("resp cqe %d, asked 16", cqe)
	}
	if mi := load[RxeCreateCqResp](c.read(drv, sizeOf[RxeCreateCqResp]())); mi.Mi.Size == 0 {
		t.Error("no mmap info of the CQ's queue in UHW_OUT")
	}

	cp := QpCap{Send_wr: 4, Recv_wr: 4, Send_sge: 1, Recv_sge: 1}
	c.mem.WriteAt(bytesOf(&cp), ioctlOut+0x100)
	qp := ioctlBuf(ObjectQP, MethodQpCreate, attr(AttrCreateQpHandle, 0, AttrFMandatory, 0),
		attr(AttrCreateQpPdHandle, 0, 0, uint64(pd)), attr(AttrCreateQpSendCqHandle, 0, 0, uint64(cqHandle)),
		attr(AttrCreateQpRecvCqHandle, 0, 0, uint64(cqHandle)), attr(AttrCreateQpUserHandle, 8, AttrFMandatory, 0xdef),
		attr(AttrCreateQpCap, uint16(sizeOf[QpCap]()), AttrFMandatory, ioctlOut+0x100),
		attr(AttrCreateQpType, 8, AttrFMandatory, 2 /* IB_UVERBS_QPT_RC */),
		attr(AttrCreateQpRespCap, uint16(sizeOf[QpCap]()), AttrFMandatory, ioctlOut+0x200),
		attr(AttrCreateQpRespQpNum, 4, AttrFMandatory, ioctlOut+0x300),
		attr(AttrUhwOut, uint16(sizeOf[RxeCreateQpResp]()), 0, drv))
	if _, err := c.ioctl(qp); err != nil {
		t.Fatal(err)
	}
	qpHandle := uint32(binary.NativeEndian.Uint64(c.read(ioctlAt+uint64(ioctlHdrSize)+8, 8)))
	o, err := c.f.lookup(kindQP, qpHandle)
	if err != nil {
		t.Fatal(err)
	}
	if qpn := binary.NativeEndian.Uint32(c.read(ioctlOut+0x300, 4)); qpn != o.qp.qp.QPNum() {
		t.Errorf("resp qp_num %#x, the QP's %#x", qpn, o.qp.qp.QPNum())
	}
	if got := load[QpCap](c.read(ioctlOut+0x200, sizeOf[QpCap]())); got.Send_wr < 4 || got.Recv_sge < 1 {
		t.Errorf("resp cap %+v", got)
	}
	// A QP of another client's CQ names nothing.
	_, err = c.ioctl(ioctlBuf(ObjectQP, MethodQpCreate, attr(AttrCreateQpHandle, 0, AttrFMandatory, 0),
		attr(AttrCreateQpSendCqHandle, 0, 0, uint64(otherCQHandle+10))))
	errnoIs(t, err, unix.ENOENT)

	// QUERY_GID_ENTRY of slot 0: the device's entry.
	e0, err := dev.QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ioctl(ioctlBuf(ObjectDevice, MethodQueryGidEntry, attr(AttrGidEntryPort, 8, AttrFMandatory, 1),
		attr(AttrGidEntryIndex, 8, AttrFMandatory, 0), attr(AttrGidEntryFlags, 4, 0, 0),
		attr(AttrGidEntryResp, uint16(sizeOf[GidEntry]()), AttrFMandatory, ioctlOut+0x400))); err != nil {
		t.Fatal(err)
	}
	ge := load[GidEntry](c.read(ioctlOut+0x400, sizeOf[GidEntry]()))
	if string(bytesOf(&ge.Gid)) != string(e0.GID[:]) || ge.Port_num != 1 || ge.Gid_type != GidTypeRoCEv2 {
		t.Errorf("GID entry %+v, the device's %+v", ge, e0)
	}
	_, err = c.ioctl(ioctlBuf(ObjectDevice, MethodQueryGidEntry, attr(AttrGidEntryPort, 8, AttrFMandatory, 1),
		attr(AttrGidEntryIndex, 8, AttrFMandatory, 0), attr(AttrGidEntryFlags, 4, 0, 1),
		attr(AttrGidEntryResp, uint16(sizeOf[GidEntry]()), AttrFMandatory, ioctlOut+0x400)))
	errnoIs(t, err, unix.EINVAL) // no flags are defined

	// Destroying the other client's CQ by its handle: ENOENT (this file
	// has no such handle) or EINVAL (a handle of another type here).
	_, err = c.ioctl(ioctlBuf(ObjectCQ, MethodCqDestroy, attr(AttrDestroyCqHandle, 0, AttrFMandatory, uint64(otherCQHandle+10)),
		attr(AttrDestroyCqResp, 8, AttrFMandatory, ioctlOut)))
	errnoIs(t, err, unix.ENOENT)
	if _, err := other.f.lookup(kindCQ, otherCQHandle); err != nil {
		t.Fatalf("the other client's CQ: %v", err)
	}
	// The CQ is in use: EBUSY; after the QP it goes.
	_, err = c.ioctl(ioctlBuf(ObjectCQ, MethodCqDestroy, attr(AttrDestroyCqHandle, 0, AttrFMandatory, uint64(cqHandle)),
		attr(AttrDestroyCqResp, 8, AttrFMandatory, ioctlOut)))
	errnoIs(t, err, unix.EBUSY)
	for _, d := range [][]byte{
		ioctlBuf(ObjectQP, MethodQpDestroy, attr(AttrDestroyQpHandle, 0, AttrFMandatory, uint64(qpHandle)), attr(AttrDestroyQpResp, 4, AttrFMandatory, ioctlOut)),
		ioctlBuf(ObjectCQ, MethodCqDestroy, attr(AttrDestroyCqHandle, 0, AttrFMandatory, uint64(cqHandle)), attr(AttrDestroyCqResp, 8, AttrFMandatory, ioctlOut)),
		ioctlBuf(ObjectPD, MethodPdDestroy, attr(AttrDestroyPdHandle, 0, AttrFMandatory, uint64(pd))),
	} {
		if _, err := c.ioctl(d); err != nil {
			t.Fatalf("%s: %v", MethodName(d), err)
		}
		if v := MethodVerb(d); !strings.HasPrefix(v, "IB_USER_VERBS_CMD_") {
			t.Errorf("%s: verb %q", MethodName(d), v)
		}
	}
	if len(c.f.objects) != 0 {
		t.Errorf("%d objects left", len(c.f.objects))
	}
	if v := MethodVerb(qp); v != "IB_USER_VERBS_CMD_CREATE_QP" {
		t.Errorf("QP_CREATE's verb %q", v)
	}
}

// TestIoctlQueryGIDTable: QUERY_GID_TABLE lists the device's valid GIDs,
// each in a slot of the caller's size; too few slots is EINVAL.
func TestIoctlQueryGIDTable(t *testing.T) {
	dev := newDevice(t)
	c := newClient(t, dev)
	if _, err := c.ioctl(getContextIoctl()); err != nil {
		t.Fatal(err)
	}
	var want []emu.GIDEntry
	pa, _ := dev.QueryPort(1)
	for i := range pa.GIDTblLen {
		if e, err := dev.QueryGID(1, i); err == nil {
			want = append(want, e)
		}
	}
	if len(want) == 0 {
		t.Fatal("the device has no GID")
	}
	const size = 40 // a larger entry than the kernel's: zero-padded
	table := func(slots int) ([]byte, error) {
		_, err := c.ioctl(ioctlBuf(ObjectDevice, MethodQueryGidTable, attr(AttrGidTableEntrySize, 8, AttrFMandatory, size),
			attr(AttrGidTableEntries, uint16(slots*size), AttrFMandatory, ioctlOut+0x100),
			attr(AttrGidTableNumEntries, 8, AttrFMandatory, ioctlOut)))
		return c.read(ioctlOut+0x100, slots*size), err
	}
	c.mem.WriteAt(make([]byte, 64*size), ioctlOut+0x100)
	got, err := table(64)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.NativeEndian.Uint64(c.read(ioctlOut, 8)); n != uint64(len(want)) {
		t.Fatalf("%d entries, the device has %d", n, len(want))
	}
	for i, e := range want {
		ge := load[GidEntry](got[i*size:])
		if string(bytesOf(&ge.Gid)) != string(e.GID[:]) || ge.Gid_index != uint32(e.Index) || ge.Port_num != 1 {
			t.Errorf("entry %d: %+v, the device's %+v", i, ge, e)
		}
	}
	_, err = table(len(want) - 1)
	if len(want) > 1 {
		errnoIs(t, err, unix.EINVAL)
	}
	_, err = c.ioctl(ioctlBuf(ObjectDevice, MethodQueryGidTable, attr(AttrGidTableEntrySize, 8, AttrFMandatory, 0),
		attr(AttrGidTableEntries, 32, AttrFMandatory, ioctlOut+0x100), attr(AttrGidTableNumEntries, 8, AttrFMandatory, ioctlOut)))
	errnoIs(t, err, unix.EINVAL)
}
