package mad

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// udaddySIDRREQ builds, byte by byte at the MAD offsets of IBA Table 118,
// the SIDR_REQ the kernel's rdma_cm sent for udaddy (client 10.77.0.12
// to a server on 10.77.0.11, port 7174, rdma_cm source port 0xdd52).
func udaddySIDRREQ() []byte {
	b := make([]byte, Size)
	copy(b, []byte{1, 0x07, 2, 0x03})
	binary.BigEndian.PutUint64(b[8:], 0x00000002_a1b2c3d4)
	binary.BigEndian.PutUint16(b[16:], 0x0017)
	binary.BigEndian.PutUint32(b[24:], 0xd4c3b2a1)         // request ID
	binary.BigEndian.PutUint16(b[28:], 0xffff)             // P_Key
	binary.BigEndian.PutUint64(b[32:], 0x0000000001111c06) // RDMA_PS_UDP, 7174
	copy(b[40:], []byte{0x00, 0x40, 0xdd, 0x52})           // cma_hdr: version 0, IPv4, port
	copy(b[40+4+12:], []byte{10, 77, 0, 12})               // source
	copy(b[40+20+12:], []byte{10, 77, 0, 11})              // destination
	return b
}

// udaddySIDRREP is the server's answer: status 0, the request ID and
// service ID echoed, QPN 0x11 and Q_Key 0x01234567.
func udaddySIDRREP() []byte {
	b := make([]byte, Size)
	copy(b, []byte{1, 0x07, 2, 0x03})
	binary.BigEndian.PutUint64(b[8:], 0x00000002_a1b2c3d4)
	binary.BigEndian.PutUint16(b[16:], 0x0018)
	binary.BigEndian.PutUint32(b[24:], 0xd4c3b2a1)
	copy(b[32:], []byte{0x00, 0x00, 0x11, 0x00})
	binary.BigEndian.PutUint64(b[36:], 0x0000000001111c06)
	binary.BigEndian.PutUint32(b[44:], 0x01234567)
	return b
}

// TestSIDRLayout decodes the SIDR exchange of udaddy at the IBA offsets
// and encodes it back to the same bytes.
func TestSIDRLayout(t *testing.T) {
	m, err := ParseCM(udaddySIDRREQ())
	if err != nil {
		t.Fatal(err)
	}
	req := SIDRREQ(m).Fields()
	want := SIDRREQFields{RequestID: 0xd4c3b2a1, PartitionKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 7174), PrivateData: req.PrivateData}
	if !reflect.DeepEqual(req, want) || len(req.PrivateData) != SIDRREQPrivateDataSize {
		t.Errorf("SIDR_REQ %+v", req)
	}
	h, err := ParseCMAHeader(req.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	if f := h.Fields(); f.SrcPort != 0xdd52 || f.Src != netip.MustParseAddr("10.77.0.12") || f.Dst != netip.MustParseAddr("10.77.0.11") {
		t.Errorf("cma header %+v", f)
	}
	if ps, port, ok := ServicePort(req.ServiceID); !ok || ps != PortSpaceUDP || port != 7174 {
		t.Errorf("ServicePort(%#x) = %#x %d %v", req.ServiceID, ps, port, ok)
	}
	n := NewCM(AttrSIDRREQ, m.TransactionID())
	SIDRREQ(n).Encode(&req)
	if !bytes.Equal(n, m) {
		t.Errorf("SIDR_REQ re-encoded:\n%x\nwant\n%x", []byte(n), []byte(m))
	}

	m, err = ParseCM(udaddySIDRREP())
	if err != nil {
		t.Fatal(err)
	}
	rep := SIDRREP(m).Fields()
	wantRep := SIDRREPFields{RequestID: 0xd4c3b2a1, Status: SIDRSuccess, QPN: 0x11, ServiceID: 0x0000000001111c06,
		QKey: RDMAUDPQKey, Info: rep.Info, PrivateData: rep.PrivateData}
	if !reflect.DeepEqual(rep, wantRep) || len(rep.Info) != SIDRREPInfoSize || len(rep.PrivateData) != SIDRREPPrivateDataSize {
		t.Errorf("SIDR_REP %+v", rep)
	}
	n = NewCM(AttrSIDRREP, m.TransactionID())
	SIDRREP(n).Encode(&rep)
	if !bytes.Equal(n, m) {
		t.Errorf("SIDR_REP re-encoded:\n%x\nwant\n%x", []byte(n), []byte(m))
	}
}

// TestSIDRRoundTrip encodes every SIDR field at a nonzero value and
// decodes it back.
func TestSIDRRoundTrip(t *testing.T) {
	m := NewCM(AttrSIDRREQ, 9)
	f := SIDRREQFields{RequestID: 0xfedcba98, PartitionKey: 0x8001, ServiceID: 0x1122334455667788, PrivateData: pd(SIDRREQPrivateDataSize, 7)}
	SIDRREQ(m).Encode(&f)
	if g := SIDRREQ(m).Fields(); !reflect.DeepEqual(g, f) {
		t.Errorf("SIDR_REQ %+v, want %+v", g, f)
	}
	m = NewCM(AttrSIDRREP, 9)
	r := SIDRREPFields{RequestID: 1, Status: SIDRUnsupportedVersion, InfoLength: 72, QPN: 0xffffff, ServiceID: 2, QKey: 0xffffffff,
		Info: pd(SIDRREPInfoSize, 3), PrivateData: pd(SIDRREPPrivateDataSize, 4)}
	SIDRREP(m).Encode(&r)
	if g := SIDRREP(m).Fields(); !reflect.DeepEqual(g, r) {
		t.Errorf("SIDR_REP %+v, want %+v", g, r)
	}
	if s := SIDRUnsupported.String(); s != "UNSUPPORTED" {
		t.Errorf("status 1 is %q", s)
	}
	if s := SIDRStatus(9).String(); s != "SIDRStatus(9)" {
		t.Errorf("status 9 is %q", s)
	}
}

