package workload

import (
	"fmt"
	"runtime"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// latDuration is the latency row of a duration run (print_report_lat_duration):
// the window over the samples (and over 2 for the ping-pong tests, whose
// samples are round trips' halves), and samples per second.
func (p *Perf) latDuration(size, samples uint64, s *sampler) PerfResult {
	r := oob.LatDurationReport{Size: size, Iters: samples}
	if w := s.window(); samples > 0 && w > 0 {
		rtt := 1.0
		if v := p.cfg.Test.Verb(); v == oob.VerbSend || v == oob.VerbWrite {
			rtt = 2
		}
		r.TAvg = float64(w.Microseconds()) / rtt / float64(samples)
		r.TPS = float64(samples) / w.Seconds()
	}
	return PerfResult{LatDuration: r, Measured: true}
}

// runReadLat is run_iter_lat for READ and atomics: one WR at a time,
// stamped at post, waited for; in a duration run, until the alarm's end,
// counting the completions of the window.
func (p *Perf) runReadLat(size uint64) (PerfResult, error) {
	cfg := p.cfg
	dur := p.newSampler()
	var tposted []int64
	if dur == nil {
		tposted = make([]int64, cfg.Iters)
	}
	now := clockFrom(time.Now())
	wc := make([]emu.WC, 1)
	var samples uint64
	total := cfg.Iters
	if dur != nil {
		total = 0
	}
	dur.arm()
	defer dur.cancel()
	for k := uint64(0); dur != nil && !dur.ended() || dur == nil && k < cfg.Iters; k++ {
		wr, slot := p.sendWR(0, k, size, true)
		if dur == nil {
			tposted[k] = now()
		}
		if _, err := p.qps[0].PostSend([]emu.SendWR{wr}); err != nil {
			return PerfResult{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", k, err)
		}
		p.sent[0]++
		if cfg.Test.Verb() == oob.VerbAtomic && !cfg.CompareSwap {
			p.atomCount[0][slot]++
		}
		n, err := p.scq.waitOr(wc, cfg.Timeout, p.what("client", k, total), dur.done())
		if err != nil {
			return PerfResult{}, err
		}
		if n == 0 {
			break // the alarm's end
		}
		if wc[0].Status != emu.WCSuccess {
			return PerfResult{}, perfWCError(&wc[0])
		}
		if dur.sampling() {
			samples++
		}
	}
	if dur != nil {
		return p.latDuration(size, samples, dur), nil
	}
	return PerfResult{Lat: LatencyStats(size, tposted, 1), Measured: true}, nil
}

// runPingLat is run_iter_lat_send and run_iter_lat_write: one side sends
// first — the client in send_lat, the server in write_lat (perftest's
// "!(scnt < 1 && machine == SERVER)" there against "== CLIENT" in
// send_lat) — and each side waits for the peer's message (a receive
// completion, or for write_lat the last byte of its remote half turning
// into the message count) before it sends the next, stamping each post.
// In a duration run both go on until the alarm's end: write_lat arms it
// at once and counts its send completions in the window, send_lat arms it
// at the first receive and counts the receives.
func (p *Perf) runPingLat(size uint64) (PerfResult, error) {
	cfg := p.cfg
	iters := cfg.Iters
	dur := p.newSampler()
	defer dur.cancel()
	var tposted []int64
	if dur == nil {
		tposted = make([]int64, iters)
	}
	now := clockFrom(time.Now())
	write := cfg.Test == oob.PerftestWriteLat
	recvFlag := p.half(0, true)[size-1 : size]
	sendFlag := p.half(0, false)
	swc, rwc := make([]emu.WC, cfg.TxDepth), make([]emu.WC, 1)
	first := cfg.Client != write // this side sends first
	var scnt, rcnt, outstanding, samples uint64
	if write {
		dur.arm()
	}
	more := func(n uint64) bool { return dur != nil && !dur.ended() || dur == nil && n < iters }
	for more(scnt) || more(rcnt) {
		if more(rcnt) && !(scnt < 1 && first) {
			rcnt++
			if write {
				ok, err := p.waitByte(recvFlag, byte(rcnt), rcnt, dur)
				if err != nil {
					return PerfResult{}, err
				}
				if !ok {
					break
				}
			} else {
				n, err := p.rcq.waitOr(rwc, cfg.Timeout, p.what("receive", rcnt-1, iters), dur.done())
				if err != nil {
					return PerfResult{}, err
				}
				if n == 0 {
					break
				}
				if rwc[0].Status != emu.WCSuccess {
					return PerfResult{}, perfWCError(&rwc[0])
				}
				dur.arm()
				if dur.sampling() {
					samples++
				}
				p.rposted[0]--
				if err := p.received(0, size); err != nil {
					return PerfResult{}, err
				}
				if err := p.postRecv(0, 1); err != nil {
					return PerfResult{}, err
				}
			}
		}
		if !more(scnt) || dur.ended() {
			continue
		}
		for outstanding >= uint64(cfg.TxDepth) && !dur.ended() {
			n, err := p.reap(swc, &outstanding, scnt, iters, dur)
			if err != nil {
				return PerfResult{}, err
			}
			if write && dur.sampling() {
				samples += uint64(n)
			}
		}
		if dur.ended() {
			break
		}
		wr, _ := p.sendWR(0, scnt, size, true)
		if dur == nil {
			tposted[scnt] = now()
		}
		scnt++
		if write {
			sendFlag[size-1] = byte(scnt)
		}
		if _, err := p.qps[0].PostSend([]emu.SendWR{wr}); err != nil {
			return PerfResult{}, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		p.sent[0]++
		outstanding++
	}
	for outstanding > 0 && !dur.ended() {
		if _, err := p.reap(swc, &outstanding, scnt, iters, dur); err != nil {
			return PerfResult{}, err
		}
	}
	if dur != nil {
		return p.latDuration(size, samples, dur), nil
	}
	return PerfResult{Lat: LatencyStats(size, tposted, 2), Measured: true}, nil
}

// reap waits for send completions of a latency test (every WR is
// signaled), takes them off *outstanding and returns how many; scnt WRs
// were posted. The end of a duration run (dur) ends the wait with 0.
func (p *Perf) reap(wc []emu.WC, outstanding *uint64, scnt, iters uint64, dur *sampler) (int, error) {
	n, err := p.scq.waitOr(wc, p.cfg.Timeout, p.what("send", scnt-*outstanding, iters), dur.done())
	if err != nil {
		return 0, err
	}
	for j := range wc[:n] {
		if wc[j].Status != emu.WCSuccess {
			return 0, perfWCError(&wc[j])
		}
	}
	*outstanding -= uint64(n)
	return n, nil
}

// waitByte polls a byte of the remote half until the peer's WRITE sets it
// to want, as write_lat polls its receive buffer: no completion tells a
// responder that a WRITE landed. It yields between polls and sleeps once
// the wait gets long; after Timeout it fails with ETIMEDOUT. It returns
// false, with no error, when the duration run dur ends first.
func (p *Perf) waitByte(b []byte, want byte, n uint64, dur *sampler) (bool, error) {
	if readFlag(b) == want {
		return true, nil
	}
	deadline := time.Now().Add(p.cfg.Timeout)
	for spins := 0; ; spins++ {
		if readFlag(b) == want {
			return true, nil
		}
		if dur.ended() {
			return false, nil
		}
		if spins < 1024 {
			runtime.Gosched()
			continue
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("%s: write %d of the peer never arrived in %v: %w", p.cfg.Test.Tool(), n, p.cfg.Timeout, unix.ETIMEDOUT)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// readFlag reads a byte the device may be writing, as write_lat's volatile
// poll does: a plain load of a flag; the data behind it is compared only
// after a completion or a post has synchronized with the device.
func readFlag(b []byte) byte { return b[0] }
