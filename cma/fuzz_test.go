package cma

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
)

// FuzzReceive feeds arbitrary MADs from the peer's address through the
// CM's QP1 receive path with a listener and a connecting ID up: nothing
// panics, and destroying the IDs leaves no connection behind.
func FuzzReceive(f *testing.F) {
	for _, attr := range []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrREJ, mad.AttrMRA,
		mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		f.Add([]byte(mad.NewCM(attr, 1)))
	}
	cpi := mad.NewCM(mad.AttrClassPortInfo, 3)
	cpi[3] = mad.MethodGet // answered with a GetResp, as by the kernel's MAD layer
	f.Add([]byte(cpi))
	req := mad.NewCM(mad.AttrREQ, 7)
	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: 40000,
		Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1")})
	mad.REQ(req).Encode(&mad.REQFields{LocalCommID: 5, ServiceID: serviceID(PSTCP, 7174), LocalQPN: 0x11,
		PathMTU: 3, PrivateData: pd})
	f.Add([]byte(req))
	a, b := newPair(f, Config{Seed: 1}, Config{Seed: 2})
	f.Fuzz(func(t *testing.T, m []byte) {
		c := a.cm
		l, err := c.CreateID(PSTCP, qpstate.TypeRC, func(*Event) error { return nil }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174)); err != nil {
			t.Fatal(err)
		}
		if err := l.Listen(0); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, emu.GRHSize+mad.Size)
		hdr := buf[20:40]
		hdr[0] = 0x45
		src, dst := b.ip.As4(), a.ip.As4()
		copy(hdr[12:16], src[:])
		copy(hdr[16:20], dst[:])
		copy(buf[emu.GRHSize:], m)
		w := &emu.WC{ByteLen: uint32(emu.GRHSize + min(len(m), mad.Size)), WCFlags: emu.WCWithNetworkHdrType,
			NetworkHdrType: emu.NetworkIPv4}
		c.receive(w, buf)
		c.mu.Lock()
		ids := make([]*ID, 0, len(c.ids))
		for id := range c.ids {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			id.Destroy()
		}
		c.mu.Lock()
		left := len(c.ids) + len(c.conns) + len(c.remotes) + len(c.sidrs) + len(c.ports)
		c.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d IDs, connections or ports left", left)
		}
	})
}
