package rxe

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestRNRNAKRetry: an empty RQ gets RNR NAK 0x2C (and the QP's RNRNAKSent
// is called); rnr_retry 0 fails, 7 retries until a receive is posted.
func TestRNRNAKRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		rnr  uint8
	}{{"rnr7", 7}, {"rnr0", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{rnr: tc.rnr, sqpsnA: 5})
			hooked := 0
			c.qb.RNRNAKSent = func() { hooked++ }
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			resp := p.b.rec.take(t)
			wantOps(t, "responses", resp, wire.RCAcknowledge)
			if resp[0].AETH().Syndrome() != 0x2C || resp[0].BTH().PSN() != 5 {
				t.Fatalf("RNR NAK %v PSN %d", resp[0].AETH().Syndrome(), resp[0].BTH().PSN())
			}
			if p.b.counter("send_rnr_err") != 1 || p.a.counter("rcvd_rnr_err") != 1 || hooked != 1 {
				t.Errorf("RNR counters, or the QP's RNRNAKSent called %d times, want 1", hooked)
			}
			if tc.rnr == 0 {
				wantWC(t, "send", poll(p.a.scq), emu.WCRNRRetryExcErr)
				if p.a.state(c.qa) != qpstate.StateErr {
					t.Error("QP not in ERR")
				}
				return
			}
			p.a.rec.take(t)
			p.run(639 * time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 0 {
				t.Fatalf("%d packets before the 0.64 ms RNR delay", n)
			}
			p.run(time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 1 {
				t.Fatalf("%d packets at the RNR delay, want 1 retransmission", n)
			}
			dst, _, mrb := p.b.buf(8, 0)
			p.b.postRecv(c.qb, emu.RecvWR{WRID: 2, SGList: []emu.SGE{{Addr: dst, Length: 8, LKey: mrb.LKey()}}})
			p.run(time.Millisecond)
			wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
			wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
		})
	}
}

// TestRetryExhausted: a silent peer: transmissions timeout apart, then
// RETRY_EXC_ERR; retry_cnt 0 sends once, timeout 0 never retransmits,
// retry_cnt 7 retries forever in rxe and 7 times with Quirks.RetryCnt7Finite.
func TestRetryExhausted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout uint8
		retry   uint8
		q       Quirks
		sends   int // transmissions within 1 s; -1: forever (checked over 100 periods)
		fail    bool
	}{
		{"retry2", 14, 2, Quirks{}, 3, true},
		{"retry0", 14, 0, Quirks{}, 1, true},
		{"timeout0", 0, 2, Quirks{}, 1, false},
		{"retry7-rxe", 14, 7, Quirks{}, -1, false},
		{"retry7-ibta", 14, 7, Quirks{RetryCnt7Finite: true}, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksA: tc.q})
			c := p.connect(qpOpts{timeout: tc.timeout, retry: tc.retry})
			p.b.r.Close() // silent peer
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			start := p.clk.Now()
			var times []time.Duration
			period := 4096 * time.Nanosecond << tc.timeout
			horizon := time.Second
			if tc.sends < 0 {
				horizon = 100 * period
			}
			for p.clk.Now().Sub(start) < horizon {
				for range p.a.rec.take(t) {
					times = append(times, p.clk.Now().Sub(start))
				}
				if !p.clk.AdvanceToNext() {
					break
				}
			}
			times = append(times, make([]time.Duration, len(p.a.rec.take(t)))...)
			want := tc.sends
			if want < 0 {
				if len(times) < 100 {
					t.Errorf("%d transmissions in 100 periods, want one per period", len(times))
				}
			} else if len(times) != want {
				t.Errorf("%d transmissions at %v, want %d", len(times), times, want)
			}
			if tc.timeout != 0 && len(times) > 1 && times[1] != period {
				t.Errorf("retransmission at %v, want %v", times[1], period)
			}
			wcs := poll(p.a.scq)
			if tc.fail {
				wantWC(t, "send", wcs, emu.WCRetryExcErr)
				if p.a.counter("retry_exceeded_err") != 1 {
					t.Error("retry_exceeded_err")
				}
			} else {
				wantWC(t, "send", wcs)
			}
		})
	}
}