// TestServiceIDPortSpaces: the service IDs of each port space as
// cma_get_service_id forms them, and ServicePort refusing what no port
// space holds.
func TestServiceIDPortSpaces(t *testing.T) {
	for _, c := range []struct {
		ps   uint16
		port uint16
		sid  uint64
	}{
		{PortSpaceTCP, 7174, 0x0000000001061c06},
		{PortSpaceUDP, 7174, 0x0000000001111c06},
		{PortSpaceIB, 1, 0x00000000013f0001},
		{PortSpaceIPoIB, 7174, 0x0000000000021c06},
	} {
		if got := ServiceID(c.ps, c.port); got != c.sid {
			t.Errorf("ServiceID(%#x, %d) = %#x, want %#x", c.ps, c.port, got, c.sid)
		}
		if ps, port, ok := ServicePort(c.sid); !ok || ps != c.ps || port != c.port {
			t.Errorf("ServicePort(%#x) = %#x %d %v", c.sid, ps, port, ok)
		}
	}
	for _, sid := range []uint64{0, 0x0000000001070000, 0x0000000101061c06, 0x1000000001061c06, 0x0000000000031c06} {
		if _, _, ok := ServicePort(sid); ok {
			t.Errorf("ServicePort(%#x) ok", sid)
		}
	}
}

// TestPrivateDataLimits: the sizes the kernel's cm refuses with EINVAL,
// and what a consumer keeps after rdma_cm's header.
func TestPrivateDataLimits(t *testing.T) {
	for _, c := range []struct {
		a      AttrID
		ip     bool
		max    int
		region int
	}{
		{AttrREQ, true, 56, 92}, {AttrREQ, false, 92, 92}, {AttrSIDRREQ, true, 180, 216}, {AttrSIDRREQ, false, 216, 216},
		{AttrREP, true, 196, 196}, {AttrREJ, true, 148, 148}, {AttrRTU, false, 224, 224}, {AttrDREQ, false, 220, 220},
		{AttrDREP, false, 224, 224}, {AttrMRA, false, 222, 222}, {AttrSIDRREP, true, 136, 136}, {AttrLAP, false, 0, 0},
	} {
		if got := MaxUserPrivateData(c.a, c.ip); got != c.max {
			t.Errorf("MaxUserPrivateData(%v, %v) = %d, want %d", c.a, c.ip, got, c.max)
		}
		if got := PrivateDataSize(c.a); got != c.region {
			t.Errorf("PrivateDataSize(%v) = %d, want %d", c.a, got, c.region)
		}
		if err := CheckPrivateData(c.a, c.max, c.ip); err != nil {
			t.Errorf("%v: %d bytes: %v", c.a, c.max, err)
		}
		if err := CheckPrivateData(c.a, c.max+1, c.ip); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%v: %d bytes: %v, want EINVAL", c.a, c.max+1, err)
		}
	}
	if err := CheckPrivateData(AttrREP, -1, false); !errors.Is(err, unix.EINVAL) {
		t.Errorf("negative length: %v", err)
	}
	ok := REJFields{Reason: RejTimeout, RejectInfoLength: 8, ARI: make([]byte, 8), PrivateData: make([]byte, REJPrivateDataSize)}
	if err := ok.Check(); err != nil {
		t.Errorf("REJ with an 8-byte ARI: %v", err)
	}
	for name, f := range map[string]REJFields{
		"ARI of 73":        {ARI: make([]byte, 73)},
		"length mismatch":  {RejectInfoLength: 16, ARI: make([]byte, 8)},
		"private data 149": {PrivateData: make([]byte, 149)},
	} {
		if err := f.Check(); !errors.Is(err, unix.EINVAL) {
			t.Errorf("REJ %s: %v, want EINVAL", name, err)
		}
	}
	m := NewCM(AttrREJ, 1)
	REJ(m).Encode(&ok)
	if len(REJ(m).ARI()) != 8 {
		t.Errorf("ARI() is %d bytes, want 8", len(REJ(m).ARI()))
	}
	if err := (&SIDRREPFields{Info: make([]byte, 73)}).Check(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("SIDR_REP info of 73: %v", err)
	}
	if err := (&SIDRREPFields{PrivateData: make([]byte, 137)}).Check(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("SIDR_REP private data of 137: %v", err)
	}
	if err := (&SIDRREPFields{Info: make([]byte, 72), PrivateData: make([]byte, 136)}).Check(); err != nil {
		t.Errorf("SIDR_REP at the limits: %v", err)
	}
}
