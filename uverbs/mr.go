//go:build linux

package uverbs

import (
	"slices"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// reregMR is ib_uverbs_rereg_mr with rxe_rereg_user_mr, in the kernel's
// order: the flags (none EINVAL, unknown EOPNOTSUPP, a new range whose
// start and hca_va differ in the page offset EINVAL), the MR (a free
// handle ENOENT, as uobj_get_write), the access (ib_check_mr_access), the
// new PD (EINVAL unless one of the file's); rxe then refuses a new range
// (EOPNOTSUPP) and an access that lets the MR be written when its pages
// were pinned read-only (EACCES, ib_umem_check_rereg), and changes the PD
// and the access in place. The keys stay and are the response.
func (c *call) reregMR() error {
	cmd, err := request[ReregMr](c)
	if err != nil {
		return err
	}
	flags := emu.MRReregFlags(cmd.Flags)
	if err := emu.CheckReregFlags(flags, cmd.Start, cmd.Hca_va); err != nil {
		return wrap("REREG_MR", err)
	}
	o, err := c.f.lookup(kindMR, cmd.Mr_handle)
	if err != nil {
		return err
	}
	access := ib.AccessFlags(cmd.Access_flags)
	if flags&emu.MRReregAccess != 0 {
		if err := c.f.dev.CheckMRAccess(access); err != nil {
			return wrap("REREG_MR", err)
		}
	}
	var pd *emu.PD
	if flags&emu.MRReregPD != 0 {
		pdo, err := c.f.get(kindPD, cmd.Pd_handle)
		if err != nil {
			return err
		}
		pd = pdo.pd
	}
	if err := o.mr.ReregUser(flags, pd, cmd.Start, cmd.Length, cmd.Hca_va, access); err != nil {
		return wrap("REREG_MR", err)
	}
	resp := ReregMrResp{Lkey: o.mr.LKey(), Rkey: o.mr.RKey()}
	return c.respond(bytesOf(&resp))
}

// allocMW is ib_uverbs_alloc_mw: the PD must be the file's and the type 1
// or 2 (EINVAL); the response holds the handle and the window's rkey.
func (c *call) allocMW() error {
	cmd, err := request[AllocMw](c)
	if err != nil {
		return err
	}
	pdo, err := c.f.get(kindPD, cmd.Pd_handle)
	if err != nil {
		return err
	}
	mw, err := pdo.pd.AllocMW(emu.MWType(cmd.Mw_type))
	if err != nil {
		return wrap("ALLOC_MW", err)
	}
	o := &object{kind: kindMW, mw: mw}
	h := c.f.newObject(o)
	resp := AllocMwResp{Handle: h, Rkey: mw.RKey()}
	if err := c.respond(bytesOf(&resp)); err != nil {
		delete(c.f.objects, h)
		mw.Dealloc()
		return err
	}
	return nil
}

// deallocMW is ib_uverbs_dealloc_mw: the window is unbound and freed.
func (c *call) deallocMW() error {
	cmd, err := request[DeallocMw](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindMW, cmd.Handle)
	if err != nil {
		return err
	}
	if err := o.mw.Dealloc(); err != nil {
		return wrap("DEALLOC_MW", err)
	}
	delete(c.f.objects, o.handle)
	return nil
}

// bindWR fills a BIND_MW work request from the struct rxe_send_wr's mw
// part librxe writes (ibv_bind_mw, IBV_WR_BIND_MW): the window named by
// mw_rkey, its new rkey, and for a non-empty window the MR named by
// mr_lkey. rxe_bind_mw looks both up by key; a key that names no window
// or MR of this file (or an rkey the window no longer has) leaves the
// object out, so the device fails the bind with IB_WC_MW_BIND_ERR, as
// rxe does for a key that names nothing or another PD's object; f.mu
// held.
func (f *File) bindWR(m RxeSendWrMw, wr *emu.SendWR) {
	wr.Key = m.Rkey
	wr.Bind = emu.MWBind{Addr: m.Addr, Length: m.Length, Access: ib.AccessFlags(m.Access)}
	for _, o := range f.objects {
		switch {
		case o.kind == kindMW && o.mw.RKey() == m.Mw_rkey:
			wr.MW = o.mw
		case o.kind == kindMR && m.Length > 0 && o.mr.LKey() == m.Mr_lkey:
			wr.Bind.MR = o.mr
		}
	}
}

// mcastEntry is one multicast group a QP is attached to (struct
// ib_uverbs_mcast_entry).
type mcastEntry struct {
	gid emu.GID
	lid uint16
}

// attachMcast is ib_uverbs_attach_mcast: a group the QP is attached to
// already succeeds with nothing done; otherwise ib_attach_mcast (a UD QP
// and a multicast GID, else EINVAL).
func (c *call) attachMcast() error {
	cmd, err := request[AttachMcast](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Handle)
	if err != nil {
		return err
	}
	u := o.qp
	e := mcastEntry{gid: emu.GID(cmd.Gid), lid: cmd.Mlid}
	if slices.Contains(u.mcast, e) {
		return nil
	}
	if err := u.qp.AttachMcast(e.gid, e.lid); err != nil {
		return wrap("ATTACH_MCAST", err)
	}
	u.mcast = append(u.mcast, e)
	return nil
}

// detachMcast is ib_uverbs_detach_mcast: a group the QP is not attached to
// through this file is EINVAL; the entry goes, then ib_detach_mcast.
func (c *call) detachMcast() error {
	cmd, err := request[DetachMcast](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Handle)
	if err != nil {
		return err
	}
	u := o.qp
	e := mcastEntry{gid: emu.GID(cmd.Gid), lid: cmd.Mlid}
	i := slices.Index(u.mcast, e)
	if i < 0 {
		return errorf(unix.EINVAL, "DETACH_MCAST: the QP is not attached to %x/%#x", e.gid, e.lid)
	}
	u.mcast = slices.Delete(u.mcast, i, i+1)
	if err := u.qp.DetachMcast(e.gid, e.lid); err != nil {
		return wrap("DETACH_MCAST", err)
	}
	return nil
}

// detachAll detaches every group (ib_uverbs_detach_umcast); f.mu held.
func (u *uqp) detachAll() {
	for _, e := range u.mcast {
		u.qp.DetachMcast(e.gid, e.lid)
	}
	u.mcast = nil
}
