package mad

import (
	"encoding/binary"
	"testing"
)

// pmaGet returns a PMA Get of attribute a with transaction ID tid.
func pmaGet(a AttrID, tid uint64) MAD {
	m := make(MAD, Size)
	m.EncodeHeader(&HeaderFields{BaseVersion: BaseVersion, MgmtClass: ClassPerfMgmt, ClassVersion: 1,
		Method: MethodGet, TransactionID: tid, AttributeID: a})
	m[pmaDataOffset+1] = 1 // PortSelect
	return m
}

// TestPMAAnswerIsRxes: rxe 7.2's answers: ClassPortInfo's capability mask,
// PortCounters' LinkDownedCounter stopping at 255, PortCountersExtended's
// data in 4-byte words and packets, each a GetResp of the request's
// header; another attribute, another port and another class are not
// answered; a Set is answered with zeros.
func TestPMAAnswerIsRxes(t *testing.T) {
	c := PMACounters{LinkDowned: 300, SentBytes: 4099, RcvdBytes: 8, SentPkts: 7, RcvdPkts: 9}
	r, ok := PMAAnswer(pmaGet(AttrPMAClassPortInfo, 0x1234_0000_0042), 1, c)
	if !ok || r[hdrMethod] != MethodGetResp || r.TransactionID() != 0x1234_0000_0042 || r.Status() != 0 ||
		r.AttributeID() != AttrPMAClassPortInfo || binary.BigEndian.Uint16(r[pmaDataOffset+2:]) != 0x0200 {
		t.Fatalf("ClassPortInfo: %v %x", ok, r[:72])
	}
	r, ok = PMAAnswer(pmaGet(AttrPortCounters, 1), 1, c)
	if !ok || r[pmaDataOffset+pmaPortCountersLinkDowned] != 255 || r[pmaDataOffset+1] != 0 {
		t.Fatalf("PortCounters: %v %x", ok, r[pmaDataOffset:pmaDataOffset+16])
	}
	r, ok = PMAAnswer(pmaGet(AttrPortCountersExtended, 1), 1, c)
	d := r[pmaDataOffset:]
	if !ok || binary.BigEndian.Uint64(d[8:]) != 1024 || binary.BigEndian.Uint64(d[16:]) != 2 ||
		binary.BigEndian.Uint64(d[24:]) != 7 || binary.BigEndian.Uint64(d[32:]) != 9 {
		t.Fatalf("PortCountersExtended: %v %x", ok, d[:40])
	}
	if _, ok := PMAAnswer(pmaGet(0x0010, 1), 1, c); ok {
		t.Error("PortSamplesControl answered")
	}
	if _, ok := PMAAnswer(pmaGet(AttrPortCounters, 1), 2, c); ok {
		t.Error("port 2 answered")
	}
	cm := NewCM(AttrREQ, 1)
	if _, ok := PMAAnswer(cm, 1, c); ok {
		t.Error("a CM MAD answered")
	}
	set := pmaGet(AttrPortCounters, 1)
	set[hdrMethod] = MethodSet
	r, ok = PMAAnswer(set, 1, c)
	if !ok {
		t.Fatal("a Set is not answered")
	}
	for _, b := range r {
		if b != 0 {
			t.Fatalf("a Set's answer is not zeros: %x", r)
		}
	}
}

// FuzzPMAAnswer: PMAAnswer never panics; an answer is a whole MAD, and
// the answer to a Get is a GetResp of its transaction ID, class and
// attribute.
func FuzzPMAAnswer(f *testing.F) {
	for _, a := range []AttrID{AttrPMAClassPortInfo, AttrPortCounters, AttrPortCountersExtended, 0x0010} {
		f.Add([]byte(pmaGet(a, 7)), uint8(1))
	}
	f.Add([]byte{1, 4, 1, 1}, uint8(1))
	f.Add([]byte(NewCM(AttrREQ, 1)), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, port uint8) {
		r, ok := PMAAnswer(b, port, PMACounters{SentBytes: 1 << 40, RcvdPkts: 3})
		if !ok {
			return
		}
		if len(r) != Size {
			t.Fatalf("answer of %d bytes", len(r))
		}
		m := MAD(b[:Size])
		if m[hdrMethod] == MethodGet && (r[hdrMethod] != MethodGetResp || r.TransactionID() != m.TransactionID() ||
			r.MgmtClass() != ClassPerfMgmt || r.AttributeID() != m.AttributeID()) {
			t.Fatalf("answer %x to %x", r[:HeaderSize], m[:HeaderSize])
		}
	})
}
