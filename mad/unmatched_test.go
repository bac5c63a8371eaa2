package mad

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestUnmatchedReply: what the kernel's MAD layer answers on QP1 when the
// CM is its only agent: a Get or Set nobody takes gets the same MAD back
// as a GetResp with status 0x000c; everything else gets nothing (dropped
// by validate_mad, or the CM's own).
func TestUnmatchedReply(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(MAD)
		reply bool
	}{
		{"CM REQ (the CM's)", func(MAD) {}, false},
		{"CM LAP (the CM's, which drops it)", func(m MAD) { m[17] = 0x19 }, false},
		{"CM Get REQ", func(m MAD) { m[3] = MethodGet }, false},
		{"CM GetResp REQ", func(m MAD) { m[3] = MethodGetResp }, false},
		{"CM Get ClassPortInfo", func(m MAD) { m[3], m[16], m[17] = MethodGet, 0, 1 }, true},
		{"CM Set ClassPortInfo", func(m MAD) { m[3], m[16], m[17] = MethodSet, 0, 1 }, true},
		{"CM Send ClassPortInfo (the CM's)", func(m MAD) { m[16], m[17] = 0, 1 }, false},
		{"CM version 1 Send", func(m MAD) { m[2] = 1 }, false},
		{"CM version 1 Get ClassPortInfo", func(m MAD) { m[2], m[3], m[16], m[17] = 1, MethodGet, 0, 1 }, true},
		{"base version 2 Get", func(m MAD) { m[0], m[1], m[3] = 2, 0x04, MethodGet }, false},
		{"SubnMgt LID routed Get", func(m MAD) { m[1], m[3] = 0x01, MethodGet }, false},
		{"SubnMgt directed route Get", func(m MAD) { m[1], m[3] = 0x81, MethodGet }, false},
		{"PerfMgt Get", func(m MAD) { m[1], m[2], m[3] = 0x04, 1, MethodGet }, true},
		{"SubnAdm Set", func(m MAD) { m[1], m[2], m[3] = 0x03, 2, MethodSet }, true},
		{"PerfMgt Send", func(m MAD) { m[1], m[2] = 0x04, 1 }, false},
		{"PerfMgt GetResp", func(m MAD) { m[1], m[2], m[3] = 0x04, 1, MethodGetResp }, false},
		{"PerfMgt Trap", func(m MAD) { m[1], m[2], m[3] = 0x04, 1, 0x05 }, false},
	} {
		m := NewCM(AttrREQ, 0x1122334455667788)
		for i := HeaderSize; i < Size; i++ {
			m[i] = byte(i)
		}
		binary.BigEndian.PutUint16(m[4:], 0x0700)
		c.spoil(m)
		r, ok := UnmatchedReply(m)
		if ok != c.reply {
			t.Errorf("%s: reply %v, want %v", c.name, ok, c.reply)
			continue
		}
		if !ok {
			continue
		}
		want := append(MAD(nil), m...)
		want[3] = MethodGetResp
		want[4], want[5] = 0, 0x0c
		if !bytes.Equal(r, want) {
			t.Errorf("%s: reply\n%x\nwant\n%x", c.name, r, want)
		}
		if r.Response() != true || r.Method() != MethodGet || r.Status() != StatusUnsupportedMethodAttr || r.TransactionID() != m.TransactionID() {
			t.Errorf("%s: reply header %+v", c.name, r.HeaderFields())
		}
	}
	if _, ok := UnmatchedReply(make([]byte, Size-1)); ok {
		t.Error("a truncated MAD is answered")
	}
}
