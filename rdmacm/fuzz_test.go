package rdmacm

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
)

// FuzzReceive feeds arbitrary MADs to a CM's QP1 receive path, as if they
// came from the peer's address, with a listener up: whatever the bytes,
// it neither panics nor hangs, and what it keeps stays within the
// listener's backlog (the rest is answered or dropped).
func FuzzReceive(f *testing.F) {
	lb, a, b := newPair(f, Config{Seed: 41}, Config{Seed: 42})
	l, err := b.cm.Listen(7174)
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	for _, m := range []mad.MAD{
		testREQ(lb, a, 1, 7174), testREQ(lb, a, 2, 9999),
		mad.NewCM(mad.AttrREP, 3), mad.NewCM(mad.AttrRTU, 4), mad.NewCM(mad.AttrDREQ, 5), mad.NewCM(mad.AttrDREP, 6),
		mad.NewCM(mad.AttrMRA, 7), mad.NewCM(mad.AttrREJ, 8), mad.NewCM(mad.AttrSIDRREQ, 9), mad.NewCM(mad.AttrSIDRREP, 10),
		mad.NewCM(mad.AttrLAP, 11),
	} {
		f.Add([]byte(m), uint16(mad.Size))
	}
	f.Add([]byte{1, 7, 2, 3}, uint16(4))
	src := lb.A.IP.As4()
	f.Fuzz(func(t *testing.T, b8 []byte, n uint16) {
		buf := make([]byte, slotSize)
		buf[20] = 0x45
		copy(buf[20+12:], src[:])
		copy(buf[emu.GRHSize:], b8)
		w := emu.WC{Status: emu.WCSuccess, Opcode: emu.WCRecv, ByteLen: uint32(min(int(n), mad.Size) + emu.GRHSize),
			WCFlags: emu.WCWithNetworkHdrType, NetworkHdrType: emu.NetworkIPv4}
		b.cm.receive(&w, buf)
		if o := b.cm.objects(); o[0] > cap(l.reqs) || o[1] > cap(l.reqs) || o[2] > 1 {
			t.Fatalf("objects %v beyond the backlog of %d", o, cap(l.reqs))
		}
	})
}
