package workload

import (
	"fmt"
	"runtime"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// bwSends is the sending half of perftest's BW loops, shared by
// run_iter_bw (runBWClient) and run_iter_bi's sends (runBiSend): on every
// QP it keeps up to TxDepth WRs outstanding, one signaled every CQMod (and
// the last of an iterations run), and accounts for their completions. An
// iterations run stamps each post and each completion for the average and
// the peak; a duration run (dur) posts until the alarm's end and counts
// CQMod messages for each completion seen in the sample window.
type bwSends struct {
	p                   *Perf
	size, iters, tot    uint64 // tot = iters × QPs
	dur                 *sampler
	ccnt                []uint64 // per QP: messages completed (CQMod per completion)
	totS, totC, samples uint64
	tposted, tcompleted []int64 // iterations run only
	now                 func() int64
}

func (p *Perf) newBWSends(size uint64, dur *sampler) *bwSends {
	s := &bwSends{p: p, size: size, iters: p.cfg.Iters, dur: dur, ccnt: make([]uint64, len(p.qps)),
		now: clockFrom(time.Now())}
	s.tot = s.iters * uint64(len(p.qps))
	if dur == nil {
		s.tposted, s.tcompleted = make([]int64, s.tot), make([]int64, s.tot)
	}
	return s
}

// done reports whether every message of an iterations run has completed.
func (s *bwSends) done() bool { return s.totC >= s.tot }

// post fills each QP's window: while a post list (or one WR) fits in
// TxDepth beyond the completed messages, and messages remain (or, in a
// duration run, the alarm has not ended the run).
func (s *bwSends) post() error {
	p, pl := s.p, uint64(s.p.cfg.PostList)
	for i := range p.qps {
		for (s.dur != nil || p.sent[i] < s.iters) && p.sent[i]+pl <= s.ccnt[i]+uint64(p.cfg.TxDepth) && !s.dur.ended() {
			if s.dur == nil {
				for j := range pl {
					s.tposted[s.totS+j] = s.now()
				}
			}
			if err := p.postBW(i, p.sent[i], s.size, s.dur == nil && p.sent[i] == s.iters-1); err != nil {
				return err
			}
			s.totS += pl
		}
	}
	return nil
}

// completed accounts for send completions: each stands for CQMod messages
// of its QP (fewer for the last of an iterations run).
func (s *bwSends) completed(wc []emu.WC) error {
	cqMod := uint64(s.p.cfg.CQMod)
	for j := range wc {
		w := &wc[j]
		if w.Status != emu.WCSuccess {
			return perfWCError(w)
		}
		i := int(w.WRID)
		if s.dur != nil {
			s.ccnt[i] += cqMod
			s.totC += cqMod
			if s.dur.sampling() {
				s.samples += cqMod
			}
			continue
		}
		d := min(s.ccnt[i]+cqMod, s.iters) - s.ccnt[i]
		s.ccnt[i] += d
		s.totC += d
		s.tcompleted[s.totC-1] = s.now()
	}
	return nil
}

// result is the run's row: in a duration run the window's samples plus
// extra (run_iter_bi's receives); in an iterations run all messages from
// the first post to the last completion, with the peak unless NoPeak.
func (s *bwSends) result(extra uint64) PerfResult {
	cfg := s.p.cfg
	if s.dur != nil {
		return s.p.bwDuration(s.size, s.samples+extra, s.dur)
	}
	secs := float64(s.tcompleted[s.tot-1]-s.tposted[0]) / 1e9
	r := oob.BWFromRun(s.size, s.tot, secs, cfg.Gbits)
	if !cfg.NoPeak {
		r.BWPeak = PeakBW(s.size, s.tposted, s.tcompleted, cfg.CQMod, cfg.Gbits)
	}
	return PerfResult{BW: r, Measured: true}
}

// bwDuration is the BW row of a duration run: samples messages in the
// window, no peak.
func (p *Perf) bwDuration(size, samples uint64, s *sampler) PerfResult {
	r := oob.BWFromRun(size, samples, s.window().Seconds(), p.cfg.Gbits)
	return PerfResult{BW: r, Measured: true}
}

// postBW posts message k of QP i for a BW loop (signaled every CQMod, and
// the last of an iterations run) and counts atomics for VerifyPerf; with a
// post list, the PostList WRs of one chain (slots 0..PostList-1, each
// CQMod-th signaled) in one PostSend.
func (p *Perf) postBW(i int, k, size uint64, last bool) error {
	cqMod := uint64(p.cfg.CQMod)
	var wrs []emu.SendWR
	var slots []int
	if pl := p.cfg.PostList; pl > 1 {
		for j := range uint64(pl) {
			wr, slot := p.sendWR(i, j, size, (j+1)%cqMod == 0)
			wrs, slots = append(wrs, wr), append(slots, slot)
		}
	} else {
		wr, slot := p.sendWR(i, k, size, k%cqMod == cqMod-1 || last)
		wrs, slots = append(wrs, wr), append(slots, slot)
	}
	if _, err := p.qps[i].PostSend(wrs); err != nil {
		return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, k, err)
	}
	for _, slot := range slots {
		if p.cfg.Test.Verb() == oob.VerbAtomic && slot < len(p.atomCount[i]) && !p.cfg.CompareSwap {
			p.atomCount[i][slot]++
		}
	}
	p.sent[i] += uint64(len(wrs))
	return nil
}

