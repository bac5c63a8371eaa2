package rxe

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
)

// Device is an emulated rxe device: the verbs device a program uses (the
// embedded *emu.Device, with its PDs, CQs, QPs, MRs, queries and events)
// and what is rxe's own: removing the device, driving it step by step in
// synchronous mode, its link state and its frame count. Create it with
// New; the hardware counters are the emu.Device's (AllocHWPortStats).
type Device struct {
	*emu.Device
	r *device
}

// Kernel returns the Linux release whose rxe the device is (Config.Kernel,
// or DefaultKernel).
func (d *Device) Kernel() Kernel { return d.r.cfg.Kernel }

// Close removes the device (rdma link delete): it detaches from its link,
// closing the link and waiting for the device's readers, then unregisters
// the device from the core, which removes its clients and waits for the
// references they hold. The error is the link's Close error.
func (d *Device) Close() error {
	err := d.r.Close()
	driver.Unregister(d.Device)
	return err
}

// Poll processes every frame that has arrived and returns how many it
// processed. With Config.Synchronous this is the only place frames are
// processed, so a test drives two devices step by step (post, Poll both
// until nothing moves, advance a clock.Manual to fire timers). Without a
// link it returns 0.
func (d *Device) Poll() int { return d.r.Poll() }

// Received returns how many frames the device has read from its link
// (processed or waiting for Poll).
func (d *Device) Received() uint64 { return d.r.Received() }

// InlineFrames returns how many of the frames the device received were
// processed in the goroutine of a PostSend, on this device or on its peer
// at the other end of a bare link.PipeEnd (Config.NoInline), instead of
// in the device's reading goroutine.
func (d *Device) InlineFrames() uint64 { return d.r.inlineFrames.Load() }

// SetLink changes the bound interface's link state (netdev up/down,
// carrier) and raises IB_EVENT_PORT_ACTIVE or IB_EVENT_PORT_ERR like
// rxe_port_up / rxe_port_down; each down counts in link_downed.
func (d *Device) SetLink(up bool) { d.r.SetLink(up) }

// SetLinkState changes the bound interface's administrative state (up)
// and carrier apart, which the port's physical state tells apart
// (rxe_query_port: POLLING when up without carrier, DISABLED when down);
// the events and link_downed are SetLink's.
func (d *Device) SetLinkState(up, carrier bool) { d.r.SetLinkState(up, carrier) }

// The driver implements the device ops and the optional ops rxe has.
var (
	_ emu.DeviceOps       = (*device)(nil)
	_ emu.SRQModifier     = (*device)(nil)
	_ emu.CQResizer       = (*device)(nil)
	_ emu.MRReregisterer  = (*device)(nil)
	_ emu.AHModifier      = (*device)(nil)
	_ emu.McastAttacher   = (*device)(nil)
	_ emu.HWStatsProvider = (*device)(nil)
	_ emu.MADLayerTaker   = (*device)(nil)
	_ emu.MADProcessor    = (*device)(nil)
)
