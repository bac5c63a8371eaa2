package mad

import (
	"bytes"
	"testing"
)

// FuzzParseCM: ParseCM and UnmatchedReply never panic, UnmatchedReply
// answers no CM message and answers with the MAD itself as a GetResp, and
// for everything ParseCM accepts every
// accessor of the message its attribute names runs within the view, and
// re-encoding the decoded fields reproduces the decoded fields.
func FuzzParseCM(f *testing.F) {
	for _, a := range []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP} {
		f.Add([]byte(NewCM(a, 1)))
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Add(udaddySIDRREQ())
	f.Add(udaddySIDRREP())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseCM(b)
		if r, ok := UnmatchedReply(b); ok {
			if err == nil {
				t.Fatal("a CM message is answered as unmatched")
			}
			if len(r) != Size || r[3] != MethodGetResp || r.Status() != StatusUnsupportedMethodAttr || !bytes.Equal(r[HeaderSize:], b[HeaderSize:Size]) {
				t.Fatalf("unmatched reply %x", r)
			}
		}
		if err != nil {
			return
		}
		_ = m.HeaderFields()
		n := NewCM(m.AttributeID(), m.TransactionID())
		switch m.AttributeID() {
		case AttrREQ:
			f := REQ(m).Fields()
			REQ(n).Encode(&f)
			if g := REQ(n).Fields(); g.StartingPSN != f.StartingPSN || g.PrimaryLocalGID != f.PrimaryLocalGID {
				t.Fatal("REQ round trip")
			}
			if h, err := ParseCMAHeader(f.PrivateData); err == nil {
				_ = h.Fields()
			}
		case AttrMRA:
			f := MRA(m).Fields()
			MRA(n).Encode(&f)
		case AttrREJ:
			f := REJ(m).Fields()
			REJ(n).Encode(&f)
			_ = f.Reason.String()
			if len(REJ(m).ARI()) > REJARISize {
				t.Fatal("ARI beyond its area")
			}
		case AttrREP:
			f := REP(m).Fields()
			REP(n).Encode(&f)
			if REP(n).Fields().LocalQPN != f.LocalQPN {
				t.Fatal("REP round trip")
			}
		case AttrRTU:
			f := RTU(m).Fields()
			RTU(n).Encode(&f)
		case AttrDREQ:
			f := DREQ(m).Fields()
			DREQ(n).Encode(&f)
		case AttrDREP:
			f := DREP(m).Fields()
			DREP(n).Encode(&f)
		case AttrSIDRREQ:
			f := SIDRREQ(m).Fields()
			SIDRREQ(n).Encode(&f)
			if !bytes.Equal(n[HeaderSize:], m[HeaderSize:]) && bytes.Equal(m[30:32], []byte{0, 0}) {
				t.Fatal("SIDR_REQ round trip")
			}
			if h, err := ParseCMAHeader(f.PrivateData); err == nil {
				_ = h.Fields()
			}
			_, _, _ = ServicePort(f.ServiceID)
		case AttrSIDRREP:
			f := SIDRREP(m).Fields()
			SIDRREP(n).Encode(&f)
			if g := SIDRREP(n).Fields(); g.QPN != f.QPN || g.QKey != f.QKey || g.Status != f.Status {
				t.Fatal("SIDR_REP round trip")
			}
			_ = f.Status.String()
		default:
			t.Fatalf("ParseCM accepted attribute %v", m.AttributeID())
		}
	})
}

// FuzzParseCMAHeader: the rdma_cm header parser never panics, accepts
// only version 0 with IP version 4 or 6, and what it accepts encodes back
// to the same addresses and port.
func FuzzParseCMAHeader(f *testing.F) {
	f.Add(udaddySIDRREQ()[40:])
	f.Add(make([]byte, CMAHeaderSize))
	f.Add([]byte{0, 0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseCMAHeader(b)
		if err != nil {
			return
		}
		if h.Version() != CMAVersion || h.IPVersion() != 4 && h.IPVersion() != 6 {
			t.Fatalf("accepted version %d IP version %d", h.Version(), h.IPVersion())
		}
		fs := h.Fields()
		out := make(CMAHeader, CMAHeaderSize)
		out.Encode(&fs)
		if out.Fields() != fs {
			t.Fatalf("round trip %+v -> %+v", fs, out.Fields())
		}
	})
}
