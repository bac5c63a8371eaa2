package mad

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func pd(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

// TestRoundTrip encodes each message from fields with every field at a
// nonzero value (sub-byte fields at their maximum) and decodes it back.
func TestRoundTrip(t *testing.T) {
	gidA := [16]byte{0: 0xfe, 1: 0x80, 15: 1}
	gidB := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}
	cases := []struct {
		name   string
		attr   AttrID
		encode func(MAD)
		decode func(MAD) any
		want   any
	}{
		{"REQ", AttrREQ, func(m MAD) {
			REQ(m).Encode(&REQFields{LocalCommID: 0x01020304, ServiceID: ServiceID(PortSpaceTCP, 7174), LocalCAGUID: 0x1122334455667788,
				LocalQKey: 0x80010000, LocalQPN: 0xffffff, ResponderResources: 0xff, InitiatorDepth: 0xfe,
				RemoteCMResponseTimeout: 31, TransportServiceType: 3, EndToEndFlowControl: true, StartingPSN: 0xabcdef,
				LocalCMResponseTimeout: 31, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 15, RNRRetryCount: 7,
				MaxCMRetries: 15, SRQ: true, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xfffe, PrimaryLocalGID: gidA,
				PrimaryRemoteGID: gidB, PrimaryFlowLabel: 0xfffff, PrimaryPacketRate: 63, PrimaryTrafficClass: 0xff,
				PrimaryHopLimit: 0xff, PrimarySL: 15, PrimarySubnetLocal: true, PrimaryLocalACKTimeout: 31,
				PrivateData: pd(REQPrivateDataSize, 1)})
		}, func(m MAD) any { return REQ(m).Fields() }, REQFields{LocalCommID: 0x01020304, ServiceID: 0x0000000001061c06, LocalCAGUID: 0x1122334455667788,
			LocalQKey: 0x80010000, LocalQPN: 0xffffff, ResponderResources: 0xff, InitiatorDepth: 0xfe,
			RemoteCMResponseTimeout: 31, TransportServiceType: 3, EndToEndFlowControl: true, StartingPSN: 0xabcdef,
			LocalCMResponseTimeout: 31, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 15, RNRRetryCount: 7,
			MaxCMRetries: 15, SRQ: true, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xfffe, PrimaryLocalGID: gidA,
			PrimaryRemoteGID: gidB, PrimaryFlowLabel: 0xfffff, PrimaryPacketRate: 63, PrimaryTrafficClass: 0xff,
			PrimaryHopLimit: 0xff, PrimarySL: 15, PrimarySubnetLocal: true, PrimaryLocalACKTimeout: 31,
			PrivateData: pd(REQPrivateDataSize, 1)}},
		{"MRA", AttrMRA, func(m MAD) {
			MRA(m).Encode(&MRAFields{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: MsgOther, ServiceTimeout: 31, PrivateData: pd(MRAPrivateDataSize, 2)})
		}, func(m MAD) any { return MRA(m).Fields() }, MRAFields{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: MsgOther, ServiceTimeout: 31, PrivateData: pd(MRAPrivateDataSize, 2)}},
		{"REJ", AttrREJ, func(m MAD) {
			REJ(m).Encode(&REJFields{LocalCommID: 3, RemoteCommID: 4, MessageREJected: MsgREP, RejectInfoLength: 127,
				Reason: RejConsumerDefined, ARI: pd(REJARISize, 3), PrivateData: pd(REJPrivateDataSize, 4)})
		}, func(m MAD) any { return REJ(m).Fields() }, REJFields{LocalCommID: 3, RemoteCommID: 4, MessageREJected: MsgREP,
			RejectInfoLength: 127, Reason: RejConsumerDefined, ARI: pd(REJARISize, 3), PrivateData: pd(REJPrivateDataSize, 4)}},
		{"REP", AttrREP, func(m MAD) {
			REP(m).Encode(&REPFields{LocalCommID: 5, RemoteCommID: 6, LocalQKey: 7, LocalQPN: 0xfffffe, StartingPSN: 0xffffff,
				ResponderResources: 16, InitiatorDepth: 15, TargetACKDelay: 31, FailoverAccepted: 3, EndToEndFlowControl: true,
				RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x8877665544332211, PrivateData: pd(REPPrivateDataSize, 5)})
		}, func(m MAD) any { return REP(m).Fields() }, REPFields{LocalCommID: 5, RemoteCommID: 6, LocalQKey: 7, LocalQPN: 0xfffffe,
			StartingPSN: 0xffffff, ResponderResources: 16, InitiatorDepth: 15, TargetACKDelay: 31, FailoverAccepted: 3,
			EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x8877665544332211, PrivateData: pd(REPPrivateDataSize, 5)}},
		{"RTU", AttrRTU, func(m MAD) {
			RTU(m).Encode(&CommIDs{LocalCommID: 8, RemoteCommID: 9, PrivateData: pd(RTUPrivateDataSize, 6)})
		},
			func(m MAD) any { return RTU(m).Fields() }, CommIDs{LocalCommID: 8, RemoteCommID: 9, PrivateData: pd(RTUPrivateDataSize, 6)}},
		{"DREQ", AttrDREQ, func(m MAD) {
			DREQ(m).Encode(&DREQFields{LocalCommID: 10, RemoteCommID: 11, RemoteQPN: 0xffffff, PrivateData: pd(DREQPrivateDataSize, 7)})
		}, func(m MAD) any { return DREQ(m).Fields() }, DREQFields{LocalCommID: 10, RemoteCommID: 11, RemoteQPN: 0xffffff, PrivateData: pd(DREQPrivateDataSize, 7)}},
		{"DREP", AttrDREP, func(m MAD) {
			DREP(m).Encode(&CommIDs{LocalCommID: 12, RemoteCommID: 13, PrivateData: pd(DREPPrivateDataSize, 8)})
		},
			func(m MAD) any { return DREP(m).Fields() }, CommIDs{LocalCommID: 12, RemoteCommID: 13, PrivateData: pd(DREPPrivateDataSize, 8)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewCM(c.attr, 0xdeadbeefcafe)
			c.encode(m)
			p, err := ParseCM(append([]byte(m), 0, 0, 0)) // a larger receive buffer
			if err != nil {
				t.Fatal(err)
			}
			if len(p) != Size {
				t.Fatalf("view of %d bytes", len(p))
			}
			if got := c.decode(p); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if p.TransactionID() != 0xdeadbeefcafe || p.AttributeID() != c.attr {
				t.Errorf("header %+v", p.HeaderFields())
			}
			// Encoding the decoded fields gives the same bytes.
			again := NewCM(c.attr, 0xdeadbeefcafe)
			c.encode(again)
			if !bytes.Equal(again, m) {
				t.Error("second encode differs")
			}
		})
	}
}

