package fault

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

func frame(t *testing.T, op wire.Opcode, qpn, psn uint32) []byte {
	t.Helper()
	f := wire.Frame{DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, SrcPort: 0xC000,
		Payload: make([]byte, 8), BTH: wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpn, PSN: psn}}
	if op.Headers().Has(wire.HdrRETH) {
		f.Payload = make([]byte, 8)
	}
	b := make([]byte, f.Len())
	if _, err := wire.Build(b, &f); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustAdd(t *testing.T, s *Set, rule string) int {
	t.Helper()
	r, err := Parse(rule)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestWireRulesChooseTheirFrames: a wire rule acts only on frames of its
// QP, opcode and PSN range, on the nth of them (count of them), and a
// qp:silent rule on every frame to its QP; each action is recorded with
// the canonical rule; a non-RoCE frame passes; Del stops a rule.
func TestWireRulesChooseTheirFrames(t *testing.T) {
	recorded := map[[2]string]int{}
	s := NewSet(Config{Record: func(r, a string) { recorded[[2]string{r, a}]++ }})
	id := mustAdd(t, s, "wire:drop,qp=0x11,opcode=SEND_ONLY,nth=2,count=2")
	mustAdd(t, s, "wire:corrupt,psn=5-6")
	mustAdd(t, s, "qp:silent,qp=0x22")
	var got []link.Action
	for _, f := range [][]byte{
		frame(t, wire.RCSendOnly, 0x11, 1),      // 1st SEND_ONLY to 0x11: pass
		frame(t, wire.RCSendOnly, 0x12, 2),      // another QP: pass
		frame(t, wire.RCRDMAWriteOnly, 0x11, 3), // another opcode: pass
		frame(t, wire.RCSendOnly, 0x11, 4),      // 2nd: drop
		frame(t, wire.RCSendOnly, 0x11, 5),      // 3rd: drop (count=2), and corrupt (psn 5)
		frame(t, wire.RCSendOnly, 0x11, 7),      // 4th: count spent
		frame(t, wire.RCAcknowledge, 0x22, 9),   // silent QP: drop
		[]byte("not a RoCE frame"),
	} {
		got = append(got, s.Frame(0, f))
	}
	want := []link.Action{0, 0, 0, link.Drop, link.Drop | link.Corrupt, 0, link.Drop, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d: %v, want %v", i, got[i], want[i])
		}
	}
	if n := recorded[[2]string{"wire:drop,qp=0x11,opcode=SEND_ONLY,nth=2,count=2", "drop RC_SEND_ONLY"}]; n != 2 {
		t.Errorf("recorded drops %d, want 2: %v", n, recorded)
	}
	if n := recorded[[2]string{"qp:silent,qp=0x22", "silent RC_ACKNOWLEDGE"}]; n != 1 {
		t.Errorf("recorded silent %d: %v", n, recorded)
	}
	if l := s.List(); len(l) != 3 || l[0] != "1 wire:drop,qp=0x11,opcode=SEND_ONLY,nth=2,count=2 applied=2" {
		t.Errorf("List = %q", l)
	}
	if err := s.Del(id); err != nil {
		t.Fatal(err)
	}
	if err := s.Del(id); !errors.Is(err, unix.ENOENT) {
		t.Errorf("second Del: %v, want ENOENT", err)
	}
}

// TestProbabilityRulesReplayForASeed: the same seed gives the same
// decisions, frame for frame; another seed other ones.
func TestProbabilityRulesReplayForASeed(t *testing.T) {
	run := func(seed uint64) []link.Action {
		s := NewSet(Config{Seed: seed})
		mustAdd(t, s, "wire:drop,prob=0.5")
		var out []link.Action
		for i := range 64 {
			out = append(out, s.Frame(0, frame(t, wire.RCSendOnly, 0x11, uint32(i))))
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same, drops := true, 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 frame %d: %v then %v", i, a[i], b[i])
		}
		if a[i] != c[i] {
			same = false
		}
		if a[i] == link.Drop {
			drops++
		}
	}
	if same || drops == 0 || drops == 64 {
		t.Errorf("seed 7 and 8 agree on every frame, or drops %d of 64", drops)
	}
}

// TestVerbRulesFailTheNextCalls: a verbs rule fails its command (normal
// and extended form) count times with its errno, then lets it through;
// other commands pass.
func TestVerbRulesFailTheNextCalls(t *testing.T) {
	var recorded []string
	s := NewSet(Config{Record: func(r, a string) { recorded = append(recorded, a) }})
	mustAdd(t, s, "verbs:fail,verb=create_qp,errno=ENOMEM,count=2")
	for i, tc := range []struct {
		cmd  string
		want error
	}{
		{"IB_USER_VERBS_CMD_CREATE_CQ", nil},
		{"IB_USER_VERBS_CMD_CREATE_QP", unix.ENOMEM},
		{"IB_USER_VERBS_EX_CMD_CREATE_QP", unix.ENOMEM},
		{"IB_USER_VERBS_CMD_CREATE_QP", nil},
		{"", nil},
	} {
		err := s.Verb(tc.cmd)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("call %d %s: %v, want %v", i, tc.cmd, err, tc.want)
		}
	}
	if len(recorded) != 2 || recorded[0] != "fail ENOMEM" {
		t.Errorf("recorded %q", recorded)
	}
}

