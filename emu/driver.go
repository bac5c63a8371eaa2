package emu

import (
	"fmt"

	"github.com/softroce/softroce/emu/internal/driver"
)

func init() {
	driver.NewDevice = func(ops, cfg any) (any, error) { return newDevice(ops.(DeviceOps), cfg.(Config)) }
	driver.Unregister = func(dev any) { dev.(*Device).unregister() }
	driver.SetNetDevLink = func(dev any, up bool) { dev.(*Device).setNetDevLink(up) }
	driver.SetNetDevState = func(dev any, down, noCarrier bool) { dev.(*Device).setNetDevState(down, noCarrier) }
	driver.Ops = func(dev any) any { return dev.(*Device).ops }
	driver.Dispatch = func(dev, ev any) { dev.(*Device).dispatch(ev.(Event)) }
	driver.Priv = func(obj any) any { return *privOf(obj) }
	driver.SetPriv = func(obj, priv any) { *privOf(obj) = priv }
	driver.SetQPNum = func(qp any, qpn uint32) { qp.(*QP).qpn = qpn }
	driver.SetKeys = func(obj any, lkey, rkey uint32) {
		switch o := obj.(type) {
		case *MR:
			o.lkey, o.rkey = lkey, rkey
		case *MW:
			o.rkey = rkey
		default:
			panic(fmt.Sprintf("emu: SetKeys on %T", obj))
		}
	}
}

// privOf returns where obj keeps its driver state.
func privOf(obj any) *any {
	switch o := obj.(type) {
	case *QP:
		return &o.priv
	case *CQ:
		return &o.priv
	case *MR:
		return &o.priv
	case *SRQ:
		return &o.priv
	case *AH:
		return &o.priv
	case *MW:
		return &o.priv
	case *PD:
		return &o.priv
	case *XRCD:
		return &o.priv
	}
	panic(fmt.Sprintf("emu: no driver state in %T", obj))
}
