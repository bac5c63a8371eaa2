//go:build linux

package uverbs

import (
	"encoding/binary"
	"net"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// The ioctl methods of the objects libibverbs creates and destroys
// through ioctl where the kernel has them (CQ_CREATE, QP_CREATE, the
// *_DESTROY methods), and the GID table's queries. The object methods
// run the write command's handler with the request the attributes make,
// its core response taken back and put where the method's attributes
// say.

func addObjectMethods() {
	add := func(object, method uint16, name string, udata bool, fn func(*bundle) error, cmd int, attrs map[uint16]attrSpec) {
		ioctlMethods[methodKey(object, method)] = &ioctlMethod{name: name, udata: udata, fn: fn, cmd: cmd, hasCmd: cmd >= 0, attrs: attrs}
	}
	add(ObjectDevice, MethodQueryGidEntry, "UVERBS_METHOD_QUERY_GID_ENTRY", false, (*bundle).queryGIDEntry, -1, map[uint16]attrSpec{
		AttrGidEntryPort:  constIn(true),
		AttrGidEntryIndex: constIn(true),
		AttrGidEntryFlags: flagsIn(false),
		AttrGidEntryResp:  {typ: attrPtrOut, minLen: sizeOf[GidEntry](), len: sizeOf[GidEntry](), zeroTrailing: true, mandatory: true},
	})
	add(ObjectDevice, MethodQueryGidTable, "UVERBS_METHOD_QUERY_GID_TABLE", false, (*bundle).queryGIDTable, -1, map[uint16]attrSpec{
		AttrGidTableEntrySize:  constIn(true),
		AttrGidTableFlags:      flagsIn(false),
		AttrGidTableEntries:    ptrOut(0, anyLen, true),
		AttrGidTableNumEntries: ptrOut(8, 8, true),
	})
	add(ObjectCQ, MethodCqCreate, "UVERBS_METHOD_CQ_CREATE", true, (*bundle).cqCreate, CmdCreateCq, map[uint16]attrSpec{
		AttrCreateCqHandle:      idr(kindCQ, accessNew, true),
		AttrCreateCqCqe:         u32In(true),
		AttrCreateCqUserHandle:  u64In(true),
		AttrCreateCqCompChannel: {typ: attrFdRead},
		AttrCreateCqCompVector:  u32In(true),
		AttrCreateCqFlags:       flagsIn(false),
		AttrCreateCqRespCqe:     ptrOut(4, 4, true),
		AttrCreateCqEventFd:     {typ: attrFdRead},
	})
	qpCap := attrSpec{typ: attrPtrIn, minLen: sizeOf[QpCap](), len: sizeOf[QpCap](), zeroTrailing: true, mandatory: true}
	qpCapOut := qpCap
	qpCapOut.typ = attrPtrOut
	add(ObjectQP, MethodQpCreate, "UVERBS_METHOD_QP_CREATE", true, (*bundle).qpCreate, CmdCreateQp, map[uint16]attrSpec{
		AttrCreateQpHandle:       idr(kindQP, accessNew, true),
		AttrCreateQpXrcdHandle:   idr(0, accessRead, false),
		AttrCreateQpPdHandle:     idr(kindPD, accessRead, false),
		AttrCreateQpSrqHandle:    idr(kindSRQ, accessRead, false),
		AttrCreateQpSendCqHandle: idr(kindCQ, accessRead, false),
		AttrCreateQpRecvCqHandle: idr(kindCQ, accessRead, false),
		AttrCreateQpIndTable:     idr(0, accessRead, false),
		AttrCreateQpUserHandle:   u64In(true),
		AttrCreateQpCap:          qpCap,
		AttrCreateQpType:         constIn(true),
		AttrCreateQpFlags:        flagsIn(false),
		AttrCreateQpSourceQpn:    u32In(false),
		AttrCreateQpEventFd:      {typ: attrFdRead},
		AttrCreateQpRespCap:      qpCapOut,
		AttrCreateQpRespQpNum:    ptrOut(4, 4, true),
	})
	destroy := func(object, method uint16, name string, kind objKind, handle uint16, resp int, respAttr uint16, cmd int) {
		attrs := map[uint16]attrSpec{handle: idr(kind, accessDestroy, true)}
		if resp > 0 {
			attrs[respAttr] = ptrOut(resp, resp, true)
		}
		add(object, method, name, false, func(b *bundle) error { return b.destroy(cmd, handle, respAttr, resp) }, cmd, attrs)
	}
	destroy(ObjectPD, MethodPdDestroy, "UVERBS_METHOD_PD_DESTROY", kindPD, AttrDestroyPdHandle, 0, 0, CmdDeallocPd)
	destroy(ObjectMR, MethodMrDestroy, "UVERBS_METHOD_MR_DESTROY", kindMR, AttrDestroyMrHandle, 0, 0, CmdDeregMr)
	destroy(ObjectAH, MethodAhDestroy, "UVERBS_METHOD_AH_DESTROY", kindAH, AttrDestroyAhHandle, 0, 0, CmdDestroyAh)
	destroy(ObjectMW, MethodMwDestroy, "UVERBS_METHOD_MW_DESTROY", kindMW, AttrDestroyMwHandle, 0, 0, CmdDeallocMw)
	destroy(ObjectCQ, MethodCqDestroy, "UVERBS_METHOD_CQ_DESTROY", kindCQ, AttrDestroyCqHandle, sizeOf[DestroyCqResp](), AttrDestroyCqResp, CmdDestroyCq)
	destroy(ObjectQP, MethodQpDestroy, "UVERBS_METHOD_QP_DESTROY", kindQP, AttrDestroyQpHandle, sizeOf[DestroyQpResp](), AttrDestroyQpResp, CmdDestroyQp)
	destroy(ObjectSRQ, MethodSrqDestroy, "UVERBS_METHOD_SRQ_DESTROY", kindSRQ, AttrDestroySrqHandle, sizeOf[DestroySrqResp](), AttrDestroySrqResp, CmdDestroySrq)
}

// legacy runs write command cmd's handler with the core request req
// (its response pointer unused) and the bundle's driver buffers, and
// returns the core response.
func (b *bundle) legacy(cmd int, req []byte) ([]byte, error) {
	m := writeMethods[cmd]
	var out []byte
	c := &call{f: b.f, in: req, outLen: m.resp, capture: &out}
	if a := b.get(AttrUhwIn); a != nil {
		var err error
		if c.drvIn, err = b.read(a); err != nil {
			return nil, err
		}
	}
	if a := b.get(AttrUhwOut); a != nil {
		c.drvOut, c.drvOutLen = a.Data, int(a.Len)
	}
	if err := m.fn(c); err != nil {
		return nil, err
	}
	return out, nil
}

// u32 and u64 read a present PTR_IN attribute of that type
// (uverbs_copy_from: inline).
func (b *bundle) u32(id uint16) uint32 { return uint32(b.get(id).Data) }
func (b *bundle) u64(id uint16) uint64 { return b.get(id).Data }

// flags32 is uverbs_get_flags32: an absent attribute is 0, bits outside
// allowed EINVAL.
func (b *bundle) flags32(id uint16, allowed uint64) (uint32, error) {
	a := b.get(id)
	if a == nil {
		return 0, nil
	}
	v := a.Data
	if a.Len == 4 {
		v = uint64(uint32(v))
	} else if a.Len != 8 {
		return 0, errorf(unix.EINVAL, "%s: flags of %d bytes", b.m.name, a.Len)
	}
	if v&^allowed != 0 || v > 0xffffffff {
		return 0, errorf(unix.EINVAL, "%s: flags %#x", b.m.name, v)
	}
	return uint32(v), nil
}

// newHandle stores a new object's handle in its attribute's data, as
// the kernel's put_user of the id; on failure the object is destroyed.
func (b *bundle) newHandle(id uint16, h uint32) error {
	at := b.attrAt(b.present[id]) + 8
	var d [8]byte
	binary.NativeEndian.PutUint64(d[:], uint64(h))
	if _, err := b.f.mem.WriteAt(d[:], at); err != nil {
		return errorf(unix.EFAULT, "%s: handle at %#x: %v", b.m.name, at, err)
	}
	return nil
}

// undo destroys a new object whose outputs could not be written (the
// kernel's abort of an uncommitted uobject) and returns err.
func (b *bundle) undo(h uint32, err error) error {
	if o, ok := b.f.objects[h]; ok {
		b.f.destroy(o)
	}
	return err
}

// cqCreate is UVERBS_METHOD_CQ_CREATE.
func (b *bundle) cqCreate() error {
	flags, err := b.flags32(AttrCreateCqFlags, CqFlagsTimestamp|CqFlagsIgnoreOverrun)
	if err != nil {
		return err
	}
	if flags != 0 {
		return errorf(unix.EOPNOTSUPP, "%s: rxe takes no CQ flags (%#x)", b.m.name, flags)
	}
	req := CreateCq{User_handle: b.u64(AttrCreateCqUserHandle), Cqe: b.u32(AttrCreateCqCqe),
		Comp_vector: b.u32(AttrCreateCqCompVector), Comp_channel: -1}
	if a := b.get(AttrCreateCqCompChannel); a != nil {
		req.Comp_channel = int32(a.Data)
	}
	out, err := b.legacy(CmdCreateCq, bytesOf(&req))
	if err != nil {
		return err
	}
	resp := load[CreateCqResp](out)
	if err := b.newHandle(AttrCreateCqHandle, resp.Handle); err != nil {
		return b.undo(resp.Handle, err)
	}
	var cqe [4]byte
	binary.NativeEndian.PutUint32(cqe[:], resp.Cqe)
	if err := b.copyTo(AttrCreateCqRespCqe, cqe[:]); err != nil {
		return b.undo(resp.Handle, err)
	}
	return nil
}

// qpCreate is UVERBS_METHOD_QP_CREATE for the QP types rxe has.
func (b *bundle) qpCreate() error {
	var cp QpCap
	if a := b.get(AttrCreateQpCap); a != nil {
		d, err := b.read(a)
		if err != nil {
			return err
		}
		cp = load[QpCap](d)
	}
	qpType, err := b.constant(AttrCreateQpType, 0xffffffff)
	if err != nil {
		return err
	}
	req := CreateQp{User_handle: b.u64(AttrCreateQpUserHandle), Max_send_wr: cp.Send_wr, Max_recv_wr: cp.Recv_wr,
		Max_send_sge: cp.Send_sge, Max_recv_sge: cp.Recv_sge, Max_inline_data: cp.Inline_data}
	switch qpstate.Type(qpType) {
	case qpstate.TypeRC, qpstate.TypeUC, qpstate.TypeUD:
	default:
		// XRC needs an XRCD, RAW_PACKET and DRIVER QPs a driver that
		// has them: rxe has neither.
		return errorf(unix.EINVAL, "%s: QP type %d", b.m.name, qpType)
	}
	req.Qp_type = uint8(qpType)
	if b.get(AttrCreateQpXrcdHandle) != nil || b.get(AttrCreateQpIndTable) != nil {
		return errorf(unix.EINVAL, "%s: an XRCD or an indirection table on rxe", b.m.name)
	}
	for _, h := range []struct {
		id uint16
		to *uint32
	}{{AttrCreateQpPdHandle, &req.Pd_handle}, {AttrCreateQpSendCqHandle, &req.Send_cq_handle}, {AttrCreateQpRecvCqHandle, &req.Recv_cq_handle}} {
		a := b.get(h.id)
		if a == nil {
			return errorf(unix.ENOENT, "%s: attribute %#x missing", b.m.name, h.id)
		}
		*h.to = uint32(a.Data)
	}
	flags, err := b.flags32(AttrCreateQpFlags, QpCreateFlagsAll)
	if err != nil {
		return err
	}
	if flags&QpCreateSqSigAll != 0 {
		req.Sq_sig_all = 1
	}
	if rest := flags &^ QpCreateSqSigAll; rest != 0 {
		// check_creation_flags, then rxe, which takes none.
		if qpstate.Type(qpType) != qpstate.TypeUD {
			return errorf(unix.EINVAL, "%s: create flags %#x on QP type %d", b.m.name, rest, qpType)
		}
		return errorf(unix.EOPNOTSUPP, "%s: rxe takes no create flags (%#x)", b.m.name, rest)
	}
	if b.get(AttrCreateQpSourceQpn) != nil {
		return errorf(unix.EOPNOTSUPP, "%s: rxe has no source QPN", b.m.name)
	}
	if a := b.get(AttrCreateQpSrqHandle); a != nil {
		req.Is_srq, req.Srq_handle = 1, uint32(a.Data)
	}
	out, err := b.legacy(CmdCreateQp, bytesOf(&req))
	if err != nil {
		return err
	}
	resp := load[CreateQpResp](out)
	if err := b.newHandle(AttrCreateQpHandle, resp.Qp_handle); err != nil {
		return b.undo(resp.Qp_handle, err)
	}
	got := QpCap{Send_wr: resp.Max_send_wr, Recv_wr: resp.Max_recv_wr, Send_sge: resp.Max_send_sge,
		Recv_sge: resp.Max_recv_sge, Inline_data: resp.Max_inline_data}
	if err := b.copyStructOrZero(AttrCreateQpRespCap, bytesOf(&got)); err != nil {
		return b.undo(resp.Qp_handle, err)
	}
	var qpn [4]byte
	binary.NativeEndian.PutUint32(qpn[:], resp.Qpn)
	if err := b.copyTo(AttrCreateQpRespQpNum, qpn[:]); err != nil {
		return b.undo(resp.Qp_handle, err)
	}
	return nil
}

// destroy is a *_DESTROY method: write command cmd on the handle of
// attribute handle, and its response of resp bytes to respAttr.
func (b *bundle) destroy(cmd int, handle, respAttr uint16, resp int) error {
	h := uint32(b.get(handle).Data)
	var req []byte
	if resp > 0 {
		r := DestroyCq{Handle: h} // DestroyQp and DestroySrq have its layout
		req = bytesOf(&r)
	} else {
		r := DeallocPd{Handle: h} // DeregMr, DestroyAh, DeallocMw too
		req = bytesOf(&r)
	}
	out, err := b.legacy(cmd, req)
	if err != nil {
		return err
	}
	if resp > 0 {
		return b.copyTo(respAttr, out)
	}
	return nil
}

// gidTypes are the uapi's GID types.
var gidTypes = map[ib.GIDType]uint32{ib.GIDTypeIB: GidTypeIB, ib.GIDTypeRoCE: GidTypeRoCEv1, ib.GIDTypeRoCEv2: GidTypeRoCEv2}

// gidEntry is an ib_uverbs_gid_entry of e.
func gidEntry(e emu.GIDEntry) GidEntry {
	entry := GidEntry{Gid_index: uint32(e.Index), Port_num: e.Port, Gid_type: gidTypes[e.Type]}
	copy(bytesOf(&entry.Gid), e.GID[:])
	if e.NetDev != "" {
		if ifc, err := net.InterfaceByName(e.NetDev); err == nil {
			entry.Netdev_ifindex = uint32(ifc.Index)
		}
	}
	return entry
}

// queryGIDTable is UVERBS_METHOD_QUERY_GID_TABLE: the valid entries of
// every port, each in a slot of the caller's entry size (truncated or
// zero-padded); more entries than slots is EINVAL (rdma_query_gid_table).
func (b *bundle) queryGIDTable() error {
	f := b.f
	if _, err := b.flags32(AttrGidTableFlags, 0); err != nil {
		return err
	}
	size, err := b.constant(AttrGidTableEntrySize, 1<<63-1)
	if err != nil {
		return err
	}
	if size == 0 {
		return errorf(unix.EINVAL, "%s: entry size 0", b.m.name)
	}
	a := b.get(AttrGidTableEntries)
	if uint64(a.Len)%size != 0 || a.Len == 0 {
		return errorf(unix.EINVAL, "%s: %d bytes of entries of %d", b.m.name, a.Len, size)
	}
	max := int(uint64(a.Len) / size)
	if !f.context {
		return errorf(unix.EINVAL, "%s: no context", b.m.name)
	}
	var entries []GidEntry
	for port := uint32(1); port <= f.dev.EndPort(); port++ {
		pa, err := f.dev.QueryPort(port)
		if err != nil {
			return wrap(b.m.name, err)
		}
		for i := 0; i < int(pa.GIDTblLen); i++ {
			e, err := f.dev.QueryGID(port, i)
			if err != nil {
				continue // an empty slot
			}
			if len(entries) >= max {
				return errorf(unix.EINVAL, "%s: more than %d entries", b.m.name, max)
			}
			entries = append(entries, gidEntry(e))
		}
	}
	out := make([]byte, len(entries)*int(size))
	for i := range entries {
		copy(out[i*int(size):(i+1)*int(size)], bytesOf(&entries[i]))
	}
	if err := b.copyTo(AttrGidTableEntries, out); err != nil {
		return err
	}
	var n [8]byte
	binary.NativeEndian.PutUint64(n[:], uint64(len(entries)))
	return b.copyTo(AttrGidTableNumEntries, n[:])
}

// queryGIDEntry is UVERBS_METHOD_QUERY_GID_ENTRY: struct
// ib_uverbs_gid_entry of one slot (EINVAL past the table, ENODATA for an
// empty slot, as rdma_get_gid_attr).
func (b *bundle) queryGIDEntry() error {
	f := b.f
	if _, err := b.flags32(AttrGidEntryFlags, 0); err != nil {
		return err
	}
	if !f.context {
		return errorf(unix.EINVAL, "%s: no context", b.m.name)
	}
	port, err := b.constant(AttrGidEntryPort, 0xffffffff)
	if err != nil {
		return err
	}
	index, err := b.constant(AttrGidEntryIndex, 0xffffffff)
	if err != nil {
		return err
	}
	if index > 1<<30 {
		return errorf(unix.EINVAL, "%s: GID index %d", b.m.name, index)
	}
	e, err := f.dev.QueryGID(uint32(port), int(index))
	if err != nil {
		return wrap(b.m.name, err)
	}
	entry := gidEntry(e)
	return b.copyStructOrZero(AttrGidEntryResp, bytesOf(&entry))
}
