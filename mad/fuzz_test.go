package mad

import "testing"

// FuzzParseCM: ParseCM never panics, and for everything it accepts every
// accessor of the message its attribute names runs within the view, and
// re-encoding the decoded fields reproduces the decoded fields.
func FuzzParseCM(f *testing.F) {
	for _, a := range []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP} {
		f.Add([]byte(NewCM(a, 1)))
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseCM(b)
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
		default:
			t.Fatalf("ParseCM accepted attribute %v", m.AttributeID())
		}
	})
}
