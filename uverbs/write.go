//go:build linux

package uverbs

import (
	"encoding/binary"
	"unsafe"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// call is one command as its handler sees it: the core request and
// response (ucore) and the driver's (driver_udata) of struct
// uverbs_attr_bundle.
type call struct {
	f         *File
	in        []byte  // the core request
	resp      uint64  // client address of the core response
	outLen    int     // room for the core response
	drvIn     []byte  // the driver's request
	drvOut    uint64  // client address of the driver's response
	drvOutLen int     // room for the driver's response
	ex        bool    // an extended command
	capture   *[]byte // if set, the core response goes here, not to the client (an ioctl method's)
}

// method is struct uverbs_api_write_method: a command's handler and the
// sizes verify_hdr checks.
type method struct {
	name    string
	fn      func(*call) error
	req     int  // req_size: the smallest core request
	resp    int  // resp_size: the smallest core response
	udata   bool // has_udata: the rest of the request and response are the driver's
	hasResp bool // has_resp: the request starts with the response pointer
	ex      bool // is_ex
}

// The command tables (uverbs_uapi's write_methods and write_ex_methods).
// Commands the kernel knows but this device does not serve take
// notSupported, as the kernel's disabled methods do.
var (
	writeMethods   [CmdOpenQp + 1]*method
	writeExMethods [ExCmdModifyCq + 1]*method
	notSupported   = &method{name: "not supported", fn: func(*call) error {
		return errorf(unix.EOPNOTSUPP, "command not supported")
	}}
)

// offsetEnd returns the offset of the end of a field: offsetofend.
func offsetEnd(off, size uintptr) int { return int(off + size) }

func init() {
	for i := range writeMethods {
		writeMethods[i] = notSupported
	}
	for i := range writeExMethods {
		writeExMethods[i] = notSupported
	}
	io := func(cmd int, name string, fn func(*call) error, req, resp int, udata bool) {
		writeMethods[cmd] = &method{name: name, fn: fn, req: req, resp: resp, udata: udata, hasResp: resp > 0}
	}
	io(CmdGetContext, "GET_CONTEXT", (*call).getContext, sizeOf[GetContext](), sizeOf[GetContextResp](), true)
	io(CmdQueryDevice, "QUERY_DEVICE", (*call).queryDevice, sizeOf[QueryDevice](), sizeOf[QueryDeviceResp](), true)
	io(CmdQueryPort, "QUERY_PORT", (*call).queryPort, sizeOf[QueryPort](), sizeOf[QueryPortResp](), true)
	io(CmdAllocPd, "ALLOC_PD", (*call).allocPD, sizeOf[AllocPd](), sizeOf[AllocPdResp](), true)
	io(CmdDeallocPd, "DEALLOC_PD", (*call).deallocPD, sizeOf[DeallocPd](), 0, false)
	io(CmdCreateAh, "CREATE_AH", (*call).createAH, sizeOf[CreateAh](), sizeOf[CreateAhResp](), true)
	io(CmdDestroyAh, "DESTROY_AH", (*call).destroyAH, sizeOf[DestroyAh](), 0, false)
	io(CmdRegMr, "REG_MR", (*call).regMR, sizeOf[RegMr](), sizeOf[RegMrResp](), true)
	io(CmdDeregMr, "DEREG_MR", (*call).deregMR, sizeOf[DeregMr](), 0, false)
	io(CmdReregMr, "REREG_MR", (*call).reregMR, sizeOf[ReregMr](), sizeOf[ReregMrResp](), true)
	io(CmdAllocMw, "ALLOC_MW", (*call).allocMW, sizeOf[AllocMw](), sizeOf[AllocMwResp](), true)
	io(CmdDeallocMw, "DEALLOC_MW", (*call).deallocMW, sizeOf[DeallocMw](), 0, false)
	io(CmdCreateCompChannel, "CREATE_COMP_CHANNEL", (*call).createCompChannel, sizeOf[CreateCompChannel](), sizeOf[CreateCompChannelResp](), false)
	io(CmdCreateCq, "CREATE_CQ", (*call).createCQ, sizeOf[CreateCq](), sizeOf[CreateCqResp](), true)
	io(CmdResizeCq, "RESIZE_CQ", (*call).resizeCQ, sizeOf[ResizeCq](), sizeOf[ResizeCqResp](), true)
	io(CmdDestroyCq, "DESTROY_CQ", (*call).destroyCQ, sizeOf[DestroyCq](), sizeOf[DestroyCqResp](), false)
	io(CmdReqNotifyCq, "REQ_NOTIFY_CQ", (*call).reqNotifyCQ, sizeOf[ReqNotifyCq](), 0, false)
	io(CmdCreateQp, "CREATE_QP", (*call).createQP, sizeOf[CreateQp](), sizeOf[CreateQpResp](), true)
	io(CmdQueryQp, "QUERY_QP", (*call).queryQP, sizeOf[QueryQp](), sizeOf[QueryQpResp](), false)
	io(CmdModifyQp, "MODIFY_QP", (*call).modifyQP, sizeOf[ModifyQp](), 0, true)
	io(CmdDestroyQp, "DESTROY_QP", (*call).destroyQP, sizeOf[DestroyQp](), sizeOf[DestroyQpResp](), false)
	io(CmdAttachMcast, "ATTACH_MCAST", (*call).attachMcast, sizeOf[AttachMcast](), 0, false)
	io(CmdDetachMcast, "DETACH_MCAST", (*call).detachMcast, sizeOf[DetachMcast](), 0, false)
	io(CmdPostSend, "POST_SEND", (*call).postSend, sizeOf[PostSend](), sizeOf[PostSendResp](), false)
	io(CmdPostRecv, "POST_RECV", (*call).postRecv, sizeOf[PostRecv](), sizeOf[PostRecvResp](), false)
	io(CmdPostSrqRecv, "POST_SRQ_RECV", (*call).postSRQRecv, sizeOf[PostSrqRecv](), sizeOf[PostSrqRecvResp](), false)
	io(CmdCreateSrq, "CREATE_SRQ", (*call).createSRQ, sizeOf[CreateSrq](), sizeOf[CreateSrqResp](), true)
	io(CmdModifySrq, "MODIFY_SRQ", (*call).modifySRQ, sizeOf[ModifySrq](), 0, true)
	io(CmdQuerySrq, "QUERY_SRQ", (*call).querySRQ, sizeOf[QuerySrq](), sizeOf[QuerySrqResp](), true)
	io(CmdDestroySrq, "DESTROY_SRQ", (*call).destroySRQ, sizeOf[DestroySrq](), sizeOf[DestroySrqResp](), false)

	ex := func(cmd int, name string, fn func(*call) error, req, resp int) {
		writeExMethods[cmd] = &method{name: name, fn: fn, req: req, resp: resp, udata: true, ex: true}
	}
	var eqd ExQueryDeviceResp
	ex(ExCmdQueryDevice, "EX_QUERY_DEVICE", (*call).exQueryDevice, sizeOf[ExQueryDevice](),
		offsetEnd(unsafe.Offsetof(eqd.Response_length), unsafe.Sizeof(eqd.Response_length)))
	var ecq ExCreateCq
	var ecqr ExCreateCqResp
	ex(ExCmdCreateCq, "EX_CREATE_CQ", (*call).exCreateCQ, offsetEnd(unsafe.Offsetof(ecq.Reserved), unsafe.Sizeof(ecq.Reserved)),
		offsetEnd(unsafe.Offsetof(ecqr.Response_length), unsafe.Sizeof(ecqr.Response_length)))
	var eqp ExCreateQp
	var eqpr ExCreateQpResp
	ex(ExCmdCreateQp, "EX_CREATE_QP", (*call).exCreateQP, offsetEnd(unsafe.Offsetof(eqp.Comp_mask), unsafe.Sizeof(eqp.Comp_mask)),
		offsetEnd(unsafe.Offsetof(eqpr.Response_length), unsafe.Sizeof(eqpr.Response_length)))
	var emq ExModifyQp
	var emqr ExModifyQpResp
	ex(ExCmdModifyQp, "EX_MODIFY_QP", (*call).exModifyQP, offsetEnd(unsafe.Offsetof(emq.Base), unsafe.Sizeof(emq.Base)),
		offsetEnd(unsafe.Offsetof(emqr.Response_length), unsafe.Sizeof(emqr.Response_length)))
}

// methodOf finds a command's method (uapi_get_method): bits outside the
// command index and the extended flag are EINVAL, an index past the table
// EOPNOTSUPP.
func methodOf(command uint32) (*method, error) {
	idx := command & CmdCommandMask
	if command&^uint32(CmdFlagExtended|CmdCommandMask) != 0 {
		return nil, errorf(unix.EINVAL, "command %#x: unknown flags", command)
	}
	if command&CmdFlagExtended != 0 {
		if int(idx) >= len(writeExMethods) {
			return nil, errorf(unix.EOPNOTSUPP, "extended command %d", idx)
		}
		return writeExMethods[idx], nil
	}
	if int(idx) >= len(writeMethods) {
		return nil, errorf(unix.EOPNOTSUPP, "command %d", idx)
	}
	return writeMethods[idx], nil
}

const (
	hdrSize   = int(unsafe.Sizeof(CmdHdr{}))
	exHdrSize = int(unsafe.Sizeof(ExCmdHdr{}))
)

// verifyHdr is the kernel's verify_hdr: the header's word counts against
// the write's length and the method's sizes. It may rewrite hdr for the
// DESTROY_CQ compatibility case.
func verifyHdr(hdr *CmdHdr, ex *ExCmdHdr, count int, m *method) error {
	if m.ex {
		count -= hdrSize + exHdrSize
		if (int(hdr.In_words)+int(ex.Provider_in_words))*8 != count {
			return errorf(unix.EINVAL, "%s: in_words %d + provider_in_words %d do not cover %d bytes", m.name, hdr.In_words, ex.Provider_in_words, count)
		}
		if int(hdr.In_words)*8 < m.req {
			return errorf(unix.ENOSPC, "%s: request of %d bytes, needs %d", m.name, int(hdr.In_words)*8, m.req)
		}
		if ex.Cmd_hdr_reserved != 0 {
			return errorf(unix.EINVAL, "%s: cmd_hdr_reserved %#x", m.name, ex.Cmd_hdr_reserved)
		}
		if ex.Response != 0 {
			if hdr.Out_words == 0 && ex.Provider_out_words == 0 {
				return errorf(unix.EINVAL, "%s: a response pointer and no room", m.name)
			}
			if int(hdr.Out_words)*8 < m.resp {
				return errorf(unix.ENOSPC, "%s: response room %d bytes, needs %d", m.name, int(hdr.Out_words)*8, m.resp)
			}
			return nil
		}
		if hdr.Out_words != 0 || ex.Provider_out_words != 0 {
			return errorf(unix.EINVAL, "%s: response room and no pointer", m.name)
		}
		return nil
	}
	if int(hdr.In_words)*4 != count {
		return errorf(unix.EINVAL, "%s: in_words %d for a write of %d bytes", m.name, hdr.In_words, count)
	}
	if count < m.req+hdrSize {
		// rdma-core v18 and v19 sent DESTROY_CQ with 16 bytes instead of
		// 24; the kernel accepts that one short form.
		if hdr.Command == CmdDestroyCq && count == 16 {
			hdr.In_words = 6
			return nil
		}
		return errorf(unix.ENOSPC, "%s: request of %d bytes, needs %d", m.name, count-hdrSize, m.req)
	}
	if int(hdr.Out_words)*4 < m.resp {
		return errorf(unix.ENOSPC, "%s: response room %d bytes, needs %d", m.name, int(hdr.Out_words)*4, m.resp)
	}
	return nil
}

// Write is write(cmd_fd, buf): buf holds struct ib_uverbs_cmd_hdr (or the
// extended header) and the command (ib_uverbs_write). The response goes to
// the client's memory at the command's response pointer, as copy_to_user
// does. It returns write()'s result or an error wrapping the errno the
// kernel returns.
func (f *File) Write(buf []byte) (Reply, error) {
	if len(buf) < hdrSize {
		return Reply{}, errorf(unix.EINVAL, "write of %d bytes: shorter than the command header", len(buf))
	}
	hdr := load[CmdHdr](buf)
	m, err := methodOf(hdr.Command)
	if err != nil {
		return Reply{}, err
	}
	var exHdr ExCmdHdr
	if m.ex {
		if len(buf) < hdrSize+exHdrSize {
			return Reply{}, errorf(unix.EINVAL, "%s: write of %d bytes: shorter than the extended header", m.name, len(buf))
		}
		exHdr = load[ExCmdHdr](buf[hdrSize:])
	}
	if err := verifyHdr(&hdr, &exHdr, len(buf), m); err != nil {
		return Reply{}, err
	}
	c := &call{f: f, ex: m.ex}
	body := buf[hdrSize:]
	if !m.ex {
		body = body[:min(len(body), int(hdr.In_words)*4-hdrSize)]
		inLen, outLen := len(body), int(hdr.Out_words)*4
		if m.udata {
			c.drvIn = body[m.req:]
			inLen = m.req
		}
		if m.hasResp {
			c.resp = binary.NativeEndian.Uint64(body)
			if m.udata {
				c.drvOut, c.drvOutLen = c.resp+uint64(m.resp), outLen-m.resp
				outLen = m.resp
			}
		}
		c.in, c.outLen = body[:inLen], outLen
		if !m.hasResp {
			c.outLen = 0
		}
	} else {
		body = body[exHdrSize:]
		inLen := int(hdr.In_words) * 8
		c.in, c.drvIn = body[:inLen], body[inLen:]
		c.resp, c.outLen = exHdr.Response, int(hdr.Out_words)*8
		c.drvOut, c.drvOutLen = exHdr.Response+uint64(c.outLen), int(exHdr.Provider_out_words)*8
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.run(m, c)
	r.N = len(buf)
	return r, err
}

// run runs a write command's handler on c, for write() and for
// UVERBS_METHOD_INVOKE_WRITE; f.mu held.
func (f *File) run(m *method, c *call) (Reply, error) {
	if err := f.ready(m); err != nil {
		return Reply{}, err
	}
	f.resolveFds()
	f.reply, f.passing = Reply{}, nil
	if err := m.fn(c); err != nil {
		f.reply, f.passing = Reply{}, nil
		return Reply{}, err
	}
	r := f.reply
	f.reply, f.handed, f.passing = Reply{}, f.passing, nil
	return r, nil
}

// ready refuses a command on a closed file, and one that needs a context
// before GET_CONTEXT; f.mu held.
func (f *File) ready(m *method) error {
	if f.closed {
		return errorf(unix.EIO, "%s: the file is closed", m.name)
	}
	if m != writeMethods[CmdGetContext] && m != notSupported && !f.context {
		return errorf(unix.EINVAL, "%s: no context (GET_CONTEXT first)", m.name)
	}
	return nil
}

// request decodes the core request into a T (uverbs_request): a short
// request is zero-extended, bytes past T must be zero (EOPNOTSUPP).
func request[T any](c *call) (T, error) {
	v := load[T](c.in)
	if n := sizeOf[T](); len(c.in) > n {
		for _, b := range c.in[n:] {
			if b != 0 {
				var zero T
				return zero, errorf(unix.EOPNOTSUPP, "request carries %d unknown bytes", len(c.in)-n)
			}
		}
	}
	return v, nil
}

// respond writes the core response (uverbs_response): as much of b as the
// client made room for, then zeros over the rest of its room.
func (c *call) respond(b []byte) error {
	n := min(len(b), c.outLen)
	out := b[:n]
	if c.outLen > len(b) {
		out = make([]byte, c.outLen)
		copy(out, b)
	}
	if c.capture != nil {
		*c.capture = append((*c.capture)[:0], out...)
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	if _, err := c.f.mem.WriteAt(out, c.resp); err != nil {
		return errorf(unix.EFAULT, "response at %#x: %v", c.resp, err)
	}
	return nil
}

// respLen is uverbs_response_length: what an extended response reports.
func (c *call) respLen(size int) uint32 { return uint32(min(size, c.outLen)) }

// driverRespond writes the driver's response b (ib_copy_to_udata); rxe
// refuses a response room smaller than its structure with EINVAL.
func (c *call) driverRespond(b []byte) error {
	if c.drvOutLen < len(b) {
		return errorf(unix.EINVAL, "driver response room %d bytes, needs %d", c.drvOutLen, len(b))
	}
	if _, err := c.f.mem.WriteAt(b, c.drvOut); err != nil {
		return errorf(unix.EFAULT, "driver response at %#x: %v", c.drvOut, err)
	}
	return nil
}

// udata returns the driver's buffers as package emu takes them; finish
// copies what the driver wrote to the client.
func (c *call) udata() *emu.UData {
	return &emu.UData{In: c.drvIn, Out: make([]byte, max(c.drvOutLen, 0)), Extended: c.ex}
}

func (c *call) finishUdata(u *emu.UData) error {
	if u.OutLen == 0 {
		return nil
	}
	if _, err := c.f.mem.WriteAt(u.Out[:u.OutLen], c.drvOut); err != nil {
		return errorf(unix.EFAULT, "driver response at %#x: %v", c.drvOut, err)
	}
	return nil
}
