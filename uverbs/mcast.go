//go:build linux

package uverbs

import (
	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// mcastGroup is one multicast attachment of a QP (struct
// ib_uverbs_mcast_entry).
type mcastGroup struct {
	gid emu.GID
	lid uint16
}

// attachMcast is ib_uverbs_attach_mcast: attaching a QP to a group it is
// attached to already does nothing.
func (c *call) attachMcast() error {
	cmd, err := request[AttachMcast](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Handle)
	if err != nil {
		return err
	}
	g := mcastGroup{emu.GID(cmd.Gid), cmd.Mlid}
	for _, m := range o.qp.mcast {
		if m == g {
			return nil
		}
	}
	if err := o.qp.qp.AttachMcast(g.gid, g.lid); err != nil {
		return wrap("attach multicast", err)
	}
	o.qp.mcast = append(o.qp.mcast, g)
	return nil
}

// detachMcast is ib_uverbs_detach_mcast: a group the QP is not attached to
// is EINVAL.
func (c *call) detachMcast() error {
	cmd, err := request[DetachMcast](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Handle)
	if err != nil {
		return err
	}
	g := mcastGroup{emu.GID(cmd.Gid), cmd.Mlid}
	for i, m := range o.qp.mcast {
		if m != g {
			continue
		}
		if err := o.qp.qp.DetachMcast(g.gid, g.lid); err != nil {
			return wrap("detach multicast", err)
		}
		o.qp.mcast = append(o.qp.mcast[:i], o.qp.mcast[i+1:]...)
		return nil
	}
	return errorf(unix.EINVAL, "detach multicast: QP %d is not attached to %v", cmd.Handle, g.gid)
}

// detachAll detaches the QP from every group, as the file's close does
// (ib_uverbs_detach_umcast).
func (u *uqp) detachAll() {
	for _, m := range u.mcast {
		u.qp.DetachMcast(m.gid, m.lid)
	}
	u.mcast = nil
}