// warmUp is perform_warm_up: TxDepth signaled copies of the first WR on
// each QP (with a post list, one chain), each QP's waited for before the
// next; they count in no report.
func (p *Perf) warmUp(size uint64) error {
	wc := make([]emu.WC, p.cfg.TxDepth)
	for i, qp := range p.qps {
		var wrs []emu.SendWR
		var slots []int
		if pl := p.cfg.PostList; pl > 1 {
			for j := range uint64(pl) {
				wr, slot := p.sendWR(i, j, size, (j+1)%uint64(p.cfg.CQMod) == 0)
				wrs, slots = append(wrs, wr), append(slots, slot)
			}
		} else {
			wr, slot := p.sendWR(i, 0, size, true)
			for range p.cfg.TxDepth {
				if _, err := qp.PostSend([]emu.SendWR{wr}); err != nil {
					return fmt.Errorf("Couldn't post send during warm up: qp %d: %w", i, err)
				}
				slots = append(slots, slot)
			}
		}
		if len(wrs) > 0 {
			if _, err := qp.PostSend(wrs); err != nil {
				return fmt.Errorf("Couldn't post send during warm up: qp %d: %w", i, err)
			}
		}
		for _, slot := range slots {
			if p.cfg.Test.Verb() == oob.VerbAtomic && slot < len(p.atomCount[i]) && !p.cfg.CompareSwap {
				p.atomCount[i][slot]++
			}
		}
		want := p.cfg.TxDepth
		if p.cfg.PostList > 1 {
			want = p.cfg.PostList / p.cfg.CQMod
		}
		for left := want; left > 0; {
			n, err := p.scq.wait(wc, p.cfg.Timeout, p.what("warm up", uint64(want-left), uint64(want)))
			if err != nil {
				return fmt.Errorf("Problems with warm up: %w", err)
			}
			for j := range wc[:n] {
				if wc[j].Status != emu.WCSuccess {
					return perfWCError(&wc[j])
				}
			}
			left -= n
		}
	}
	return nil
}

// runBWClient is run_iter_bw: keep up to TxDepth WRs outstanding per QP,
// one signaled every CQMod (and the last), stamping each post and each
// completion. In a duration run it posts until the alarm's end and counts
// CQMod messages for each completion seen in the sample window.
func (p *Perf) runBWClient(size uint64) (PerfResult, error) {
	cfg := p.cfg
	if cfg.PerformWarmUp && cfg.Test.Verb() != oob.VerbSend {
		if err := p.warmUp(size); err != nil {
			return PerfResult{}, err
		}
	}
	dur := p.newSampler()
	s := p.newBWSends(size, dur)
	wc := make([]emu.WC, cfg.TxDepth*len(p.qps))
	dur.arm()
	defer dur.cancel()
	for dur != nil && !dur.ended() || dur == nil && !s.done() {
		if err := s.post(); err != nil {
			return PerfResult{}, err
		}
		n, err := p.scq.waitOr(wc, cfg.Timeout, p.what("client", s.totC, s.tot), dur.done())
		if err != nil {
			return PerfResult{}, err
		}
		if err := s.completed(wc[:n]); err != nil {
			return PerfResult{}, err
		}
	}
	return s.result(0), nil
}

// recvDone handles the receive completions of a send test: checks status
// and length, counts them per QP and reposts each (perftest reposts while
// more are to come; in a duration run always). It returns how many there
// were.
func (p *Perf) recvDone(wc []emu.WC, size uint64, rcnt []uint64) (int, error) {
	for j := range wc {
		w := &wc[j]
		if w.Status != emu.WCSuccess {
			return 0, perfWCError(w)
		}
		if want := size + uint64(p.recvExtra()); uint64(w.ByteLen) != want {
			return 0, fmt.Errorf("received %d bytes, want %d: %w", w.ByteLen, want, unix.EIO)
		}
		i := int(w.WRID)
		p.rposted[i]--
		rcnt[i]++
		if err := p.received(i, size); err != nil { // before its buffer is reposted
			return 0, err
		}
		if err := p.postRecv(i, 1); err != nil {
			return 0, err
		}
	}
	return len(wc), nil
}

