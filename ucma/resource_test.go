//go:build linux

package ucma

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/uverbs"
)

// TestCMIDsListAttachedIDsAndListeners: the resource list holds what
// the kernel's restrack holds of rdma_cm: a listener (on a wildcard, not
// attached to the port; on the device's address, attached) and an ID
// attached by address resolution, which carries its QP once connect
// names one; an ID only created is not listed.
func TestCMIDsListAttachedIDsAndListeners(t *testing.T) {
	cs, s, lb := newServices(t)
	srv, cli := open(t, s, 41), open(t, cs, 42)
	defer srv.f.Close()
	defer cli.f.Close()
	ip := lb.B.IP
	srv.createID(cma.PSUDP, 1) // created only: not listed
	any := srv.createID(cma.PSTCP, 2)
	at := srv.createID(cma.PSTCP, 3)
	for id, a := range map[uint32]netip.AddrPort{any: netip.AddrPortFrom(netip.IPv4Unspecified(), 7175), at: netip.AddrPortFrom(ip, 7174)} {
		if err := srv.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: id, Addr: sin(a)}, 0)); err != nil {
			t.Fatal(err)
		}
		if err := srv.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: id, Backlog: 1}, 0)); err != nil {
			t.Fatal(err)
		}
	}
	want := []CMID{
		{Idn: any, Device: s.CM().Device().Name(), PID: 41, State: cma.StateListen, PS: cma.PSTCP, QPType: qpstate.TypeRC, Src: netip.AddrPortFrom(netip.IPv4Unspecified(), 7175)},
		{Idn: at, Device: s.CM().Device().Name(), PID: 41, State: cma.StateListen, PS: cma.PSTCP, Attached: true, QPType: qpstate.TypeRC, Src: netip.AddrPortFrom(ip, 7174)},
	}
	if got := s.CMIDs(); !slices.Equal(got, want) {
		t.Fatalf("server's IDs:\n got %+v\nwant %+v", got, want)
	}

	id := cli.createID(cma.PSTCP, 4)
	if got := cs.CMIDs(); len(got) != 0 {
		t.Fatalf("an ID only created is listed: %+v", got)
	}
	if err := cli.write(cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: id, Dst_addr: sin(netip.AddrPortFrom(ip, 7174)), Timeout_ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	cli.event() // ADDR_RESOLVED
	if err := cli.write(cmdBuf(uverbs.UcmCmdResolveRoute, uverbs.UcmResolveRoute{Id: id, Ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	cli.event() // ROUTE_RESOLVED
	if err := cli.write(cmdBuf(uverbs.UcmCmdConnect, uverbs.UcmConnect{Id: id, Param: uverbs.UcmConnParam{Valid: 1, Qp_num: 0x55,
		Responder_resources: 1, Initiator_depth: 1, Retry_count: 7, Rnr_retry_count: 7}}, 0)); err != nil {
		t.Fatal(err)
	}
	got := cs.CMIDs()
	if len(got) != 1 {
		t.Fatalf("client's IDs: %+v, want the connecting one", got)
	}
	c := got[0]
	if c.Idn != id || c.PID != 42 || c.State != cma.StateConnect || !c.Attached || c.QPNum != 0x55 || c.QPType != qpstate.TypeRC ||
		c.Dst != netip.AddrPortFrom(ip, 7174) || c.Src.Addr() != lb.A.IP || c.Src.Port() == 0 {
		t.Fatalf("connecting ID %+v", c)
	}
}