// TestPortRulesActNowOrLater: a port rule acts when added, or at= later on
// the set's clock; a deleted pending one never acts; without port control
// a port rule is EOPNOTSUPP.
func TestPortRulesActNowOrLater(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	var acted []string
	s := NewSet(Config{Clock: clk, Port: func(r *Rule) error { acted = append(acted, r.String()); return nil }})
	mustAdd(t, s, "port:down")
	mustAdd(t, s, "port:up,at=2s")
	gone := mustAdd(t, s, "port:gid,ip=10.0.0.9/24,at=1s")
	if err := s.Del(gone); err != nil {
		t.Fatal(err)
	}
	if len(acted) != 1 || acted[0] != "port:down" {
		t.Fatalf("acted %q before the clock moved", acted)
	}
	clk.Advance(3 * time.Second)
	if len(acted) != 2 || acted[1] != "port:up,at=2s" {
		t.Fatalf("acted %q", acted)
	}
	r, _ := Parse("port:down")
	if _, err := NewSet(Config{}).Add(r); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("port rule without port control: %v", err)
	}
}

// TestRewriteAnswersSendsWithRNRNAKAndInvalidatesRKeys: qp:rnr replaces
// the first packet of a SEND to its QP with an RC ACKNOWLEDGE carrying an
// RNR NAK (the responder's timer and MSN, to the requester's QP, with the
// SEND's PSN, addresses swapped, ICRC valid) and drops the rest of that
// SEND; qp:invalidate changes the R_Key of a WRITE naming it and reseals
// the ICRC; other frames are left alone.
func TestRewriteAnswersSendsWithRNRNAKAndInvalidatesRKeys(t *testing.T) {
	s := NewSet(Config{Responder: func(qpn uint32) (Responder, bool) {
		return Responder{DestQPN: 0x33, MinRNRTimer: 14, MSN: 5}, qpn == 0x11
	}})
	mustAdd(t, s, "qp:rnr,qp=0x11,count=1")
	mustAdd(t, s, "qp:invalidate,rkey=0x1234")
	send := frame(t, wire.RCSendFirst, 0x11, 40)
	out := s.Rewrite(send)
	p, err := wire.Parse(out)
	if err != nil {
		t.Fatalf("the RNR NAK does not parse: %v", err)
	}
	in, _ := wire.Parse(send)
	if b := p.BTH(); b.Opcode() != wire.RCAcknowledge || b.DestQP() != 0x33 || b.PSN() != 40 {
		t.Errorf("NAK BTH %v to %#x psn %d", b.Opcode(), b.DestQP(), b.PSN())
	}
	if a := p.AETH(); !a.Syndrome().IsRNRNAK() || a.Syndrome().Value() != 14 || a.MSN() != 5 {
		t.Errorf("NAK AETH %v msn %d", a.Syndrome(), a.MSN())
	}
	if p.Src() != in.Dst() || p.Dst() != in.Src() || p.EthDst() != in.EthSrc() {
		t.Errorf("NAK addresses %v->%v", p.Src(), p.Dst())
	}
	if got := s.Rewrite(frame(t, wire.RCSendMiddle, 0x11, 41)); got == nil || len(got) != 0 {
		t.Errorf("the SEND's middle packet after the NAK: %d bytes, want dropped", len(got))
	}
	if got := s.Rewrite(frame(t, wire.RCSendOnly, 0x11, 42)); got != nil {
		t.Errorf("a SEND after count ran out was rewritten")
	}
	f := wire.Frame{DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, SrcPort: 0xC000,
		Payload: make([]byte, 16), BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PKey: 0xFFFF, DestQP: 0x22, PSN: 7},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 16}}
	w := make([]byte, f.Len())
	if _, err := wire.Build(w, &f); err != nil {
		t.Fatal(err)
	}
	out = s.Rewrite(w)
	p, err = wire.Parse(out)
	if err != nil {
		t.Fatalf("the rewritten WRITE does not parse: %v", err)
	}
	if err := wire.VerifyICRC(out, p.L3Offset()); err != nil {
		t.Errorf("rewritten WRITE: %v", err)
	}
	if k := p.RETH().RKey(); k == 0x1234 || k>>8 != 0x12 {
		t.Errorf("rewritten R_Key %#x: want another key byte of the same MR", k)
	}
	if wr, _ := wire.Parse(w); wr.RETH().RKey() != 0x1234 {
		t.Errorf("the original frame was modified")
	}
}