// runBWServer is the send_bw server (run_iter_bw_server): count Iters
// receives per QP, reposting each, and time them from the first to the
// last. In a duration run the alarm starts at the first receive and the
// loop receives until its end, counting the receives of the window.
func (p *Perf) runBWServer(size uint64) (PerfResult, error) {
	cfg := p.cfg
	iters, nqp := cfg.Iters, len(p.qps)
	dur := p.newSampler()
	defer dur.cancel()
	tot := iters * uint64(nqp)
	rcnt := make([]uint64, nqp)
	var totR, samples uint64
	wc := make([]emu.WC, cfg.RxDepth*nqp)
	var first, last time.Time
	for dur != nil && !dur.ended() || dur == nil && totR < tot {
		n, err := p.rcq.waitOr(wc, cfg.Timeout, p.what("server", totR, tot), dur.done())
		if err != nil {
			return PerfResult{}, err
		}
		if n > 0 && first.IsZero() {
			first = time.Now()
			dur.arm()
		}
		if _, err := p.recvDone(wc[:n], size, rcnt); err != nil {
			return PerfResult{}, err
		}
		totR += uint64(n)
		if dur.sampling() {
			samples += uint64(n)
		}
	}
	if dur != nil {
		return p.bwDuration(size, samples, dur), nil
	}
	last = time.Now()
	r := oob.BWFromRun(size, tot, last.Sub(first).Seconds(), cfg.Gbits)
	return PerfResult{BW: r, Measured: true}, nil
}

// runBiSend is run_iter_bi, bidirectional send_bw: both sides send as
// run_iter_bw does and receive as run_iter_bw_server does, polling both
// CQs; the server sends nothing before its first receive. In iterations
// mode the row is the sends' (stamped as run_iter_bw stamps them; the
// caller adds the peer's report); in a duration run (the client's alarm
// starts at once, the server's at its first receive) it counts both the
// sends (CQMod a completion) and the receives of the window.
func (p *Perf) runBiSend(size uint64) (PerfResult, error) {
	cfg := p.cfg
	dur := p.newSampler()
	defer dur.cancel()
	s := p.newBWSends(size, dur)
	rcnt := make([]uint64, len(p.qps))
	var totR, recvSamples uint64
	swc, rwc := make([]emu.WC, cfg.TxDepth*len(p.qps)), make([]emu.WC, cfg.RxDepth*len(p.qps))
	waitingFirst := !cfg.Client
	if cfg.Client {
		dur.arm()
	}
	idle, lastProgress := 0, time.Now()
	armAt := max(p.rcq.spins, 1) // empty polls before arming both CQs
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for dur != nil && !dur.ended() || dur == nil && (!s.done() || totR < s.tot) {
		if !waitingFirst {
			if err := s.post(); err != nil {
				return PerfResult{}, err
			}
		}
		nr := p.rcq.cq.Poll(rwc)
		if nr > 0 && waitingFirst {
			waitingFirst = false
			dur.arm()
		}
		if _, err := p.recvDone(rwc[:nr], size, rcnt); err != nil {
			return PerfResult{}, err
		}
		totR += uint64(nr)
		if dur.sampling() {
			recvSamples += uint64(nr)
		}
		ns := p.scq.cq.Poll(swc)
		if err := s.completed(swc[:ns]); err != nil {
			return PerfResult{}, err
		}
		// Nothing on either CQ: spin a little, then arm both and poll
		// once more, then sleep until either handler fires, the alarm
		// ends the run, or Timeout passes without progress.
		if nr+ns > 0 {
			idle, lastProgress = 0, time.Now()
			continue
		}
		idle++
		switch {
		case idle < armAt:
			runtime.Gosched()
		case idle == armAt:
			p.rcq.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
			p.scq.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
		default:
			left := cfg.Timeout - time.Since(lastProgress)
			if left <= 0 {
				return PerfResult{}, fmt.Errorf("%s: %d of %d sends and %d of %d receives completed, then none in %v: %w",
					cfg.Test.Tool(), s.totC, s.tot, totR, s.tot, cfg.Timeout, unix.ETIMEDOUT)
			}
			if timer == nil {
				timer = time.NewTimer(left)
			} else {
				timer.Reset(left)
			}
			select {
			case <-p.rcq.notify:
			case <-p.scq.notify:
			case <-timer.C:
			case <-dur.done():
			}
			idle = armAt - 1 // re-arm before the next sleep
		}
	}
	return s.result(recvSamples), nil
}