// TestLostReadResponseRetried: a READ then a SEND; the READ's response is lost,
// the SEND's ACK triggers a retry from the READ (retry_cnt -1), which succeeds.
func TestLostReadResponseRetried(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{retry: 3})
	p.b.rec.Link = link.NewFaults(p.b.rec.Link, link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{0: link.Drop})})
	rsrc, data, mrb := p.b.buf(100, 5)
	dst, got, mra := p.a.buf(100, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: dst, Length: 100, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()})
	p.sendN(c, 8, 8, 0)
	p.settle()
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
	if !bytes.Equal(got, data) {
		t.Error("read data")
	}
	if n := p.a.counter("completer_retry_err"); n != 1 {
		t.Errorf("completer_retry_err %d", n)
	}
	wantOps(t, "requests", p.a.rec.take(t), wire.RCRDMAReadRequest, wire.RCSendOnly, wire.RCRDMAReadRequest, wire.RCSendOnly)
}

// TestRNRDelayQuirk: code 25 waits 61.41 ms (rxe) or 61.44 ms (IBTA);
// Tick rounds timers up.
func TestRNRDelayQuirk(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    Quirks
		code uint8
		want time.Duration
	}{
		{"code25-rxe", Quirks{}, 25, 61410 * time.Microsecond},
		{"code25-ibta", Quirks{RNRCode25IBTA: true}, 25, 61440 * time.Microsecond},
		{"code12", Quirks{}, 12, 640 * time.Microsecond},
		{"code0", Quirks{}, 0, 655360 * time.Microsecond},
		{"code12-tick4ms", Quirks{Tick: 4 * time.Millisecond}, 12, 4 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.q.RNRDelay(tc.code); got != tc.want {
				t.Errorf("RNRDelay(%d) = %v, want %v", tc.code, got, tc.want)
			}
			// On the wire: the requester retransmits exactly after it.
			p := newPair(t, pairOpts{quirksA: tc.q})
			c := p.connect(qpOpts{minRNR: tc.code, rnr: 7})
			if tc.code == 0 {
				return
			}
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			p.a.rec.take(t)
			p.run(tc.want - time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 0 {
				t.Fatalf("retransmitted early")
			}
			p.clk.Advance(time.Microsecond)
			p.a.r.Poll()
			if n := len(p.a.rec.take(t)); n != 1 {
				t.Fatalf("%d retransmissions at %v", n, tc.want)
			}
		})
	}
}

// TestRetransmitTimerAcrossIdle: when everything sent is acknowledged the
// retransmit timer stays pending (one timer per QP however many messages,
// rather than one per message after an idle moment), and a message sent
// after an idle moment is retransmitted a full timeout after it was sent,
// not at the deadline the timer had before.
func TestRetransmitTimerAcrossIdle(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{timeout: 14, retry: 2})
	src, _, mra := p.a.buf(8, 1)
	dst, _, mrb := p.b.buf(8, 0)
	wr := emu.SendWR{Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}},
		RemoteAddr: dst, RKey: mrb.RKey()}
	period := 4096 * time.Nanosecond << 14
	base := p.clk.Pending()
	for i := range 5 {
		p.a.postSend(c.qa, wr)
		p.settle()
		if n := p.clk.Pending(); n != base+1 {
			t.Fatalf("message %d acknowledged: %d timers pending, want %d", i, n, base+1)
		}
	}
	p.a.rec.take(t)
	p.clk.Advance(period * 3 / 4)
	p.b.r.Close() // silent peer from now on
	wr.SendFlags = emu.SendSignaled
	p.a.postSend(c.qa, wr)
	start := p.clk.Now()
	var times []time.Duration
	for len(times) < 2 && p.clk.Now().Sub(start) < 3*period {
		p.settle()
		for range p.a.rec.take(t) {
			times = append(times, p.clk.Now().Sub(start))
		}
		if !p.clk.AdvanceToNext() {
			break
		}
	}
	if len(times) < 2 || times[0] != 0 || times[1] != period {
		t.Errorf("transmissions at %v after the send, want 0 and %v", times, period)
	}
}
