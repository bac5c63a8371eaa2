//go:build linux

package uverbs

import (
	"encoding/binary"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// createAH is ib_uverbs_create_ah: the port must exist and the PD be the
// file's (EINVAL); rxe answers with the AH's number, which librxe puts in
// its UD WQEs.
func (c *call) createAH() error {
	cmd, err := request[CreateAh](c)
	if err != nil {
		return err
	}
	f := c.f
	a := &cmd.Attr
	if !f.dev.IsPortValid(uint32(a.Port_num)) {
		return errorf(unix.EINVAL, "CREATE_AH: port %d", a.Port_num)
	}
	pdo, err := f.get(kindPD, cmd.Pd_handle)
	if err != nil {
		return err
	}
	attr := ib.AHAttr{Type: kverbs.AHFindType(f.dev, uint32(a.Port_num)), SL: a.Sl, StaticRate: a.Static_rate,
		PortNum: uint32(a.Port_num)}
	if a.Is_global != 0 {
		attr.AHFlags = ib.AHGRH
		attr.GRH = ib.GlobalRoute{DGID: a.Grh.Dgid, FlowLabel: a.Grh.Flow_label, SGIDIndex: a.Grh.Sgid_index,
			HopLimit: a.Grh.Hop_limit, TrafficClass: a.Grh.Traffic_class}
	}
	u := c.udata()
	ah, err := pdo.pd.CreateUserAH(&attr, u)
	if err != nil {
		return wrap("CREATE_AH", err)
	}
	o := &object{kind: kindAH, ah: ah, userHandle: cmd.User_handle}
	h := f.newObject(o)
	if u.OutLen >= 4 {
		o.ahNum = binary.LittleEndian.Uint32(u.Out)
		f.ahNums[o.ahNum] = ah
	}
	if err := c.finishUdata(u); err != nil {
		f.destroyAH(o)
		return err
	}
	resp := CreateAhResp{Handle: h}
	if err := c.respond(bytesOf(&resp)); err != nil {
		f.destroyAH(o)
		return err
	}
	return nil
}

// destroyAH is ib_uverbs_destroy_ah.
func (c *call) destroyAH() error {
	cmd, err := request[DestroyAh](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindAH, cmd.Handle)
	if err != nil {
		return err
	}
	return c.f.destroyAH(o)
}

// destroyAH destroys an AH object; f.mu held.
func (f *File) destroyAH(o *object) error {
	if err := o.ah.DestroyUser(&emu.UData{}); err != nil {
		return wrap("destroy AH", err)
	}
	if o.ahNum != 0 {
		delete(f.ahNums, o.ahNum)
	}
	delete(f.objects, o.handle)
	return nil
}
