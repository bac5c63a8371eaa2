package rxe

import (
	"errors"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// ah is rxe's address handle.
type ah struct {
	num  uint32 // ah_num, 1..32767, what UD WQEs of new providers name
	attr ib.AHAttr
}

// CreateAH stores an address (rxe_create_ah): a source GID that is not
// RoCEv2 is EINVAL; the AH number comes from a 15-bit pool.
func (r *device) CreateAH(a *emu.AH, attr *ib.AHAttr, udata *emu.UData) error {
	if err := r.checkAV(attr); err != nil {
		return err
	}
	r.lock()
	defer r.unlock()
	x := &ah{attr: *attr}
	if err := poolLimit("create AH", "max_ah", len(r.ahPool.used), r.attr.MaxAH); err != nil {
		return err
	}
	n, ok := r.ahPool.alloc(x)
	if !ok {
		return errorf(unix.ENOMEM, "create AH: %d AHs exist", r.attr.MaxAH)
	}
	x.num = n
	x.attr.Type = ib.AHAttrTypeRoCE
	driver.SetPriv(a, x)
	if udata != nil && len(udata.Out) >= 4 {
		udata.CopyTo([]byte{byte(n), byte(n >> 8), 0, 0}) // struct rxe_create_ah_resp.ah_num
	}
	return nil
}

// checkAV is rxe_av_chk_attr: the source GID must be RoCEv2.
func (r *device) checkAV(attr *ib.AHAttr) error {
	if attr.AHFlags&ib.AHGRH == 0 {
		return nil
	}
	e, err := r.dev.QueryGID(attr.PortNum, int(attr.GRH.SGIDIndex))
	if err != nil {
		return err
	}
	if e.Type != ib.GIDTypeRoCEv2 {
		return errorf(unix.EINVAL, "AH: source GID %d is %v, rxe sends RoCEv2 only", attr.GRH.SGIDIndex, e.Type)
	}
	return nil
}

// ModifyAH replaces the stored address (rxe_modify_ah).
func (r *device) ModifyAH(a *emu.AH, attr *ib.AHAttr) error {
	if err := r.checkAV(attr); err != nil {
		return err
	}
	r.lock()
	defer r.unlock()
	x := driver.Priv(a).(*ah)
	x.attr = *attr
	x.attr.Type = ib.AHAttrTypeRoCE
	return nil
}

// QueryAH returns the address as type RoCE with GRH (rxe_query_ah).
func (r *device) QueryAH(a *emu.AH) (ib.AHAttr, error) {
	r.lock()
	defer r.unlock()
	at := driver.Priv(a).(*ah).attr
	at.Type, at.AHFlags = ib.AHAttrTypeRoCE, at.AHFlags|ib.AHGRH
	return at, nil
}

// DestroyAH frees the AH number; it never fails.
func (r *device) DestroyAH(a *emu.AH) error {
	r.lock()
	defer r.unlock()
	r.ahPool.free(driver.Priv(a).(*ah).num)
	return nil
}

// AHNum returns the AH's number (ah_num).
func AHNum(a *emu.AH) uint32 { return driver.Priv(a).(*ah).num }

// mcg is a multicast group (struct rxe_mcg).
type mcg struct {
	gid     emu.GID
	members []*qp
}

// AttachMcast adds q to the group gid (rxe_attach_mcast): a new group
// beyond 8192 groups, a 57th member or the 458753rd attachment is ENOMEM;
// a QP already in the group succeeds without counting twice. A new group
// opens the netdev's multicast filter (Config.McastFilter), as
// rxe_mcast_add's dev_mc_add does; the last detach closes it.
func (r *device) AttachMcast(c *emu.QP, gid emu.GID, lid uint16) error {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	g, ok := r.mcgs[gid]
	if !ok {
		if len(r.mcgs) >= r.attr.MaxMcastGrp {
			return errorf(unix.ENOMEM, "attach mcast %v: %d groups exist", gid, r.attr.MaxMcastGrp)
		}
		g = &mcg{gid: gid}
	}
	for _, m := range g.members {
		if m == q {
			return nil
		}
	}
	if len(g.members) >= r.attr.MaxMcastQPAttach {
		return errorf(unix.ENOMEM, "attach mcast %v: group has %d members", gid, r.attr.MaxMcastQPAttach)
	}
	if r.attached >= r.attr.MaxTotalMcastQPAttach {
		return errorf(unix.ENOMEM, "attach mcast %v: %d attachments on the device", gid, r.attr.MaxTotalMcastQPAttach)
	}
	if !ok && r.cfg.McastFilter != nil {
		if err := r.cfg.McastFilter(gid, true); err != nil {
			errno := unix.ENOMEM // dev_mc_add's failure
			errors.As(err, &errno)
			return errorf(errno, "attach mcast %v: netdev filter: %v", gid, err)
		}
	}
	g.members = append(g.members, q)
	r.mcgs[gid] = g
	r.attached++
	return nil
}

// DetachMcast removes q from gid (rxe_detach_mcast): an unknown group or a
// non-member is EINVAL; the group goes with its last member.
func (r *device) DetachMcast(c *emu.QP, gid emu.GID, lid uint16) error {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	g, ok := r.mcgs[gid]
	if !ok {
		return errorf(unix.EINVAL, "detach mcast %v: no such group", gid)
	}
	for i, m := range g.members {
		if m == q {
			g.members = append(g.members[:i], g.members[i+1:]...)
			r.attached--
			if len(g.members) == 0 {
				delete(r.mcgs, gid)
				if r.cfg.McastFilter != nil {
					r.cfg.McastFilter(gid, false) // rxe_mcast_del ignores dev_mc_del's result
				}
			}
			return nil
		}
	}
	return errorf(unix.EINVAL, "detach mcast %v: QP %#x is not a member", gid, q.qpn)
}

// memberships counts q's groups; r.mu held.
func (r *device) memberships(q *qp) int {
	n := 0
	for _, g := range r.mcgs {
		for _, m := range g.members {
			if m == q {
				n++
			}
		}
	}
	return n
}

// members returns the QPs of group gid, for multicast delivery.
func (r *device) members(gid emu.GID) []*qp {
	if g, ok := r.mcgs[gid]; ok {
		return g.members
	}
	return nil
}
