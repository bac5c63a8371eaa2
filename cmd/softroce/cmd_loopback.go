package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:    "loopback",
		summary: "run a pingpong or perftest workload between two emulated HCAs in this process, data verified",
		run:     runLoopback,
	})
}

// loopbackOpts is the command line of "softroce loopback".
type loopbackOpts struct {
	test                        string
	size                        uint64
	sizeSet                     bool // -s given (0 is refused, not the default)
	all                         bool
	iters                       uint64
	duration                    int
	bidirectional               bool
	mtu                         int
	qps                         int
	txDepth, rxDepth            int
	check                       bool
	gbits                       bool
	loss, dup, reorder, corrupt float64
	seed                        uint64
	seedSet                     bool
	pcap                        string
	timeout                     time.Duration
	qpTimeout                   uint
	coverage                    string
	coalesceACKs                bool
	kernel                      rxe.Kernel
}

// runLoopback is "softroce loopback": rxe0 (10.0.0.1) and rxe1 (10.0.0.2)
// on an in-memory link, no root and no network touched. rxe0 is the client
// (the side the real tools give a server name), rxe1 the server. Output:
// the tool's lines (pingpong's address and result lines, or perftest's
// header block and result rows), then each device's nonzero counters and,
// with faults, what the injectors did. Every run checks the data it moved;
// a mismatch, an error completion or a timeout exits 1.
//
// Faults apply to both directions. RC retransmits, so it must deliver
// exactly; UC and UD do not, and a pingpong that loses a message stalls
// just as the real tool would: the stall is reported after --timeout
// (default 1s for them when faults are on) and the command exits 1,
// saying so.
func runLoopback(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	var o loopbackOpts
	fs := newFlagSet(e, "loopback")
	fs.StringVar(&o.test, "test", "write_bw", "the `WORKLOAD`: rc, uc, ud, srq (pingpong) or a perftest test (write_bw, ..., atomic_lat)")
	fs.Func("s", "message `SIZE` in bytes, at least 1 (default: the tool's: pingpong 4096 (ud 1024), BW 65536, latency 2, atomics 8)",
		func(v string) error {
			n, err := strconv.ParseUint(v, 0, 64)
			o.size, o.sizeSet = n, true
			return err
		})
	fs.BoolVar(&o.all, "a", false, "perftest: run every size 2..2^23 (powers of two; with the default -n that moves ~16 GB, try -n 20)")
	fs.Uint64Var(&o.iters, "n", 1000, "`ITERS`: pingpong exchanges, perftest messages per QP")
	fs.IntVar(&o.duration, "D", 0, "perftest: run for `SECS` seconds instead of -n (duration mode; the margin is D/4)")
	fs.BoolVar(&o.bidirectional, "b", false, "perftest BW tests: run both ways at once")
	fs.IntVar(&o.mtu, "m", 1024, "path `MTU` in bytes: 256, 512, 1024, 2048 or 4096")
	fs.IntVar(&o.qps, "q", 0, "`QPS`: perftest BW tests (default 1), srq pingpong (default 16)")
	fs.IntVar(&o.txDepth, "t", 0, "perftest `TXDEPTH` (default 128 BW, 1 latency)")
	fs.IntVar(&o.rxDepth, "r", 0, "receive depth `RXDEPTH` (default pingpong 500, perftest 512)")
	fs.BoolVar(&o.check, "c", false, "pingpong: fill and validate the -c pattern of the tools")
	fs.BoolVar(&o.gbits, "report_gbits", false, "perftest: report bandwidth in Gb/sec")
	fs.Float64Var(&o.loss, "loss", 0, "fraction `F` of frames dropped, each direction (e.g. 0.05)")
	fs.Float64Var(&o.dup, "dup", 0, "fraction `F` of frames duplicated")
	fs.Float64Var(&o.reorder, "reorder", 0, "fraction `F` of frames held back behind the next one")
	fs.Float64Var(&o.corrupt, "corrupt", 0, "fraction `F` of frames with one bit flipped (dropped by the ICRC check)")
	fs.Func("seed", "`SEED` of the fault injectors, PSNs, keys and buffer contents (default: random; the run prints it). "+
		"It replays the identities and the data exactly, and the fault decision for the n-th frame; "+
		"retransmissions follow the real clock, so which frames there are, and the fault counts, vary from run to run",
		func(v string) error {
			n, err := strconv.ParseUint(v, 0, 64)
			o.seed, o.seedSet = n, true
			return err
		})
	fs.StringVar(&o.pcap, "pcap", "", "write every frame (both directions) to the pcap `FILE`")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up when a wait for a completion lasts `DURATION` (default 10s; 1s for uc and ud with faults)")
	fs.StringVar(&o.coverage, "coverage", "", "write the run's coverage profile (both devices) to `FILE` (read it with softroce coverage)")
	fs.BoolVar(&o.coalesceACKs, "coalesce-acks", false, coalesceACKsHelp)
	fs.Func("kernel", strings.Replace(kernelHelp, "VERSION", "`VERSION`", 1), func(v string) error {
		k, err := rxe.ParseKernel(v)
		o.kernel = k
		return err
	})
	fs.UintVar(&o.qpTimeout, "qp-timeout", 0, "RC local ACK timeout exponent `N`: 4.096µs·2^N (default 14, 10 with faults)")
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fmt.Fprintf(stderr, "softroce loopback: unexpected argument %q\n", operands[0])
		return errUsage
	}
	return o.run(stdout)
}

