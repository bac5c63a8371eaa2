//go:build linux

package ucma

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/workload"
)

// TestIDsGoToTheDeviceOfTheirAddress: one Service over the CMs of two
// devices of a host: an ID goes to the device whose address it binds or
// resolves from (or, with no source, the device a local destination is
// on), as the kernel's cma_acquire_dev_by_src_ip, taking the options set
// before along; an ID on the first device's address stays there; once a
// CM is taken out (device removal) its addresses are no one's.
func TestIDsGoToTheDeviceOfTheirAddress(t *testing.T) {
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	var cms []*cma.CM
	for i, d := range []*workload.LoopbackSide{lb.A, lb.B} {
		cm, err := cma.New(cma.Config{Dev: d.Dev, Seed: uint64(i + 1), Timewait: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		cms = append(cms, cm)
	}
	s := NewService(cms[0], 1)
	s.AddCM(cms[1])
	c := open(t, s, 41)
	defer c.f.Close()
	bind := func(id uint32, a netip.Addr, port uint16) error {
		return c.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: id, Addr: sin(netip.AddrPortFrom(a, port))}, 0))
	}
	listen := func(id uint32) {
		t.Helper()
		if err := c.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: id, Backlog: 1}, 0)); err != nil {
			t.Fatal(err)
		}
	}
	reuse := func(id uint32) {
		t.Helper()
		const at = respAt + 0x100
		if _, err := c.m.WriteAt([]byte{1, 0, 0, 0}, at); err != nil {
			t.Fatal(err)
		}
		if err := c.write(cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Id: id, Level: optionID, Optname: optionIDReuseAddr, Optlen: 4, Optval: at}, 0)); err != nil {
			t.Fatal(err)
		}
	}
	onA := c.createID(cma.PSTCP, 1)
	onB := c.createID(cma.PSTCP, 2)
	if err := bind(onA, lb.A.IP, 7300); err != nil {
		t.Fatal(err)
	}
	if err := bind(onB, lb.B.IP, 7301); err != nil {
		t.Fatal(err)
	}
	listen(onA)
	listen(onB)
	resolved := c.createID(cma.PSTCP, 3)
	if err := c.write(cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: resolved, Dst_addr: sin(netip.AddrPortFrom(lb.B.IP, 7301)), Timeout_ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	want := map[uint32]string{onA: lb.A.Dev.Name(), onB: lb.B.Dev.Name(), resolved: lb.B.Dev.Name()}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := map[uint32]string{}
		for _, id := range s.CMIDs() {
			got[id.Idn] = id.Device
		}
		ok := len(got) == len(want)
		for id, dev := range want {
			ok = ok && got[id] == dev
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("IDs by device: got %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// SO_REUSEADDR set before the move goes with the ID: two IDs with
	// it share B's port (neither listens); without it, EADDRINUSE.
	first, second, plain := c.createID(cma.PSTCP, 4), c.createID(cma.PSTCP, 5), c.createID(cma.PSTCP, 6)
	reuse(first)
	reuse(second)
	for _, id := range []uint32{first, second} {
		if err := bind(id, lb.B.IP, 7302); err != nil {
			t.Fatalf("bind of an ID with SO_REUSEADDR to a shared port: %v", err)
		}
	}
	if err := bind(plain, lb.B.IP, 7302); !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("bind of an ID without SO_REUSEADDR to a taken port: %v, want EADDRINUSE", err)
	}
	// B's CM taken out: B's address is no device's the Service knows.
	s.RemoveCM(cms[1])
	gone := c.createID(cma.PSTCP, 7)
	if err := bind(gone, lb.B.IP, 7303); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("bind to the removed device's address: %v, want EADDRNOTAVAIL", err)
	}
}

// TestWildcardListenerHearsEveryDevice: a listener bound to the wildcard
// listens on each device of the Service, as cma_listen_on_all (and on
// one added after it listened, as cma_add_one): a
// connection from the first device to the second's address reaches it
// as a CONNECT_REQUEST, and once it is destroyed, the second device
// rejects the next one (no listener).
func TestWildcardListenerHearsEveryDevice(t *testing.T) {
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	var cms []*cma.CM
	for i, d := range []*workload.LoopbackSide{lb.A, lb.B} {
		cm, err := cma.New(cma.Config{Dev: d.Dev, Seed: uint64(i + 1), Timewait: 20 * time.Millisecond,
			REQTimeout: 200 * time.Millisecond, MaxRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		cms = append(cms, cm)
	}
	// The second device comes after the listener: it listens there too,
	// as cma_add_one makes it.
	s := NewService(cms[0], 1)
	srv, cli := open(t, s, 41), open(t, s, 42)
	defer srv.f.Close()
	defer cli.f.Close()
	l := srv.createID(cma.PSTCP, 0x10)
	if err := srv.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: l, Addr: sin(netip.AddrPortFrom(netip.IPv4Unspecified(), 7320))}, 0)); err != nil {
		t.Fatal(err)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: l, Backlog: 4}, 0)); err != nil {
		t.Fatal(err)
	}
	s.AddCM(cms[1])
	connect := func() uint32 {
		t.Helper()
		id := cli.createID(cma.PSTCP, 0x20)
		if err := cli.write(cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: id, Src_addr: sin(netip.AddrPortFrom(lb.A.IP, 0)),
			Dst_addr: sin(netip.AddrPortFrom(lb.B.IP, 7320)), Timeout_ms: 2000}, 0)); err != nil {
			t.Fatal(err)
		}
		if ev := cli.event(); ev.Event != uint32(cma.EventAddrResolved) {
			t.Fatalf("event %+v", ev)
		}
		if err := cli.write(cmdBuf(uverbs.UcmCmdResolveRoute, uverbs.UcmResolveRoute{Id: id, Ms: 2000}, 0)); err != nil {
			t.Fatal(err)
		}
		if ev := cli.event(); ev.Event != uint32(cma.EventRouteResolved) {
			t.Fatalf("event %+v", ev)
		}
		if err := cli.write(cmdBuf(uverbs.UcmCmdConnect, uverbs.UcmConnect{Id: id, Param: uverbs.UcmConnParam{Valid: 1, Qp_num: 0x55,
			Responder_resources: 1, Initiator_depth: 1, Retry_count: 7, Rnr_retry_count: 7}}, 0)); err != nil {
			t.Fatal(err)
		}
		return id
	}
	connect()
	if req := srv.event(); req.Event != uint32(cma.EventConnectRequest) || req.Uid != 0x10 {
		t.Fatalf("a connection to the second device's address: %+v, want the wildcard listener's CONNECT_REQUEST", req)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Id: l, Response: respAt}, 4)); err != nil {
		t.Fatal(err)
	}
	connect()
	if ev := cli.event(); ev.Event != uint32(cma.EventRejected) && ev.Event != uint32(cma.EventUnreachable) {
		t.Fatalf("a connection after the listener's end: %+v, want a rejection", ev)
	}
}
