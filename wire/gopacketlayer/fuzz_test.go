package gopacketlayer

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"

	"github.com/softroce/softroce/wire"
)

// FuzzRoCE decodes arbitrary UDP payloads with the RoCE layer: it never
// panics, and a payload that decodes serializes back to the same bytes
// (headers, payload, pad and ICRC), which a second decode reads equally.
func FuzzRoCE(f *testing.F) {
	for i, fr := range captures(f) {
		if p, err := wire.Parse(fr); err == nil && i%20 == 0 {
			f.Add(p.UDPPayload())
		}
	}
	f.Add([]byte{0x11, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0x1f, 0, 0, 1, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r RoCE
		if err := r.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &r, gopacket.Payload(r.Payload)); err != nil {
			t.Fatalf("SerializeLayers: %v", err)
		}
		// Pad bytes and a CNP's reserved bytes are written as zeros;
		// compare the rest exactly.
		want := bytes.Clone(data)
		padOff := len(r.Contents) + len(r.Payload)
		clear(want[padOff : padOff+r.Pad])
		if off, ok := r.BTH.Opcode.HeaderOffset(wire.HdrCNPReserved); ok {
			clear(want[off : off+wire.CNPReservedSize])
		}
		if got := buf.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("round trip:\n got % x\nwant % x", got, want)
		}
		var r2 RoCE
		if err := r2.DecodeFromBytes(buf.Bytes(), gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("second decode: %v", err)
		}
		if r2.BTH != r.BTH || r2.ICRC != r.ICRC || r2.AETH != r.AETH || r2.RETH != r.RETH {
			t.Fatal("second decode differs")
		}
	})
}
