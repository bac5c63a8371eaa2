//go:build linux

package ucma

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/uverbs"
	"golang.org/x/sys/unix"
)

// TestDeviceRemoval: the device's removal queues one DEVICE_REMOVAL for a
// context whose ID is on the device, and then closes that ID as the
// kernel's ucma_close_id does: its commands are ENXIO, DESTROY_ID still
// answers with the events reported. A context without a device hears
// nothing and keeps working.
func TestDeviceRemoval(t *testing.T) {
	s, lb := newService(t)
	c := open(t, s, 1)
	defer c.f.Close()
	on := c.createID(cma.PSTCP, 7)
	if err := c.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: on, Addr: sin(netip.AddrPortFrom(lb.A.IP, 7480))}, 0)); err != nil {
		t.Fatal(err)
	}
	if err := c.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: on, Backlog: 1}, 0)); err != nil {
		t.Fatal(err)
	}
	off := c.createID(cma.PSTCP, 8)

	if n := s.CM().RemoveDevice(); n != 1 {
		t.Fatalf("RemoveDevice: %d IDs got the event, want 1", n)
	}
	ev := c.event()
	if cma.EventType(ev.Event) != cma.EventDeviceRemoval || ev.Id != on || ev.Uid != 7 || ev.Status != 0 {
		t.Fatalf("event %v id %d uid %d status %d; want DEVICE_REMOVAL of %d (uid 7)",
			cma.EventType(ev.Event), ev.Id, ev.Uid, int32(ev.Status), on)
	}
	s.CM().RemoveDevice()
	fd := int(c.f.EventFile().Fd())
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 50); n != 0 || err != nil {
		t.Fatalf("poll after the one event: %d, %v; want nothing more", n, err)
	}
	for _, cmd := range [][]byte{
		cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: on, Backlog: 1}, 0),
		cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: on, Dst_addr: sin(netip.AddrPortFrom(lb.B.IP, 7481)), Timeout_ms: 2000}, 0),
		cmdBuf(uverbs.UcmCmdDisconnect, uverbs.UcmDisconnect{Id: on}, 0),
	} {
		if err := c.write(cmd); !errnoIs(err, unix.ENXIO) {
			t.Errorf("command %d on the removed ID: %v, want ENXIO", binary.NativeEndian.Uint32(cmd), err)
		}
	}
	if err := c.write(cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Id: on, Response: respAt}, 4)); err != nil {
		t.Fatalf("DESTROY_ID of the removed ID: %v", err)
	}
	if got := binary.NativeEndian.Uint32(c.m.buf[respAt-base:]); got != 1 {
		t.Errorf("DESTROY_ID reported %d events, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Contexts() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.Contexts(); n != 1 {
		t.Errorf("%d contexts left, want the one without a device", n)
	}
	if err := c.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: off, Addr: sin(netip.AddrPortFrom(netip.IPv4Unspecified(), 7482))}, 0)); err != nil {
		t.Errorf("bind of the ID without a device: %v", err)
	}
}
