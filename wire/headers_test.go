package wire

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBTHBitPositions sets one field at a time to its maximum on a zero BTH
// and checks the exact bytes (out-of-range setter input is masked), then
// clears it on an all-ones BTH, so neighbouring bits are shown untouched.
func TestBTHBitPositions(t *testing.T) {
	tests := []struct {
		name string
		set  func(BTH)
		clr  func(BTH)
		want string // bytes after set on zeros
	}{
		{"opcode", func(b BTH) { b.SetOpcode(0xff) }, func(b BTH) { b.SetOpcode(0) }, "ff 00 0000 00 000000 00 000000"},
		{"SE", func(b BTH) { b.SetSE(true) }, func(b BTH) { b.SetSE(false) }, "00 80 0000 00 000000 00 000000"},
		{"M", func(b BTH) { b.SetMigReq(true) }, func(b BTH) { b.SetMigReq(false) }, "00 40 0000 00 000000 00 000000"},
		{"PadCnt", func(b BTH) { b.SetPadCnt(0xff) }, func(b BTH) { b.SetPadCnt(0) }, "00 30 0000 00 000000 00 000000"},
		{"TVer", func(b BTH) { b.SetTVer(0xff) }, func(b BTH) { b.SetTVer(0) }, "00 0f 0000 00 000000 00 000000"},
		{"PKey", func(b BTH) { b.SetPKey(0xffff) }, func(b BTH) { b.SetPKey(0) }, "00 00 ffff 00 000000 00 000000"},
		{"FECN", func(b BTH) { b.SetFECN(true) }, func(b BTH) { b.SetFECN(false) }, "00 00 0000 80 000000 00 000000"},
		{"BECN", func(b BTH) { b.SetBECN(true) }, func(b BTH) { b.SetBECN(false) }, "00 00 0000 40 000000 00 000000"},
		{"resv6", func(b BTH) { b.SetResv6(0xff) }, func(b BTH) { b.SetResv6(0) }, "00 00 0000 3f 000000 00 000000"},
		{"DestQP", func(b BTH) { b.SetDestQP(0xffffffff) }, func(b BTH) { b.SetDestQP(0) }, "00 00 0000 00 ffffff 00 000000"},
		{"AckReq", func(b BTH) { b.SetAckReq(true) }, func(b BTH) { b.SetAckReq(false) }, "00 00 0000 00 000000 80 000000"},
		{"resv7", func(b BTH) { b.SetResv7(0xff) }, func(b BTH) { b.SetResv7(0) }, "00 00 0000 00 000000 7f 000000"},
		{"PSN", func(b BTH) { b.SetPSN(0xffffffff) }, func(b BTH) { b.SetPSN(0) }, "00 00 0000 00 000000 00 ffffff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make(BTH, BTHSize)
			tt.set(b)
			want := unhex(t, tt.want)
			if !bytes.Equal(b, want) {
				t.Fatalf("set on zeros: got % x, want % x", []byte(b), want)
			}
			ones := BTH(bytes.Repeat([]byte{0xff}, BTHSize))
			tt.clr(ones)
			for i := range ones {
				if ones[i] != ^want[i] {
					t.Fatalf("clear on ones: byte %d = %#02x, want %#02x", i, ones[i], ^want[i])
				}
			}
		})
	}
}

// TestBTHGetters reads a known BTH (an rxe RC_SEND_ONLY from the captures'
// layout) field by field.
func TestBTHGetters(t *testing.T) {
	b := BTH(unhex(t, "04 f5 ffff c1 000011 81 abcdef"))
	got := b.Fields()
	want := BTHFields{Opcode: RCSendOnly, SE: true, MigReq: true, PadCnt: 3, TVer: 5, PKey: 0xffff,
		FECN: true, BECN: true, Resv6: 1, DestQP: 0x11, AckReq: true, Resv7: 1, PSN: 0xabcdef}
	if got != want {
		t.Fatalf("Fields() = %+v, want %+v", got, want)
	}
}

