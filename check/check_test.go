package check

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
)

func fixedClock() func() time.Time {
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Millisecond); return t }
}

func newTestSet(t *testing.T, ignore ...Name) *Set {
	t.Helper()
	s, err := NewSet(Config{Ignore: ignore, Now: fixedClock()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(found []Finding) []string {
	var out []string
	for _, f := range found {
		out = append(out, string(f.Name)+" "+f.Object)
	}
	return out
}

func TestEveryCheckIsExplained(t *testing.T) {
	seen := map[Name]bool{}
	for _, c := range Checks {
		if seen[c.Name] || c.Rule == "" || !strings.Contains(c.Explain, "Fix: ") {
			t.Errorf("%s: duplicate, or without its rule or fix", c.Name)
		}
		seen[c.Name] = true
	}
	if _, err := NewSet(Config{Ignore: []Name{"no-such"}}); err == nil {
		t.Error("an unknown name to ignore was accepted")
	}
}

func TestSignalledWROutstandingAtDestroyUntilItsCompletion(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x11, 16, false)
	p.Posted(0x11, &emu.SendWR{WRID: 1, SGList: []emu.SGE{{LKey: 7}}})                              // unsignalled
	p.Posted(0x11, &emu.SendWR{WRID: 2, SendFlags: emu.SendSignaled, SGList: []emu.SGE{{LKey: 7}}}) // signalled
	p.MRDeregistered(3, 8)                                                                          // another MR: nothing
	p.MRDeregistered(3, 7)
	p.Completed(0x11, 2, emu.WCSuccess)
	p.MRDeregistered(4, 7) // done now: nothing
	p.Posted(0x11, &emu.SendWR{WRID: 3, SendFlags: emu.SendSignaled})
	p.QPDestroyed(0x11, 0, 0)
	got := names(s.All())
	want := []string{"mr-deregistered-busy MR handle 3 lkey 0x7", "qp-destroyed-busy QP 0x11"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("findings %q, want %q", got, want)
	}
	if f := s.All()[1]; f.WRID == nil || *f.WRID != 3 {
		t.Fatalf("qp-destroyed-busy names WR %v, want 3", f.WRID)
	}
}

// TestOneIDForManyWRsCompletesInOrder: programs (perftest) give every WR
// one wr_id and signal one in N: a success completes the oldest
// signalled WR and all before it, a flush the oldest WR of the id.
func TestOneIDForManyWRsCompletesInOrder(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x11, 64, false)
	for round := range 3 {
		for i := range 4 {
			flags := emu.SendFlags(0)
			if i == 3 {
				flags = emu.SendSignaled
			}
			p.Posted(0x11, &emu.SendWR{WRID: 0, SendFlags: flags})
		}
		if round < 2 {
			p.Completed(0x11, 0, emu.WCSuccess)
		}
	}
	p.Completed(0x11, 0, emu.WCWRFlushErr) // the first unsignalled one of round 3
	p.QPDestroyed(0x11, 0, 0)
	found := s.All()
	if len(found) != 1 || found[0].Name != QPDestroyedBusy || !strings.Contains(found[0].Detail, "with 1 signalled") {
		t.Fatalf("findings %+v, want the last round's signalled WR outstanding", found)
	}
}

func TestUnsignalledRunOfAQueueDepthIsFoundOnce(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x12, 4, false)
	for i := range 3 {
		p.Posted(0x12, &emu.SendWR{WRID: uint64(i)})
	}
	p.Posted(0x12, &emu.SendWR{WRID: 3, SendFlags: emu.SendSignaled})
	if n := len(s.All()); n != 0 {
		t.Fatalf("3 unsignalled then a signalled on a depth of 4: %d findings", n)
	}
	for i := range 9 {
		p.Posted(0x12, &emu.SendWR{WRID: uint64(10 + i)})
	}
	found := s.All()
	if len(found) != 1 || found[0].Name != SQNeverReclaimed || *found[0].WRID != 13 {
		t.Fatalf("findings %+v, want one sq-never-reclaimed at WR 13", found)
	}
	q := s.Program(101, "sigall", nil)
	q.QPCreated(0x13, 2, true)
	for i := range 5 {
		q.Posted(0x13, &emu.SendWR{WRID: uint64(i)})
	}
	if n := len(s.Of(101)); n != 0 {
		t.Fatalf("sq_sig_all QP: %d findings", n)
	}
}

func TestPostToErrorQPOnlyAfterTheErrorCompletion(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x11, 16, false)
	p.PostedInError(0x11, 1, 5) // in ERR, no error completion: the program's view is unknown
	p.ErrorCompleted(0x11, 7)
	p.PostedInError(0x11, 2, 7) // on the ring before the error reached the CQ
	p.PostedInError(0x11, 4, 9)
	p.PostedInError(0x11, 5, 9) // nothing new
	p.PostedInError(0x11, 6, 10)
	p.QPCreated(0x12, 16, false)
	p.ErrorCompleted(0x12, 1)
	p.QPModified(0x12, true)
	p.PostedInError(0x12, 1, 2) // the program's own ERR: a drain
	p.QPCreated(0x13, 16, false)
	p.ErrorCompleted(0x13, 1)
	p.QPModified(0x13, false) // recovered (to RESET)
	p.PostedInError(0x13, 1, 2)
	found := s.All()
	if len(found) != 1 || found[0].Object != "QP 0x11" || found[0].Count != 2 || *found[0].WRID != 4 {
		t.Fatalf("findings %+v, want post-to-error-qp twice on QP 0x11, first WR 4", found)
	}
}