// TestREQBitLayout pins single sub-byte fields to their IBA bit
// positions, so two fields swapped in both Encode and Fields still fail.
func TestREQBitLayout(t *testing.T) {
	cases := []struct {
		name string
		f    REQFields
		off  int
		want []byte
	}{
		{"local QPN, responder resources", REQFields{LocalQPN: 0x123456, ResponderResources: 0x78}, 56, []byte{0x12, 0x34, 0x56, 0x78}},
		{"initiator depth", REQFields{InitiatorDepth: 9}, 60, []byte{0, 0, 0, 9}},
		{"remote CM response timeout", REQFields{RemoteCMResponseTimeout: 20}, 67, []byte{0xa0}},
		{"transport UC", REQFields{TransportServiceType: TransportUC}, 67, []byte{0x02}},
		{"flow control", REQFields{EndToEndFlowControl: true}, 67, []byte{0x01}},
		{"PSN, local CM timeout, retry", REQFields{StartingPSN: 0x96d201, LocalCMResponseTimeout: 20, RetryCount: 7}, 68, []byte{0x96, 0xd2, 0x01, 0xa7}},
		{"MTU, RNR retry", REQFields{PathMTU: 5, RNRRetryCount: 7}, 74, []byte{0x57}},
		{"max CM retries, SRQ", REQFields{MaxCMRetries: 15, SRQ: true}, 75, []byte{0xf8}},
		{"flow label, rate", REQFields{PrimaryFlowLabel: 0x29, PrimaryPacketRate: 2}, 112, []byte{0x00, 0x02, 0x90, 0x02}},
		{"SL, subnet local, ACK timeout", REQFields{PrimarySL: 3, PrimarySubnetLocal: true, PrimaryLocalACKTimeout: 19}, 118, []byte{0x38, 0x98}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewCM(AttrREQ, 1)
			REQ(m).Encode(&c.f)
			if got := m[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
				t.Errorf("bytes at %d: % x, want % x", c.off, got, c.want)
			}
		})
	}
}

