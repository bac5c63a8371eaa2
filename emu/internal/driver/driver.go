// Package driver is the contract between the verbs core (package emu) and
// the drivers built on it (package emu/rxe): what a driver may do that a
// user of emu may not. A driver registers a device with its DeviceOps,
// keeps its own state in the core's objects, gives them their numbers and
// keys, raises events and unregisters the device when it goes away.
//
// Package emu fills these functions in when it is initialized; a driver
// calls them. Being internal to emu, the package is out of reach of
// everything outside emu's tree, so the objects a user holds expose none
// of it. The functions take the core's types as any because emu imports
// this package, not the other way round; each says which types it
// accepts and panics on another, a programming error of the driver.
package driver

var (
	// NewDevice registers a device driven by ops, an emu.DeviceOps, with
	// cfg, an emu.Config (ib_alloc_device + ib_register_device), and
	// returns the *emu.Device.
	NewDevice func(ops, cfg any) (dev any, err error)

	// Unregister removes a *emu.Device (ib_unregister_device): clients
	// are removed and it waits until every reference is put.
	Unregister func(dev any)

	// Dispatch delivers an emu.Event to a *emu.Device's handlers
	// (ib_dispatch_event).
	Dispatch func(dev, ev any)

	// Priv returns the driver state stored in a *emu.PD, *emu.CQ,
	// *emu.SRQ, *emu.QP, *emu.MR, *emu.MW, *emu.AH or *emu.XRCD (nil
	// before SetPriv).
	Priv func(obj any) any

	// SetPriv stores the driver's state in one of the objects Priv
	// accepts.
	SetPriv func(obj, priv any)

	// SetQPNum sets a *emu.QP's number (ib_qp.qp_num).
	SetQPNum func(qp any, qpn uint32)

	// SetKeys sets the keys of a *emu.MR (lkey and rkey) or the rkey of a
	// *emu.MW (lkey ignored).
	SetKeys func(obj any, lkey, rkey uint32)
)

// Ops returns the emu.DeviceOps a *emu.Device was registered with, for
// the helpers that ask which optional ops a driver has
// (rdma_cap_roce_gid_table).
var Ops func(dev any) any

// SetNetDevLink records a *emu.Device's interface going up (with carrier)
// or down, from the driver's link notifier.
var SetNetDevLink func(dev any, up bool)

// SetNetDevState records a *emu.Device's interface state: administratively
// down, or up without carrier, from the driver's link notifier.
var SetNetDevState func(dev any, down, noCarrier bool)
