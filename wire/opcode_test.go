package wire

import "testing"

// TestOpcodeTable checks the table against rxe's rxe_opcode[] (lengths and
// header sets, rxe_opcode.c) and ib_pack.h names.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		op      Opcode
		name    string
		hdrLen  int
		headers Headers
		flags   OpFlags
	}
	const (
		req = FlagRequest
		ack = FlagResponse
		pay = FlagPayload
		fst = FlagFirst
		lst = FlagLast
	)
	rows := []row{
		{0x00, "RC_SEND_FIRST", 12, 0, req | pay | FlagSend | fst | FlagRWR},
		{0x01, "RC_SEND_MIDDLE", 12, 0, req | pay | FlagSend},
		{0x02, "RC_SEND_LAST", 12, 0, req | pay | FlagSend | lst | FlagComp},
		{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", 16, HdrImmDt, req | pay | FlagSend | lst | FlagComp},
		{0x04, "RC_SEND_ONLY", 12, 0, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
		{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, HdrImmDt, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
		{0x06, "RC_RDMA_WRITE_FIRST", 28, HdrRETH, req | pay | FlagWrite | fst},
		{0x07, "RC_RDMA_WRITE_MIDDLE", 12, 0, req | pay | FlagWrite},
		{0x08, "RC_RDMA_WRITE_LAST", 12, 0, req | pay | FlagWrite | lst},
		{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, HdrImmDt, req | pay | FlagWrite | lst | FlagRWR | FlagComp},
		{0x0a, "RC_RDMA_WRITE_ONLY", 28, HdrRETH, req | pay | FlagWrite | fst | lst},
		{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, HdrRETH | HdrImmDt, req | pay | FlagWrite | fst | lst | FlagRWR | FlagComp},
		{0x0c, "RC_RDMA_READ_REQUEST", 28, HdrRETH, req | FlagRead | fst | lst},
		{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", 16, HdrAETH, ack | pay | fst},
		{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, 0, ack | pay},
		{0x0f, "RC_RDMA_READ_RESPONSE_LAST", 16, HdrAETH, ack | pay | lst},
		{0x10, "RC_RDMA_READ_RESPONSE_ONLY", 16, HdrAETH, ack | pay | fst | lst},
		{0x11, "RC_ACKNOWLEDGE", 16, HdrAETH, ack | fst | lst},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", 24, HdrAETH | HdrAtomicAckETH, ack | fst | lst},
		{0x13, "RC_COMPARE_SWAP", 40, HdrAtomicETH, req | FlagAtomic | fst | lst},
		{0x14, "RC_FETCH_ADD", 40, HdrAtomicETH, req | FlagAtomic | fst | lst},
		{0x16, "RC_SEND_LAST_WITH_INVALIDATE", 16, HdrIETH, req | pay | FlagSend | lst | FlagComp},
		{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", 16, HdrIETH, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
		{0x1c, "RC_FLUSH", 32, HdrFETH | HdrRETH, req | FlagFlush | fst | lst},
		{0x1d, "RC_ATOMIC_WRITE", 28, HdrRETH, req | pay | FlagAtomicWrite | fst | lst},
		{0x20, "UC_SEND_FIRST", 12, 0, req | pay | FlagSend | fst | FlagRWR},
		{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, HdrRETH | HdrImmDt, req | pay | FlagWrite | fst | lst | FlagRWR | FlagComp},
		{0x40, "RD_SEND_FIRST", 24, HdrRDETH | HdrDETH, req | pay | FlagSend | fst | FlagRWR},
		{0x46, "RD_RDMA_WRITE_FIRST", 40, HdrRDETH | HdrDETH | HdrRETH, req | pay | FlagWrite | fst},
		{0x4c, "RD_RDMA_READ_REQUEST", 40, HdrRDETH | HdrDETH | HdrRETH, req | FlagRead | fst | lst},
		{0x4d, "RD_RDMA_READ_RESPONSE_FIRST", 20, HdrRDETH | HdrAETH, ack | pay | fst},
		{0x51, "RD_ACKNOWLEDGE", 20, HdrRDETH | HdrAETH, ack | fst | lst},
		{0x52, "RD_ATOMIC_ACKNOWLEDGE", 28, HdrRDETH | HdrAETH | HdrAtomicAckETH, ack | fst | lst},
		{0x53, "RD_COMPARE_SWAP", 52, HdrRDETH | HdrDETH | HdrAtomicETH, req | FlagAtomic | fst | lst},
		{0x55, "RD_RESYNC", 24, HdrRDETH | HdrDETH, req | fst | lst},
		{0x5c, "RD_FLUSH", 44, HdrRDETH | HdrDETH | HdrFETH | HdrRETH, req | FlagFlush | fst | lst},
		{0x64, "UD_SEND_ONLY", 20, HdrDETH, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, HdrDETH | HdrImmDt, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
		{0x81, "CNP", 28, HdrCNPReserved, fst | lst},
		{0xa0, "XRC_SEND_FIRST", 16, HdrXRCETH, req | pay | FlagSend | fst | FlagRWR},
		{0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 36, HdrXRCETH | HdrRETH | HdrImmDt, req | pay | FlagWrite | fst | lst | FlagRWR | FlagComp},
		{0xad, "XRC_RDMA_READ_RESPONSE_FIRST", 16, HdrAETH, ack | pay | fst},
		{0xb1, "XRC_ACKNOWLEDGE", 16, HdrAETH, ack | fst | lst},
		{0xb2, "XRC_ATOMIC_ACKNOWLEDGE", 24, HdrAETH | HdrAtomicAckETH, ack | fst | lst},
		{0xb3, "XRC_COMPARE_SWAP", 44, HdrXRCETH | HdrAtomicETH, req | FlagAtomic | fst | lst},
		{0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", 20, HdrXRCETH | HdrIETH, req | pay | FlagSend | lst | FlagComp},
		{0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", 20, HdrXRCETH | HdrIETH, req | pay | FlagSend | fst | lst | FlagRWR | FlagComp},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if !r.op.IsValid() {
				t.Fatalf("%#02x not valid", uint8(r.op))
			}
			if got := r.op.String(); got != r.name {
				t.Errorf("String() = %q", got)
			}
			if got := r.op.HeaderLen(); got != r.hdrLen {
				t.Errorf("HeaderLen() = %d, want %d", got, r.hdrLen)
			}
			if got := r.op.Headers(); got != r.headers {
				t.Errorf("Headers() = %v, want %v", got, r.headers)
			}
			if got := BTHSize + r.op.Headers().Size(); got != r.hdrLen {
				t.Errorf("BTH + Headers().Size() = %d, want %d", got, r.hdrLen)
			}
			if got := r.op.Flags(); got != r.flags {
				t.Errorf("Flags() = %#x, want %#x", got, r.flags)
			}
			if r.op.HasPayload() != (r.flags&pay != 0) || r.op.IsRequest() != (r.flags&req != 0) ||
				r.op.IsResponse() != (r.flags&ack != 0) || r.op.IsFirst() != (r.flags&fst != 0) ||
				r.op.IsLast() != (r.flags&lst != 0) || r.op.IsMiddle() != (r.flags&(fst|lst) == 0) ||
				r.op.IsOnly() != (r.flags&(fst|lst) == fst|lst) {
				t.Errorf("predicates disagree with flags %#x", r.flags)
			}
		})
	}
}

// TestOpcodeValidSet checks exactly which opcodes are known: RC 0x00-0x14,
// 0x16, 0x17, 0x1c, 0x1d; UC 0x20-0x2b; RD 0x40-0x55, 0x5c; UD 0x64, 0x65;
// CNP 0x81; XRC 0xa0-0xb4, 0xb6, 0xb7. Everything else is unknown and
// String shows its value.
func TestOpcodeValidSet(t *testing.T) {
	in := func(op, lo, hi int) bool { return op >= lo && op <= hi }
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		want := in(i, 0x00, 0x14) || i == 0x16 || i == 0x17 || i == 0x1c || i == 0x1d ||
			in(i, 0x20, 0x2b) || in(i, 0x40, 0x55) || i == 0x5c || i == 0x64 || i == 0x65 || i == 0x81 ||
			in(i, 0xa0, 0xb4) || i == 0xb6 || i == 0xb7
		if op.IsValid() != want {
			t.Errorf("%#02x: IsValid() = %v, want %v", i, op.IsValid(), want)
		}
		if !want {
			if s := op.String(); s != "Opcode(0x"+hex2(i)+")" {
				t.Errorf("%#02x: String() = %q", i, s)
			}
			if op.HeaderLen() != 0 || op.Flags() != 0 || op.IsMiddle() {
				t.Errorf("%#02x: unknown opcode has table data", i)
			}
		}
	}
}

func hex2(i int) string {
	const d = "0123456789abcdef"
	if i < 16 {
		return string(d[i])
	}
	return string([]byte{d[i>>4], d[i&15]})
}

// TestHeaderOffsets checks header order inside packets (IBTA Table 38):
// FLUSH is BTH FETH RETH, WRITE_ONLY_WITH_IMMEDIATE BTH RETH ImmDt,
// ATOMIC_ACKNOWLEDGE BTH AETH AtomicAckETH, RD requests BTH RDETH DETH ...
func TestHeaderOffsets(t *testing.T) {
	tests := []struct {
		op   Opcode
		h    Headers
		want int
	}{
		{RCFlush, HdrFETH, 12},
		{RCFlush, HdrRETH, 16},
		{RCRDMAWriteOnlyWithImmediate, HdrRETH, 12},
		{RCRDMAWriteOnlyWithImmediate, HdrImmDt, 28},
		{RCAtomicAcknowledge, HdrAETH, 12},
		{RCAtomicAcknowledge, HdrAtomicAckETH, 16},
		{UDSendOnlyWithImmediate, HdrDETH, 12},
		{UDSendOnlyWithImmediate, HdrImmDt, 20},
		{Opcode(TransportRD) | RCRDMAWriteOnlyWithImmediate, HdrRDETH, 12},
		{Opcode(TransportRD) | RCRDMAWriteOnlyWithImmediate, HdrDETH, 16},
		{Opcode(TransportRD) | RCRDMAWriteOnlyWithImmediate, HdrRETH, 24},
		{Opcode(TransportRD) | RCRDMAWriteOnlyWithImmediate, HdrImmDt, 40},
		{Opcode(TransportXRC) | RCCompareSwap, HdrXRCETH, 12},
		{Opcode(TransportXRC) | RCCompareSwap, HdrAtomicETH, 16},
		{CNP, HdrCNPReserved, 12},
	}
	for _, tt := range tests {
		t.Run(tt.op.String()+"/"+tt.h.String(), func(t *testing.T) {
			got, ok := tt.op.HeaderOffset(tt.h)
			if !ok || got != tt.want {
				t.Fatalf("HeaderOffset = %d, %v, want %d", got, ok, tt.want)
			}
		})
	}
	if _, ok := RCSendOnly.HeaderOffset(HdrRETH); ok {
		t.Error("SEND_ONLY has no RETH")
	}
	if _, ok := RCFlush.HeaderOffset(HdrFETH | HdrRETH); ok {
		t.Error("HeaderOffset accepted two headers at once")
	}
	if s := (HdrFETH | HdrRETH | 1<<15).String(); s != "FETH|RETH|0x8000" {
		t.Errorf("Headers.String() = %q", s)
	}
	if s := Headers(0).String(); s != "none" {
		t.Errorf("Headers(0).String() = %q", s)
	}
	for _, tr := range []struct {
		t    Transport
		want string
	}{{TransportRC, "RC"}, {TransportUD, "UD"}, {TransportXRC, "XRC"}, {TransportCNP, "CNP"}, {0xc0, "Transport(0xc0)"}} {
		if got := tr.t.String(); got != tr.want {
			t.Errorf("Transport %#x String() = %q, want %q", uint8(tr.t), got, tr.want)
		}
	}
	if !TransportXRC.IsValid() || Transport(0xc0).IsValid() {
		t.Error("Transport.IsValid wrong")
	}
	if s := RCSendFirst.Flags().String(); s != "REQ|PAYLOAD|START|SEND|RWR" {
		t.Errorf("RC_SEND_FIRST flags %q", s)
	}
	if s := (FlagComp | 1<<15).String(); s != "COMP|0x8000" {
		t.Errorf("flags %q", s)
	}
	if s := OpFlags(0).String(); s != "0" {
		t.Errorf("zero flags %q", s)
	}
	if CNP.Transport() != TransportCNP || UDSendOnly.Transport() != TransportUD {
		t.Error("Transport() wrong")
	}
}