// TestCQRulesActOnTheirQPsCQs: a cq rule acts on the CQs CQsOf gave for
// its QP only: overflow once (by default), delay count times; a QP that
// does not exist makes Add fail.
func TestCQRulesActOnTheirQPsCQs(t *testing.T) {
	sendCQ, recvCQ, other := new(int), new(int), new(int)
	s := NewSet(Config{CQsOf: func(qpn uint32) ([]any, error) {
		if qpn != 0x11 {
			return nil, unix.ENOENT
		}
		return []any{sendCQ, recvCQ}, nil
	}})
	if o, d := s.CQ(sendCQ, 0x11); o || d != 0 {
		t.Fatalf("no rule: %v %v", o, d)
	}
	mustAdd(t, s, "cq:overflow,qp=0x11")
	mustAdd(t, s, "cq:delay,qp=0x11,by=5ms,count=2")
	if o, _ := s.CQ(other, 0x12); o {
		t.Error("a CQ of another QP overflowed")
	}
	if o, _ := s.CQ(recvCQ, 0x11); !o {
		t.Error("the first completion did not overflow")
	}
	for i := range 3 {
		o, d := s.CQ(sendCQ, 0x11)
		want := 5 * time.Millisecond
		if i == 2 {
			want = 0
		}
		if o || d != want {
			t.Errorf("completion %d: overflow %v delay %v, want delay %v", i, o, d, want)
		}
	}
	r, _ := Parse("cq:overflow,qp=0x12")
	if _, err := s.Add(r); !errors.Is(err, unix.ENOENT) {
		t.Errorf("cq rule for a missing QP: %v", err)
	}
}

// TestQPErrAfterNCompletions: qp:err,after=N moves its QP to ERR once N of
// its work requests have completed, once, and counts no other QP's.
func TestQPErrAfterNCompletions(t *testing.T) {
	moved := make(chan uint32, 4)
	s := NewSet(Config{QPErr: func(qpn uint32) error { moved <- qpn; return nil }})
	mustAdd(t, s, "qp:err,qp=0x11,after=3")
	for range 5 {
		s.CQ(nil, 0x12)
	}
	for range 2 {
		s.CQ(nil, 0x11)
	}
	select {
	case q := <-moved:
		t.Fatalf("QP %#x moved before its 3rd completion", q)
	case <-time.After(20 * time.Millisecond):
	}
	for range 3 {
		s.CQ(nil, 0x11)
	}
	if q := <-moved; q != 0x11 {
		t.Fatalf("moved QP %#x", q)
	}
	select {
	case q := <-moved:
		t.Fatalf("QP %#x moved twice", q)
	case <-time.After(20 * time.Millisecond):
	}
}

// countLink counts the frames written to it.
type countLink struct {
	link.Link
	frames int
	closed bool
}

func (c *countLink) WritePackets(bufs [][]byte) (int, error) {
	c.frames += len(bufs)
	return len(bufs), nil
}
func (c *countLink) Close() error { c.closed = true; return nil }

// TestLinkBypassesTheFaultsWithoutFrameRules: frames go straight to the
// inner link while no rule decides frames, through the faulty link while
// one does, rewritten when a rewrite rule takes them; Close closes the
// faulty link.
func TestLinkBypassesTheFaultsWithoutFrameRules(t *testing.T) {
	inner, faulty := &countLink{}, &countLink{}
	s := NewSet(Config{Responder: func(uint32) (Responder, bool) { return Responder{DestQPN: 0x33}, true }})
	l := NewLink(inner, faulty, s)
	send := func() {
		if n, err := l.WritePackets([][]byte{frame(t, wire.RCSendOnly, 0x11, 1)}); n != 1 || err != nil {
			t.Fatalf("WritePackets: %d %v", n, err)
		}
	}
	send()
	mustAdd(t, s, "verbs:fail,verb=create_qp,errno=ENOMEM")
	send()
	if inner.frames != 2 || faulty.frames != 0 {
		t.Fatalf("without frame rules: inner %d faulty %d", inner.frames, faulty.frames)
	}
	id := mustAdd(t, s, "wire:drop,qp=0x99")
	send()
	if inner.frames != 2 || faulty.frames != 1 {
		t.Fatalf("with a frame rule: inner %d faulty %d", inner.frames, faulty.frames)
	}
	s.Del(id)
	mustAdd(t, s, "qp:rnr,qp=0x11")
	send() // answered with an RNR NAK: one frame still goes out
	if inner.frames != 3 || faulty.frames != 1 {
		t.Fatalf("with a rewrite rule: inner %d faulty %d", inner.frames, faulty.frames)
	}
	l.Close()
	if !faulty.closed {
		t.Error("Close did not close the faulty link")
	}
}
