package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/wire"
)

// Build an RC SEND_ONLY the way rxe would send it from QP 17 to QP 18,
// then parse it back and check its ICRC.
func Example() {
	f := wire.Frame{
		DstMAC:   [6]byte{0x52, 0x54, 0, 0, 0, 2},
		SrcMAC:   [6]byte{0x52, 0x54, 0, 0, 0, 1},
		Src:      netip.MustParseAddr("192.168.1.1"),
		Dst:      netip.MustParseAddr("192.168.1.2"),
		HopLimit: 64,
		SrcPort:  wire.GetUDPSport(0, 17, 18),
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 18,
			AckReq: true, PSN: 1},
		Payload: []byte("hello"),
	}
	buf := make([]byte, 1500)
	n, err := wire.Build(buf, &f)
	if err != nil {
		panic(err)
	}

	var p wire.Packet
	if err := p.Decode(buf[:n]); err != nil {
		panic(err)
	}
	b := p.BTH()
	fmt.Printf("%v qp=%d psn=%d ack=%v sport=%#x payload=%q pad=%d icrc=%v\n",
		b.Opcode(), b.DestQP(), b.PSN(), b.AckReq(), p.UDPSrcPort(), p.Payload(), b.PadCnt(), p.VerifyICRC())
	// Output: RC_SEND_ONLY qp=18 psn=1 ack=true sport=0xc132 payload="hello" pad=3 icrc=<nil>
}

// Parse errors say what is wrong and where, and wrap a sentinel.
func ExampleParse() {
	frame := make([]byte, 60) // zero ethertype: not IP
	_, err := wire.Parse(frame)
	fmt.Println(err)
	// Output: wire: ethernet at offset 12: ethertype is not IP (0): not RoCEv2
}
