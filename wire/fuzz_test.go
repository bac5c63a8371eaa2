package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary frames to Decode. Seeds: a sample of every
// capture's frames (RoCE and not) and built frames of every opcode family.
// It checks Decode never panics, that every error is a *ParseError wrapping
// a sentinel, and that a frame that parses yields in-bounds views and
// rebuilds (Fields → Build → Decode) to the same fields.
func FuzzParse(f *testing.F) {
	for _, path := range captureFiles(f, "*.pcap") {
		for i, fr := range readCapture(f, path) {
			if i%16 == 0 {
				f.Add(fr)
			}
		}
	}
	for _, fr := range sampleFrames() {
		b := make([]byte, fr.Len())
		if _, err := Build(b, fr); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Packet
		err := p.Decode(data)
		// The ICRC functions must be total at any offset.
		for _, off := range []int{-1, 0, EthernetSize, EthernetSize + VLANTagSize, len(data) - 1, len(data)} {
			_ = VerifyICRC(data, off)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrNotRoCE) &&
				!errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			if pe.Offset < 0 || pe.Offset > len(data) {
				t.Fatalf("error offset %d outside frame of %d bytes", pe.Offset, len(data))
			}
			_ = err.Error()
			return
		}
		if p.Len() > len(data) || p.PayloadOffset()+p.PayloadLen() > p.ICRCOffset() {
			t.Fatalf("offsets beyond frame: len %d, frame %d", p.Len(), len(data))
		}
		op := p.Opcode()
		if p.PayloadOffset()-p.BTHOffset() != op.HeaderLen() {
			t.Fatalf("payload at %d, BTH at %d, header length %d", p.PayloadOffset(), p.BTHOffset(), op.HeaderLen())
		}
		// Touch every view.
		_ = p.BTH().Fields()
		_, _, _, _ = p.RDETH(), p.DETH(), p.XRCETH(), p.FETH()
		_, _, _, _ = p.RETH(), p.AtomicETH(), p.AETH(), p.AtomicAckETH()
		_, _, _ = p.ImmDt(), p.IETH(), p.CNPReserved()
		_, _, _ = p.Pad(), p.Src(), p.Dst()
		_ = p.VerifyICRC()

		var fr Frame
		p.Fields(&fr)
		buf := make([]byte, fr.Len())
		n, err := Build(buf, &fr)
		if err != nil {
			t.Fatalf("Build of parsed fields: %v", err)
		}
		var q Packet
		if err := q.Decode(buf[:n]); err != nil {
			t.Fatalf("Decode of rebuilt frame: %v", err)
		}
		if err := q.VerifyICRC(); err != nil {
			t.Fatalf("rebuilt frame: %v", err)
		}
		var fr2 Frame
		q.Fields(&fr2)
		fr.BTH.PadCnt = uint8(padLen(len(fr.Payload)))
		if fr.SrcPort == 0 {
			// Source port 0 (never sent by rxe) means "derive from the
			// flow label" to Build.
			fr.SrcPort = FlowLabelToUDPSport(fr.FlowLabel)
		}
		if !bytes.Equal(fr.Payload, fr2.Payload) {
			t.Fatal("rebuilt payload differs")
		}
		fr.Payload, fr2.Payload = nil, nil
		if !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("rebuilt fields differ:\n%+v\n%+v", fr, fr2)
		}
	})
}
