package tap_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/tap"
)

// tapWithKernelPeer opens TAP srbench0 in a fresh namespace with the
// kernel address 10.77.2.1/24 on it and a static neighbour 10.77.2.2 at
// srA's MAC, so a kernel UDP socket sending to 10.77.2.2 feeds the TAP.
func tapWithKernelPeer(tb testing.TB) (*tap.Device, *net.UDPConn) {
	tb.Helper()
	ns := testenv.NewNetNS(tb)
	var d *tap.Device
	if err := ns.Do(func() (err error) { d, err = tap.Open("srbench0", nil); return err }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	ns.Run(tb, "ip", "addr", "add", "10.77.2.1/24", "dev", "srbench0")
	ns.Run(tb, "ip", "neigh", "replace", "10.77.2.2", "lladdr", srA.mac.String(), "dev", "srbench0", "nud", "permanent")
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 2, 2), Port: 4791})
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return d, c
}

// readDatagram reads from d until the frame of a 1 KiB UDP datagram
// arrives, skipping whatever else the kernel sends (e.g. IPv6 router
// solicitations).
func readDatagram(tb testing.TB, d *tap.Device, bufs [][]byte, sizes []int) {
	for {
		if _, err := d.ReadPackets(bufs, sizes); err != nil {
			tb.Fatal(err)
		}
		if sizes[0] == 14+20+8+1024 {
			return
		}
	}
}

// TestTAPZeroAllocs guards the TAP data path: writing and reading a frame
// allocate nothing.
func TestTAPZeroAllocs(t *testing.T) {
	d, c := tapWithKernelPeer(t)
	spec := srA
	spec.ip4 = netip.MustParseAddr("10.77.2.2")
	out := [][]byte{roceFrame(t, spec, net.HardwareAddr{0x02, 0x77, 0, 0, 2, 1}, netip.MustParseAddr("10.77.2.1"), make([]byte, 1024))}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.WritePackets(out); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("WritePackets allocates %v times per frame, want 0", allocs)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	payload := make([]byte, 1024)
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
		readDatagram(t, d, bufs, sizes)
	}); allocs != 0 {
		t.Errorf("ReadPackets allocates %v times per frame, want 0", allocs)
	}
}

// BenchmarkTAP measures one frame per system call each way: writes of
// 1 KiB RoCE-shaped frames into the kernel, and reads of frames a kernel
// UDP socket sends out through the TAP (the baseline a TAP link is held to).
func BenchmarkTAP(b *testing.B) {
	d, c := tapWithKernelPeer(b)
	b.Run("write", func(b *testing.B) {
		spec := srA
		spec.ip4 = netip.MustParseAddr("10.77.2.2")
		out := [][]byte{roceFrame(b, spec, net.HardwareAddr{0x02, 0x77, 0, 0, 2, 1}, netip.MustParseAddr("10.77.2.1"), make([]byte, 1024))}
		b.SetBytes(int64(len(out[0])))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.WritePackets(out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		payload := make([]byte, 1024)
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		b.SetBytes(14 + 20 + 8 + 1024)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Write(payload); err != nil {
				b.Fatal(err)
			}
			readDatagram(b, d, bufs, sizes)
		}
	})
}