func TestFindingsOfAProgramAndItsChildrenAtItsEnd(t *testing.T) {
	var ended []int
	s, err := NewSet(Config{Ignore: []Name{CQOverflow}, Now: fixedClock(), OnEnd: func(pid int, found []Finding) {
		ended = append(ended, pid, len(found))
	}})
	if err != nil {
		t.Fatal(err)
	}
	parent := s.Program(100, "sh", nil)
	child := s.Program(200, "prog", []int{100, 50})
	other := s.Program(300, "other", []int{50})
	child.Leaked("PD", 0, "")
	child.Leaked("PD", 0, "") // the same object: counted
	child.CQOverflowed(1, 3, 0x11, 9)
	other.Unpolled(2, 0x12, 5, emu.WCRemAccessErr)
	other.Unpolled(2, 0x12, 6, emu.WCWRFlushErr) // a flush: nothing
	if !s.Active(100) {
		t.Fatal("a program with a child's file open is not active")
	}
	child.Release()
	parent.Release()
	other.Release()
	if s.Active(100) || len(ended) != 4 || ended[0] != 200 || ended[1] != 1 || ended[2] != 300 {
		t.Fatalf("active %v, ends %v", s.Active(100), ended)
	}
	of := s.Of(100)
	if len(of) != 1 || of[0].Name != Leak || of[0].Count != 2 || of[0].PID != 200 {
		t.Fatalf("findings of 100: %+v", of)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, s.All()); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&b)
	if err != nil || len(back) != 2 || back[1].Name != ErrorIgnored || *back[1].WRID != 5 || !back[0].First.Equal(of[0].First) {
		t.Fatalf("JSON round trip: %+v, %v", back, err)
	}
	b.Reset()
	WriteReport(&b, back)
	for _, want := range []string{"softroce check: 2 findings", "leak: PD handle 0 (pid 200 prog)", "2 times",
		"error-completion-ignored: QP 0x12", "wr_id 0x5", "--check-ignore leak to suppress"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// FuzzReadJSON: any input is read or refused, never a panic; what is read
// writes back and reads again the same.
func FuzzReadJSON(f *testing.F) {
	f.Add([]byte(`{"findings":[]}`))
	f.Add([]byte(`{"findings":[{"name":"leak","pid":1,"program":"p","object":"PD handle 0","count":1,"first":"2026-01-02T03:04:05Z","detail":"d"}]}`))
	f.Add([]byte(`{"findings":[{"wr_id":18446744073709551615}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		found, err := ReadJSON(bytes.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, found); err != nil {
			return // a time the encoder refuses (year past 9999)
		}
		if _, err := ReadJSON(&b); err != nil {
			t.Fatalf("re-reading what was written: %v", err)
		}
		var r bytes.Buffer
		WriteReport(&r, found)
	})
}

// BenchmarkPostComplete is the checker's cost per send WR of a stream
// that signals one WR in 16 (perftest's cq_mod), as the daemon's doorbell
// and completion path pay it.
func BenchmarkPostComplete(b *testing.B) {
	s, _ := NewSet(Config{})
	p := s.Program(1, "bench", nil)
	p.QPCreated(0x11, 128, false)
	wr := emu.SendWR{WRID: 0, SGList: []emu.SGE{{LKey: 7, Length: 65536}}}
	b.ReportAllocs()
	for i := range b.N {
		wr.SendFlags = 0
		if i%16 == 15 {
			wr.SendFlags = emu.SendSignaled
		}
		p.Posted(0x11, &wr)
		if i%16 == 15 {
			p.Completed(0x11, 0, emu.WCSuccess)
		}
	}
}

// TestRNRNAKsSumUpPerQueue: RNR NAKs make one finding per receive queue
// (a QP's own, or the SRQ several QPs share), counting them, and its
// detail sums up the latest: how many, over how long, who sent the
// last, whether the SRQ's limit was armed (the test clock ticks 1 ms
// per reading).
func TestRNRNAKsSumUpPerQueue(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.RNRNAKSent(0x11, "", false)
	p.RNRNAKSent(0x11, "", false)
	p.RNRNAKSent(0x12, "SRQ handle 4", false)
	p.RNRNAKSent(0x13, "SRQ handle 4", false)
	p.RNRNAKSent(0x14, "SRQ handle 5", true)
	p.RNRNAKSent(0x11, "", false)
	found := s.All()
	got := names(found)
	want := []string{"receive-starvation QP 0x11", "receive-starvation SRQ handle 4", "receive-starvation SRQ handle 5"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("findings %q, want %q", got, want)
	}
	details := []string{
		"3 RNR NAKs sent by QP 0x11 over 8ms: the receive queue was empty when a SEND arrived",
		"2 RNR NAKs sent by QP 0x13 over 2ms: the SRQ was empty when a SEND arrived; its limit event was never armed (IBV_SRQ_LIMIT)",
		"1 RNR NAKs sent by QP 0x14 over 0s: the SRQ was empty when a SEND arrived",
	}
	for i, f := range found {
		if f.Count != []int{3, 2, 1}[i] || f.Detail != details[i] {
			t.Errorf("%s: count %d, detail %q; want %q", f.Object, f.Count, f.Detail, details[i])
		}
	}
	s2 := newTestSet(t, ReceiveStarved)
	s2.Program(100, "prog", nil).RNRNAKSent(0x11, "", false)
	if len(s2.All()) != 0 {
		t.Error("an ignored receive-starvation was recorded")
	}
}

// TestSignalledCountsTheOutstandingSignalledWRs: Signalled follows the
// signalled WRs the device took, through completions (in order), WRs
// taken back and a QP's destroy; cq-can-overflow names the CQ.
func TestSignalledCountsTheOutstandingSignalledWRs(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x11, 16, false)
	for id := range uint64(6) {
		flags := emu.SendFlags(0)
		if id%2 == 1 {
			flags = emu.SendSignaled
		}
		p.Posted(0x11, &emu.SendWR{WRID: id, SendFlags: flags})
	}
	if n := p.Signalled(0x11); n != 3 {
		t.Fatalf("after posting 1, 3, 5 signalled: %d", n)
	}
	p.Unposted(0x11, 2) // 4, 5
	p.Completed(0x11, 1, emu.WCSuccess)
	if n := p.Signalled(0x11); n != 1 {
		t.Fatalf("after taking back 4, 5 and completing 1: %d, want 1 (3)", n)
	}
	p.Completed(0x11, 2, emu.WCWRFlushErr) // a flush of the unsignalled 2
	p.Completed(0x11, 3, emu.WCSuccess)
	if n := p.Signalled(0x11); n != 0 {
		t.Fatalf("after completing 3: %d", n)
	}
	var off *Program
	if off.Signalled(0x11) != 0 || p.Signalled(0x99) != 0 {
		t.Fatal("no check, or no such QP: not 0")
	}
	p.CQMayOverflow(2, 4, 1, 1, 8, 0x11)
	p.CQMayOverflow(2, 4, 0, 1, 8, 0x11)
	f := s.All()
	if len(f) != 1 || f[0].Name != CQMayOverflow || f[0].Object != "CQ handle 2" || f[0].Count != 2 ||
		f[0].Detail != "10 completions may be due at once on a CQ of 4 entries: 1 unpolled, 1 signalled send WRs and 8 receive WRs outstanding (as QP 0x11 posted)" {
		t.Fatalf("findings %+v", f)
	}
}

// TestRetransmissionWithOtherBytes: a packet sent again (same PSN, same
// WR) with other bytes is a finding; with the same bytes, or another WR
// on that PSN (after a wrap) is not.
func TestRetransmissionWithOtherBytes(t *testing.T) {
	s := newTestSet(t)
	p := s.Program(100, "prog", nil)
	p.QPCreated(0x11, 16, false)
	p.PayloadSent(0x11, 5, 1, []byte("aaaa"))
	p.PayloadSent(0x11, 6, 1, []byte("bbbb"))
	p.PayloadSent(0x11, 5, 1, []byte("aaaa")) // a retransmission, the same bytes
	p.PayloadSent(0x11, 5+sumSlots, 2, []byte("cccc"))
	p.PayloadSent(0x11, 5, 3, []byte("dddd")) // another WR on PSN 5
	if f := s.All(); len(f) != 0 {
		t.Fatalf("findings %+v", f)
	}
	p.PayloadSent(0x11, 6, 1, []byte("bbbc"))
	p.PayloadSent(0x11, 6, 1, []byte("bbbd"))
	p.PayloadSent(0x12, 6, 1, []byte("bbbe")) // a QP the check does not know
	f := s.All()
	if len(f) != 1 || f[0].Name != SendBufferChanged || f[0].Object != "QP 0x11" || f[0].Count != 2 || *f[0].WRID != 1 {
		t.Fatalf("findings %+v", f)
	}
}

// BenchmarkPayloadSent is send-buffer-changed's cost per packet of a
// 4096-byte MTU: a checksum and a slot.
func BenchmarkPayloadSent(b *testing.B) {
	s, _ := NewSet(Config{})
	p := s.Program(1, "bench", nil)
	p.QPCreated(0x11, 128, false)
	pay := make([]byte, 4096)
	b.SetBytes(int64(len(pay)))
	b.ReportAllocs()
	for i := range b.N {
		p.PayloadSent(0x11, uint32(i)&0xffffff, uint64(i/16), pay)
	}
}