// TestParseCM mutates one header field of a valid REQ at a time.
func TestParseCM(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(b []byte) []byte
		wantErr bool
		trunc   bool
	}{
		{"valid", func(b []byte) []byte { return b }, false, false},
		{"short", func(b []byte) []byte { return b[:Size-1] }, true, true},
		{"empty", func(b []byte) []byte { return nil }, true, true},
		{"base version 2", func(b []byte) []byte { b[0] = 2; return b }, true, false},
		{"class SA", func(b []byte) []byte { b[1] = 0x03; return b }, true, false},
		{"class version 1", func(b []byte) []byte { b[2] = 1; return b }, true, false},
		{"method Get", func(b []byte) []byte { b[3] = 0x01; return b }, true, false},
		{"response bit", func(b []byte) []byte { b[3] |= 0x80; return b }, true, false},
		{"ClassPortInfo", func(b []byte) []byte { b[17] = 0x01; return b }, true, false},
		{"LAP", func(b []byte) []byte { b[17] = 0x19; return b }, true, false},
		{"status ignored", func(b []byte) []byte { b[4] = 0xff; return b }, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mutate(append([]byte(nil), NewCM(AttrREQ, 7)...))
			_, err := ParseCM(b)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v, want error %v", err, c.wantErr)
			}
			if errors.Is(err, ErrTruncated) != c.trunc {
				t.Errorf("errors.Is(%v, ErrTruncated) != %v", err, c.trunc)
			}
		})
	}
}

func TestCMAHeader(t *testing.T) {
	cases := []struct {
		name string
		f    CMAHeaderFields
		ipv  uint8
		raw  []byte // first 20 bytes
	}{
		{"IPv4", CMAHeaderFields{SrcPort: 0x831e, Src: netip.MustParseAddr("10.77.0.12"), Dst: netip.MustParseAddr("10.77.0.11")}, 4,
			[]byte{0, 0x40, 0x83, 0x1e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 12}},
		{"IPv6", CMAHeaderFields{SrcPort: 1, Src: netip.MustParseAddr("fd77::2"), Dst: netip.MustParseAddr("fd77::11")}, 6,
			[]byte{0, 0x60, 0, 1, 0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, CMAHeaderSize)
			CMAHeader(b).Encode(&c.f)
			if !bytes.Equal(b[:20], c.raw) {
				t.Errorf("% x, want % x", b[:20], c.raw)
			}
			h, err := ParseCMAHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.Fields() != c.f || h.IPVersion() != c.ipv {
				t.Errorf("%+v v%d, want %+v", h.Fields(), h.IPVersion(), c.f)
			}
		})
	}
	for _, bad := range []struct {
		name string
		b    []byte
	}{{"short", make([]byte, CMAHeaderSize-1)}, {"version 1", append([]byte{1, 0x40}, make([]byte, 34)...)}, {"IP version 5", append([]byte{0, 0x50}, make([]byte, 34)...)}} {
		if _, err := ParseCMAHeader(bad.b); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
}

func TestServiceID(t *testing.T) {
	cases := []struct {
		ps, port uint16
		sid      uint64
	}{{PortSpaceTCP, 18600, 0x00000000010648a8}, {PortSpaceTCP, 7174, 0x0000000001061c06}, {0x0111, 5, 0x0000000001110005}}
	for _, c := range cases {
		if got := ServiceID(c.ps, c.port); got != c.sid {
			t.Errorf("ServiceID(%#x, %d) = %#x, want %#x", c.ps, c.port, got, c.sid)
		}
		ps, port, ok := ServicePort(c.sid)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("ServicePort(%#x) = %#x %d %v", c.sid, ps, port, ok)
		}
	}
	if _, _, ok := ServicePort(0x1000000000000001); ok {
		t.Error("ServicePort accepted a non-IP service ID")
	}
}

func TestAttrIDString(t *testing.T) {
	for a, want := range map[AttrID]string{AttrREQ: "ConnectRequest", AttrDREP: "DisconnectReply", 0x99: "AttrID(0x0099)"} {
		if a.String() != want || a.IsValid() != (want[0] != 'A') {
			t.Errorf("%d: %q valid %v", uint16(a), a.String(), a.IsValid())
		}
	}
}