func (o *loopbackOpts) faulty() bool { return o.loss+o.dup+o.reorder+o.corrupt > 0 }

func (o *loopbackOpts) run(stdout io.Writer) (err error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"loss", o.loss}, {"dup", o.dup}, {"reorder", o.reorder}, {"corrupt", o.corrupt}} {
		if !(f.v >= 0 && f.v <= 1) { // NaN fails both comparisons
			return fmt.Errorf("--%s %v: not a fraction in [0, 1]: %w", f.name, f.v, unix.EINVAL)
		}
	}
	if o.sizeSet && o.size == 0 {
		// As perftest (and ibv_srq_pingpong) refuse -s 0 rather than
		// run their default size.
		return fmt.Errorf("-s 0: the message size should be between 1 and 8388608: %w", unix.EINVAL)
	}
	mtu := ib.MTUFromBytes(o.mtu)
	if !mtu.IsValid() || mtu.Bytes() != o.mtu {
		return fmt.Errorf("-m %d: the MTU is 256, 512, 1024, 2048 or 4096: %w", o.mtu, unix.EINVAL)
	}
	if o.timeout == 0 {
		o.timeout = 10 * time.Second
		if o.faulty() && (o.test == "uc" || o.test == "ud") {
			o.timeout = time.Second // a lost message stalls them for good
		}
	}
	if o.qpTimeout == 0 {
		o.qpTimeout = 14
		if o.faulty() {
			o.qpTimeout = 10 // 4 ms: retries without waiting 67 ms per loss
		}
	}
	if !o.seedSet {
		o.seed = randomSeed()
	}
	cfg := workload.LoopbackConfig{Seed: o.seed, CoalesceACKs: o.coalesceACKs, Kernel: o.kernel}
	if o.faulty() {
		cfg.Faults = &link.FaultConfig{Seed: o.seed, Drop: o.loss, Duplicate: o.dup, Reorder: o.reorder, Corrupt: o.corrupt}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if o.pcap != "" {
		f, err := os.Create(o.pcap)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		defer func() {
			if ferr := bw.Flush(); err == nil && ferr != nil {
				err = ferr
			}
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
		cfg.Capture = bw
	}
	var cov *coverage.Collector
	if o.coverage != "" {
		cov = coverage.NewCollector()
		for i := range cfg.Recorders {
			cfg.Recorders[i] = cov.Recorder(fmt.Sprintf("rxe%d", i))
		}
	}
	lb, err := workload.NewLoopback(cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Counters are read before the devices go away; the report
		// follows whatever the run printed, error or not, and so does
		// the coverage profile.
		var cs [2][]workload.Counter
		cs[0], _ = workload.Counters(lb.A.Dev)
		cs[1], _ = workload.Counters(lb.B.Dev)
		if cov != nil {
			cov.ReadCounters(lb.A.Dev)
			cov.ReadCounters(lb.B.Dev)
		}
		lb.Close()
		o.report(w, lb, cs)
		if cov != nil {
			if cerr := coverage.WriteFile(o.coverage, cov.Profile()); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	if m, perr := oob.ParsePingpongMode(o.test); perr == nil {
		return o.pingpong(w, lb, m, mtu)
	}
	t, perr := oob.ParsePerftestTest(o.test)
	if perr != nil {
		return fmt.Errorf("--test %q: not rc, uc, ud, srq or a perftest test: %w", o.test, unix.EINVAL)
	}
	return o.perf(w, lb, t, mtu)
}

// faultLegend says what the fault counts mean, after them.
const faultLegend = "faults: counts of frames each side wrote (both directions inject); " +
	"lost: frames held back to be reordered that never went out because the link closed first (not drops)"

// report prints the counters of both devices (nonzero ones, as `rdma
// statistic show` names them), the injectors' stats and the capture size.
func (o *loopbackOpts) report(w io.Writer, lb *workload.Loopback, counters [2][]workload.Counter) {
	for i, cs := range counters {
		fmt.Fprintf(w, "rxe%d counters:", i)
		for _, c := range cs {
			fmt.Fprintf(w, " %s %d", c.Name, c.Value)
		}
		fmt.Fprintln(w)
	}
	for i, s := range []*workload.LoopbackSide{lb.A, lb.B} {
		if s.Flt == nil {
			continue
		}
		st := s.Flt.Stats()
		fmt.Fprintf(w, "rxe%d faults: frames %d dropped %d duplicated %d reordered %d corrupted %d lost %d\n",
			i, st.Frames, st.Dropped, st.Duplicated, st.Reordered, st.Corrupted, st.Lost)
		if i == 1 {
			fmt.Fprintln(w, faultLegend)
		}
	}
	fmt.Fprintf(w, "seed %#x (--seed %#x replays the PSNs, keys, data and fault decisions)\n", o.seed, o.seed)
	if o.pcap != "" {
		n, err := lb.Captured()
		if err != nil {
			fmt.Fprintf(w, "pcap %s: %d frames, then: %v\n", o.pcap, n, err)
		} else {
			fmt.Fprintf(w, "pcap %s: %d frames\n", o.pcap, n)
		}
	}
}

func (o *loopbackOpts) pingpong(w *bufio.Writer, lb *workload.Loopback, m oob.PingpongMode, mtu ib.MTU) error {
	if o.all {
		return fmt.Errorf("-a is a perftest option: %w", unix.EINVAL)
	}
	if o.iters > 1<<31 || o.size > 1<<31 {
		return fmt.Errorf("-n %d / -s %d too large for pingpong: %w", o.iters, o.size, unix.EINVAL)
	}
	cfg := workload.PingpongConfig{Mode: m, Size: uint32(o.size), Iters: uint32(o.iters), RxDepth: uint32(o.rxDepth),
		NumQP: o.qps, MTU: mtu, GIDIndex: workload.LoopbackGIDIndex, Check: o.check, Timeout: o.timeout,
		QPTimeout: uint8(o.qpTimeout), Seed: o.seed}
	// The client's buffer gets seeded random bytes (then the -c pattern,
	// with -c) so that the final comparison proves the data crossed.
	rng := rand.New(rand.NewPCG(o.seed, 0x70696e67))
	cfg.Fill = func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	cl, sv, err := lb.Pingpong(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	defer sv.Close()
	for _, d := range cl.Local() {
		w.WriteString(oob.FormatPingpongAddress(m, false, d))
	}
	for _, d := range sv.Local() {
		w.WriteString(oob.FormatPingpongAddress(m, true, d))
	}
	type result struct {
		r   workload.PingpongResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := sv.Run()
		done <- result{r, err}
	}()
	rc, errc := cl.Run()
	rs := <-done
	if err := errors.Join(cl.Stop(), sv.Stop()); err != nil {
		return err
	}
	if errc == nil {
		w.WriteString(rc.Lines())
	}
	if rs.err == nil {
		fmt.Fprintf(w, "server: %s", strings.ReplaceAll(strings.TrimSuffix(rs.r.Lines(), "\n"), "\n", "\nserver: "))
		w.WriteString("\n")
	}
	if err := errors.Join(errc, rs.err); err != nil {
		if o.faulty() && m != oob.PingpongRC && m != oob.PingpongSRQ && errors.Is(err, unix.ETIMEDOUT) {
			return fmt.Errorf("%w\n%s does not retransmit: a message lost to the injected faults stalls the pingpong, as it would stall %s",
				err, strings.ToUpper(m.String()), m.Tool())
		}
		return err
	}
	if len(rs.r.InvalidPages) > 0 {
		return fmt.Errorf("server found invalid data in %d page(s): %w", len(rs.r.InvalidPages), unix.EIO)
	}
	if !bytes.Equal(sv.Data(), cl.Data()) {
		return fmt.Errorf("data check: the server's buffer differs from the client's: %w", unix.EIO)
	}
	w.WriteString("data check: ok (both buffers hold the client's message)\n")
	return nil
}

func (o *loopbackOpts) perf(w *bufio.Writer, lb *workload.Loopback, t oob.PerftestTest, mtu ib.MTU) error {
	sizes := []uint64{o.size}
	maxSize := o.size
	if t.Verb() == oob.VerbAtomic {
		if o.size != 0 && o.size != 8 || o.all {
			return fmt.Errorf("Message size cannot be changed for Atomic tests: %w", unix.EINVAL)
		}
		sizes, maxSize = []uint64{8}, 8
	} else if o.all {
		sizes = nil
		for s := uint64(2); s <= 1<<23; s <<= 1 {
			sizes = append(sizes, s)
		}
		maxSize = 1 << 23
	} else if o.size == 0 {
		sizes[0] = oob.PerftestDefaults(t).Size
		maxSize = sizes[0]
	}
	if maxSize > 1<<23 {
		return fmt.Errorf("-s %d: at most 8388608 (perftest's limit): %w", maxSize, unix.EINVAL)
	}
	if o.iters < 5 {
		return fmt.Errorf("-n %d: perftest needs at least 5 iterations: %w", o.iters, unix.EINVAL)
	}
	switch {
	case o.duration < 0:
		return fmt.Errorf("-D %d: Duration period must be positive: %w", o.duration, unix.EINVAL)
	case o.duration > 0 && o.all:
		return fmt.Errorf("-D with -a: Duration mode currently doesn't support running on all sizes: %w", unix.EINVAL)
	case o.bidirectional && !t.IsBW():
		return fmt.Errorf("-b: Bidirectional is only available in BW test: %w", unix.EINVAL)
	}
	dur := time.Duration(o.duration) * time.Second
	cfg := workload.PerfConfig{Test: t, MaxSize: maxSize, Iters: o.iters, TxDepth: o.txDepth, RxDepth: o.rxDepth,
		NumQP: o.qps, MTU: mtu, GIDIndex: workload.LoopbackGIDIndex, QPTimeout: uint8(o.qpTimeout),
		Gbits: o.gbits, Timeout: o.timeout, Seed: o.seed, Duration: dur, Margin: dur / 4 / time.Second * time.Second,
		Bidirectional: o.bidirectional}
	cl, sv, err := lb.Perf(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	defer sv.Close()
	fc := cl.Config()
	pc := oob.PerftestDefaults(t)
	pc.NumQP, pc.TxDepth, pc.RxDepth, pc.Iters, pc.MTU = fc.NumQP, fc.TxDepth, fc.RxDepth, fc.Iters, fc.MTU
	pc.Bidirectional = o.bidirectional
	w.WriteString(oob.FormatPerftestInfo(oob.PerftestInfo{Test: t, Client: true, Device: "rxe0", Config: pc,
		MTUBytes: mtu.Bytes(), LinkEthernet: true, GIDIndex: workload.LoopbackGIDIndex, OutReads: fc.OutReads,
		CQModeration: fc.CQMod, TransportType: "IB"}))
	for i, d := range cl.Local() {
		w.WriteString(oob.FormatPerftestAddress(t.Verb(), false, d, true))
		w.WriteString(oob.FormatPerftestAddress(t.Verb(), true, sv.Local()[i], true))
	}
	w.WriteString(oob.PerftestResultLine)
	switch {
	case t.IsBW():
		w.WriteString(oob.FormatPerftestBWHeader(o.gbits))
	case o.duration > 0:
		w.WriteString(oob.FormatPerftestLatDurationHeader())
	default:
		w.WriteString(oob.FormatPerftestLatHeader())
	}
	w.Flush()
	for _, size := range sizes {
		type result struct {
			r   workload.PerfResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := sv.Run(size)
			done <- result{r, err}
		}()
		rc, errc := cl.Run(size)
		rs := <-done
		if err := errors.Join(errc, rs.err); err != nil {
			return fmt.Errorf("size %d: %w", size, err)
		}
		if err := workload.VerifyPerf(cl, sv); err != nil {
			return fmt.Errorf("size %d: data check: %w", size, err)
		}
		switch {
		case t.IsBW() && o.bidirectional && !(o.duration > 0 && t.Verb() == oob.VerbSend):
			// The client's count, both sides' rates (perftest's
			// report exchange).
			w.WriteString(oob.FormatPerftestBWReport(rc.BW.Plus(rs.r.BW)))
		case t.IsBW():
			w.WriteString(oob.FormatPerftestBWReport(rc.BW))
		case o.duration > 0:
			w.WriteString(oob.FormatPerftestLatDurationReport(rc.LatDuration))
		default:
			w.WriteString(oob.FormatPerftestLatReport(rc.Lat))
		}
		w.Flush()
	}
	w.WriteString(oob.PerftestResultLine)
	fmt.Fprintf(w, "data check: ok (%s)\n", verifiedWhat(t, sv.ChecksEachMessage()))
	return nil
}

func verifiedWhat(t oob.PerftestTest, each bool) string {
	switch t.Verb() {
	case oob.VerbWrite:
		return "the server's memory holds the client's data in every slot written"
	case oob.VerbRead:
		return "the client's memory holds the server's data in every slot read"
	case oob.VerbSend:
		if each {
			return "every message received equals the one sent, none missing"
		}
		return "the receive buffer holds the last message sent"
	default:
		return "every counter of the server moved by exactly the fetch-and-adds posted to it"
	}
}