// TestHeaderRoundTrip encodes random fields into each header, decodes them
// back and compares (encode → decode → equal), and checks that Encode masks
// each narrow field to its width.
func TestHeaderRoundTrip(t *testing.T) {
	r := testenv.Rand(t)
	u8 := func() uint8 { return uint8(r.Uint32()) }
	u32 := func() uint32 { return r.Uint32() }
	u64 := func() uint64 { return r.Uint64() }
	bl := func() bool { return r.IntN(2) == 1 }
	for i := 0; i < 200; i++ {
		t.Run("BTH", func(t *testing.T) {
			f := BTHFields{Opcode: Opcode(u8()), SE: bl(), MigReq: bl(), PadCnt: u8(), TVer: u8(), PKey: uint16(u32()),
				FECN: bl(), BECN: bl(), Resv6: u8(), DestQP: u32(), AckReq: bl(), Resv7: u8(), PSN: u32()}
			b := make(BTH, BTHSize)
			b.Encode(&f)
			want := f
			want.PadCnt &= 3
			want.TVer &= 0xf
			want.Resv6 &= 0x3f
			want.Resv7 &= 0x7f
			want.DestQP &= mask24
			want.PSN &= mask24
			if got := b.Fields(); got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
		t.Run("RDETH", func(t *testing.T) {
			f := RDETHFields{Resv8: u8(), EEC: u32()}
			b := make(RDETH, RDETHSize)
			b.Encode(&f)
			f.EEC &= mask24
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("DETH", func(t *testing.T) {
			f := DETHFields{QKey: u32(), Resv8: u8(), SrcQP: u32()}
			b := make(DETH, DETHSize)
			b.Encode(&f)
			f.SrcQP &= mask24
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("XRCETH", func(t *testing.T) {
			f := XRCETHFields{Resv8: u8(), SRQ: u32()}
			b := make(XRCETH, XRCETHSize)
			b.Encode(&f)
			f.SRQ &= mask24
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("RETH", func(t *testing.T) {
			f := RETHFields{VA: u64(), RKey: u32(), DMALen: u32()}
			b := make(RETH, RETHSize)
			b.Encode(&f)
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("AETH", func(t *testing.T) {
			f := AETHFields{Syndrome: Syndrome(u8()), MSN: u32()}
			b := make(AETH, AETHSize)
			b.Encode(&f)
			f.MSN &= mask24
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("AtomicETH", func(t *testing.T) {
			f := AtomicETHFields{VA: u64(), RKey: u32(), SwapAdd: u64(), Compare: u64()}
			b := make(AtomicETH, AtomicETHSize)
			b.Encode(&f)
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("AtomicAckETH", func(t *testing.T) {
			f := AtomicAckETHFields{OrigData: u64()}
			b := make(AtomicAckETH, AtomicAckETHSize)
			b.Encode(&f)
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("ImmDt", func(t *testing.T) {
			f := ImmDtFields{Imm: u32()}
			b := make(ImmDt, ImmDtSize)
			b.Encode(&f)
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("IETH", func(t *testing.T) {
			f := IETHFields{RKey: u32()}
			b := make(IETH, IETHSize)
			b.Encode(&f)
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("FETH", func(t *testing.T) {
			f := FETHFields{Selectivity: u8(), Placement: u8(), Resv: u32()}
			b := make(FETH, FETHSize)
			b.Encode(&f)
			f.Selectivity &= 3
			f.Placement &= 0xf
			f.Resv &= 0x3ffffff
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
		t.Run("GRH", func(t *testing.T) {
			f := GRHFields{IPVer: u8(), TClass: u8(), FlowLabel: u32(), PayLen: uint16(u32()), NxtHdr: u8(), HopLmt: u8()}
			for j := range f.SGID {
				f.SGID[j], f.DGID[j] = u8(), u8()
			}
			b := make(GRH, GRHSize)
			b.Encode(&f)
			f.IPVer &= 0xf
			f.FlowLabel &= 0xfffff
			if got := b.Fields(); got != f {
				t.Fatalf("got %+v, want %+v", got, f)
			}
		})
	}
}

// TestExtHeaderLayout checks each extended header against a hand-written
// byte layout (IBTA vol. 1 §9.3).
func TestExtHeaderLayout(t *testing.T) {
	tests := []struct {
		name   string
		encode func([]byte)
		size   int
		want   string
	}{
		{"RDETH", func(b []byte) { RDETH(b).Encode(&RDETHFields{Resv8: 0xaa, EEC: 0x123456}) }, RDETHSize, "aa123456"},
		{"DETH", func(b []byte) { DETH(b).Encode(&DETHFields{QKey: 0x80010000, SrcQP: 0x000001}) }, DETHSize, "80010000 00 000001"},
		{"XRCETH", func(b []byte) { XRCETH(b).Encode(&XRCETHFields{SRQ: 0xabcdef}) }, XRCETHSize, "00abcdef"},
		{"RETH", func(b []byte) {
			RETH(b).Encode(&RETHFields{VA: 0x0102030405060708, RKey: 0x11223344, DMALen: 4096})
		}, RETHSize, "0102030405060708 11223344 00001000"},
		{"AETH", func(b []byte) { AETH(b).Encode(&AETHFields{Syndrome: SyndromeACKUnlimited, MSN: 0x000102}) }, AETHSize, "1f000102"},
		{"AtomicETH", func(b []byte) {
			AtomicETH(b).Encode(&AtomicETHFields{VA: 0x1000, RKey: 0xdeadbeef, SwapAdd: 1, Compare: 0x0a0b0c0d0e0f1011})
		}, AtomicETHSize, "0000000000001000 deadbeef 0000000000000001 0a0b0c0d0e0f1011"},
		{"AtomicAckETH", func(b []byte) { AtomicAckETH(b).Encode(&AtomicAckETHFields{OrigData: 0xfedcba9876543210}) }, AtomicAckETHSize, "fedcba9876543210"},
		{"ImmDt", func(b []byte) { ImmDt(b).Encode(&ImmDtFields{Imm: 0x01020304}) }, ImmDtSize, "01020304"},
		{"IETH", func(b []byte) { IETH(b).Encode(&IETHFields{RKey: 0x0a0b0c0d}) }, IETHSize, "0a0b0c0d"},
		{"FETH", func(b []byte) { FETH(b).Encode(&FETHFields{Selectivity: 1, Placement: 2}) }, FETHSize, "00000012"},
		{"GRH", func(b []byte) {
			GRH(b).Encode(&GRHFields{IPVer: 6, TClass: 0xab, FlowLabel: 0xcdef1, PayLen: 0x20, NxtHdr: GRHNextHeaderBTH, HopLmt: 64,
				SGID: [16]byte{0: 0xfe, 1: 0x80, 15: 1}, DGID: [16]byte{0: 0xfe, 1: 0x80, 15: 2}})
		}, GRHSize, "6abcdef1 0020 1b 40 fe800000000000000000000000000001 fe800000000000000000000000000002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, tt.size)
			tt.encode(b)
			if want := unhex(t, tt.want); !bytes.Equal(b, want) {
				t.Fatalf("got % x, want % x", b, want)
			}
		})
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s       Syndrome
		want    string
		kind    SyndromeKind
		credits uint32
		credOK  bool
	}{
		{0x1f, "ACK(credits=unlimited)", SyndromeACK, 0, false},
		{0x00, "ACK(credits=0)", SyndromeACK, 0, true},
		{0x05, "ACK(credits=6)", SyndromeACK, 6, true},
		{0x1e, "ACK(credits=32768)", SyndromeACK, 32768, true},
		{RNRNAKSyndrome(14), "RNR_NAK(timer=14)", SyndromeRNRNAK, 0, false},
		{0x60, "NAK_PSN_SEQ_ERROR", SyndromeNAK, 0, false},
		{0x61, "NAK_INVALID_REQ", SyndromeNAK, 0, false},
		{0x62, "NAK_REM_ACC_ERR", SyndromeNAK, 0, false},
		{0x63, "NAK_REM_OP_ERR", SyndromeNAK, 0, false},
		{0x64, "NAK_INV_RD_REQ", SyndromeNAK, 0, false},
		{0x65, "RSVD(0x65)", SyndromeNAK, 0, false},
		{0x45, "RSVD(0x45)", SyndromeRsvd, 0, false},
		{0xe0, "RSVD(0xe0)", 0xe0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.s.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := tt.s.Kind(); got != tt.kind {
				t.Errorf("Kind() = %#x, want %#x", got, tt.kind)
			}
			if c, ok := tt.s.Credits(); c != tt.credits || ok != tt.credOK {
				t.Errorf("Credits() = %d, %v, want %d, %v", c, ok, tt.credits, tt.credOK)
			}
		})
	}
	for k, want := range map[SyndromeKind]string{SyndromeACK: "ACK", SyndromeRNRNAK: "RNR_NAK", SyndromeNAK: "NAK", SyndromeRsvd: "RSVD(0x40)"} {
		if k.String() != want || k.IsValid() != (k != SyndromeRsvd) {
			t.Errorf("SyndromeKind %#x: %q valid=%v", uint8(k), k.String(), k.IsValid())
		}
	}
	if ACKSyndrome(31) != SyndromeACKUnlimited || !SyndromeNAKRemAccessErr.IsNAK() || !RNRNAKSyndrome(1).IsRNRNAK() || !ACKSyndrome(3).IsACK() {
		t.Error("syndrome constructors/predicates disagree")
	}
}

// TestUDPSport checks the kernel's port functions (rdma_calc_flow_label,
// rdma_flow_label_to_udp_sport, rdma_get_udp_sport) on values worked by
// hand from ib_verbs.h.
func TestUDPSport(t *testing.T) {
	for _, tt := range []struct {
		name       string
		fl, l, r   uint32
		wantFL     uint32
		wantPort   uint16
		initialQPN uint32
	}{
		{"17x18", 0, 17, 18, 0x132, 0xc132, 0},
		{"18x17", 0, 18, 17, 0x132, 0xc132, 0},
		{"17x17", 0, 17, 17, 0x121, 0xc121, 0},
		{"1x1", 0, 1, 1, 1, 0xc001, 0},
		{"dest QPN 0", 0, 17, 0, 0, 0xc000, 0},
		{"label 0x12345", 0x12345, 17, 18, 0x12345, 0xe341, 0},
		{"label 0xfffff", 0xfffff, 0, 0, 0xfffff, 0xffc0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fl := tt.fl
			if fl == 0 {
				fl = CalcFlowLabel(tt.l, tt.r)
				if fl != tt.wantFL {
					t.Fatalf("CalcFlowLabel(%d, %d) = %#x, want %#x", tt.l, tt.r, fl, tt.wantFL)
				}
			}
			if got := GetUDPSport(tt.fl, tt.l, tt.r); got != tt.wantPort {
				t.Fatalf("GetUDPSport(%#x, %d, %d) = %#x, want %#x", tt.fl, tt.l, tt.r, got, tt.wantPort)
			}
			if got := FlowLabelToUDPSport(fl); got != tt.wantPort {
				t.Fatalf("FlowLabelToUDPSport(%#x) = %#x, want %#x", fl, got, tt.wantPort)
			}
		})
	}
	for _, tt := range []struct {
		qpn  uint32
		want uint16
	}{{1, 0xd872}, {16, 0xc722}, {17, 0xdf94}, {18, 0xf806}, {0x1234, 0xfd8b}} {
		if got := RXEInitialUDPSport(tt.qpn); got != tt.want {
			t.Errorf("RXEInitialUDPSport(%d) = %#x, want %#x", tt.qpn, got, tt.want)
		}
	}
	// Every port is in the dynamic range.
	r := testenv.Rand(t)
	for i := 0; i < 10000; i++ {
		if p := GetUDPSport(r.Uint32()&0xfffff, r.Uint32()&mask24, r.Uint32()&mask24); p < UDPSportMin {
			t.Fatalf("port %#x below 0xc000", p)
		}
	}
}
