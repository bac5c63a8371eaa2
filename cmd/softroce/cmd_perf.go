package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:     "perf",
		summary:  "perftest's ib_{write,read,send,atomic}_{bw,lat} from an emulated HCA on a real segment",
		operands: "TEST",
		help:     perfHelp,
		run:      runPerf,
	})
}

// runPerf is "softroce perf TEST": perftest 4.5's tool for TEST with its
// options (package oob's parser and defaults) plus softroce's link flags;
// its out-of-band exchange over TCP (-p, default 18515; with SERVER this
// side is the client) and its header block and result rows. The RoCE
// traffic leaves from softroce's own MAC and --ip address, so either side
// may be the real ib_*_bw / ib_*_lat.
//
// -a (sizes 2..2^23) runs as perftest's write_bw and read_bw run it: the
// client prints a row per size, the server (idle, as in every
// unidirectional BW test) prints the last size's report after the single
// report exchange. -D SECS runs perftest's duration mode (each side's
// alarm, the window between the margins -f, default SECS/4; rows of the
// window's count, BW peak 0.00, the latency tools' "t_avg tps" row); -b
// runs a BW test both ways, each side printing its own count and the sum
// of both sides' rates (send_bw -b -D: its own sends and receives).
//
// -c UC (write and send tests) connects UC QPs: no ACKs, no retries, and
// perftest's receive depth rule for UC and UD (an -r left at 512 becomes
// min(iters, 16000) in iterations mode). -c UD (send tests) sends
// datagrams to an address handle per peer QP with perftest's Q_Key
// 0x11111111 and receives them behind the 40-byte GRH; as check_mtu does,
// a size above the settled path MTU becomes the MTU (" Max msg size in UD
// is MTU N" on stderr) unless -s asked for it (then the tool's refusal and
// exit 1, after the MTU exchange). --use-srq (send tests) shares one SRQ,
// -r deep, among the QPs of a side that receives, -r/-q receives posted
// for each QP; the address message's SRQ number stays 0 as perftest's
// does. -l N (BW tests) chains N WRs in each post, every CQMod-th
// signaled (the CQ moderation becomes N unless -Q is given; perftest's
// "Post List requested" line and its checks). -e (read, send and atomic
// tests) waits for each completion on the CQ's completion handler instead
// of polling first (with -D it is refused, as the tool refuses it).
// --odp registers the buffers as on-demand paging MRs; perftest 4.5 refuses
// it with atomics and with -c UC, and so does perf.
//
// Option errors print the tool's message and exit 1 as the tool does. Not
// supported (refused with a message): -a with the other tests or with -b,
// -R, -z, -c XRC, DC and SRD, --report-per-port, -C, -H, -U. Without -x
// the GID of the first --ip address is used.
// perfTests is the synopsis of perf's first operand.
const perfTests = "write_bw|read_bw|send_bw|atomic_bw|write_lat|read_lat|send_lat|atomic_lat"

// perfHelp prints the usage of every test (its options from its option
// table), the link flags and what differs from perftest.
func perfHelp(e *env) {
	w := e.stdout
	for t := oob.PerftestWriteBW; t.IsValid(); t++ {
		words := append([]string{"usage:", "softroce", "perf", t.String()}, linkSynopsis(true)...)
		words = append(words, oob.PerftestSynopsis(t)...)
		fmt.Fprintf(w, "%s\n\n", wrapWords(append(words, "[SERVER]"), 80, "\t"))
	}
	fmt.Fprintf(w, "%s\n\nlink flags:\n", commands["perf"].summary)
	printLinkFlags(w)
	fmt.Fprint(w, `
The tool's options are perftest's (see ib_write_bw --help), with its
defaults; without -x the GID of the first --ip address is used. With SERVER
this side is the client. Refused: -a with other tests than write_bw and
read_bw or with -b, -R, -z, -c XRC|DC|SRD, --report-per-port, -C, -H, -U.
`)
}

func runPerf(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	if len(args) == 0 {
		fmt.Fprintf(stderr, "usage: softroce perf %s\n", perfTests)
		return errUsage
	}
	test, err := oob.ParsePerftestTest(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "softroce perf: %v\nusage: softroce perf %s ...\n", err, perfTests)
		return errUsage
	}
	linkArgs, toolArgs, err := splitLinkArgs(args[1:])
	if err != nil {
		fmt.Fprintln(stderr, "softroce perf:", err)
		return errUsage
	}
	pc, err := oob.ParsePerftestFlags(test, toolArgs)
	var fe *oob.PerftestFlagError
	if errors.As(err, &fe) {
		// The tool's own refusal, on its streams, with its status.
		o, e := fe.Output()
		io.WriteString(stdout, o)
		io.WriteString(stderr, e)
		return &exitError{code: 1}
	}
	if err != nil {
		fmt.Fprintf(stderr, "softroce perf: %v\n", err)
		return errUsage
	}
	io.WriteString(stdout, pc.WarningText())
	for _, u := range []struct {
		bad  bool
		what string
	}{
		{pc.All && test != oob.PerftestWriteBW && test != oob.PerftestReadBW, "-a (all sizes) with " + test.String()},
		{pc.All && pc.Bidirectional, "-a (all sizes) with -b"},
		{pc.RDMACM || pc.ComRDMACM, "-R/-z (RDMA CM)"}, {pc.Connection != "RC" && pc.Connection != "UC" && pc.Connection != "UD", "-c " + pc.Connection},
		{pc.ReportPerPort, "--report-per-port"},
		{pc.ReportCycles || pc.ReportHistogram || pc.ReportUnsorted, "-C/-H/-U"},
	} {
		if u.bad {
			return fmt.Errorf("%s is not supported by softroce perf: %w", u.what, unix.EOPNOTSUPP)
		}
	}
	n, seed, err := e.toolNode("perf", linkArgs, pc.IBDev)
	if err != nil {
		return err
	}
	defer n.Close()
	gidx, err := gidIndex(n, pc.GIDIndex)
	if err != nil {
		return err
	}
	client := pc.Server != ""
	sizes := []uint64{pc.Size}
	if pc.All {
		sizes = sizes[:0]
		for s := uint64(2); s <= 1<<23; s <<= 1 {
			sizes = append(sizes, s)
		}
	}
	qpType := qpstate.TypeRC
	switch pc.Connection {
	case "UC":
		qpType = qpstate.TypeUC
	case "UD":
		qpType = qpstate.TypeUD
	}
	p, err := workload.NewPerf(n.Device(), workload.PerfConfig{Test: test, QPType: qpType, Client: client, MaxSize: sizes[len(sizes)-1],
		Iters: pc.Iters, TxDepth: pc.TxDepth, RxDepth: pc.RxDepth, NumQP: pc.NumQP, OutReads: pc.OutReads,
		CQMod: pc.CQMod, MTU: pc.MTU, GIDIndex: gidx, SL: uint8(pc.SL), QPTimeout: uint8(pc.QPTimeout),
		InlineSize: max(pc.InlineSize, 0), CompareSwap: pc.AtomicType == "CMP_AND_SWAP", NoPeak: pc.NoPeak,
		Gbits: pc.ReportGbits, Resolver: resolver(n), Seed: seedFor(seed, "perf"),
		Duration: time.Duration(pc.Duration) * time.Second, Margin: time.Duration(max(pc.Margin, 0)) * time.Second,
		Bidirectional: pc.Bidirectional, PerformWarmUp: pc.PerformWarmUp, UseSRQ: pc.UseSRQ, ODP: pc.ODP,
		PostList: pc.PostList, Events: pc.Events})
	if err != nil {
		return err
	}
	defer p.Close()
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	conn, err := e.oobConn(pc.Server, pc.Port)
	if err != nil {
		return err
	}
	defer conn.Close()
	role := oob.PerftestServer
	if client {
		role = oob.PerftestClient
	}
	c, err := oob.NewPerftestConn(conn, role)
	if err != nil {
		return err
	}
	fc := p.Config()
	params := oob.PerftestParams{Test: test, MTU: fc.MTU, WithGID: true, DontXchgVersions: pc.DontXchgVersions,
		Duplex: pc.Bidirectional, Duration: pc.Duration > 0}
	var udErr *oob.PerftestFlagError
	setup, err := oob.PerftestConnect(c, params, p.Local(), func(s *oob.PerftestSetup) error {
		// check_mtu: a UD message is one packet of the settled MTU.
		msg, err := pc.FitUDSize(s.MTU.Bytes())
		io.WriteString(stderr, msg)
		if errors.As(err, &udErr) {
			return err
		}
		sizes[len(sizes)-1] = min(sizes[len(sizes)-1], pc.Size)
		p.SetPathMTU(s.MTU)
		return p.Connect(s.Remote)
	})
	if udErr != nil {
		o, e := udErr.Output()
		io.WriteString(stdout, o)
		io.WriteString(stderr, e+" Couldn't get context for the device\n")
		return &exitError{code: 1}
	}
	if err != nil {
		return fmt.Errorf("Unable to connect the HCA's through the link: %w", err)
	}
	params.MTU = setup.MTU
	pc.NumQP, pc.TxDepth, pc.RxDepth, pc.MTU = fc.NumQP, fc.TxDepth, fc.RxDepth, setup.MTU
	w.WriteString(oob.FormatPerftestInfo(oob.PerftestInfo{Test: test, Client: client, Device: n.Name(), Config: pc,
		MTUBytes: setup.MTU.Bytes(), LinkEthernet: true, GIDIndex: gidx, InlineSize: fc.InlineSize,
		OutReads: fc.OutReads, CQModeration: fc.CQMod, TransportType: "IB"}))
	// Every tool prints all its QPs' addresses, then all the peer's.
	for _, d := range p.Local() {
		w.WriteString(oob.FormatPerftestAddress(test.Verb(), false, d, true))
	}
	for _, d := range setup.Remote {
		w.WriteString(oob.FormatPerftestAddress(test.Verb(), true, d, true))
	}
	w.WriteString(oob.PerftestResultLine)
	// The read_lat and atomic_lat servers only serve: after the addresses
	// they close the connection and print nothing more (no header, no row).
	run := oob.PerftestRun{Test: test, Client: client, Bidirectional: pc.Bidirectional, Duration: pc.Duration > 0,
		AllSizes: len(sizes) > 1}
	w.WriteString(oob.FormatPerftestResultHeader(run, pc.ReportGbits))
	w.Flush()
	var res workload.PerfResult
	for _, size := range sizes {
		if res, err = p.Run(size); err != nil {
			return err
		}
		if client && test.IsBW() && len(sizes) > 1 {
			w.WriteString(oob.FormatPerftestBWReport(res.BW))
			w.Flush()
		}
	}
	rem, err := oob.PerftestFinish(c, params, p.Local()[0], res.BW)
	if err != nil {
		return fmt.Errorf("Failed to close connection between server and client: %w", err)
	}
	if !oob.PerftestFlowFor(params).Close {
		awaitPeerExit(conn, fc.Timeout)
	}
	run.Measured, run.BW, run.Remote, run.Lat, run.LatDuration = res.Measured, res.BW, rem, res.Lat, res.LatDuration
	w.WriteString(oob.FormatPerftestResult(run))
	return nil
}

// awaitPeerExit keeps this side, and so its responder that acknowledges
// the peer's WRITEs, until the peer closes the out-of-band connection, at
// most timeout: for write_lat, whose exchange ends with no close hand
// shake. Each side of a duration run stops on its own alarm; the real
// tool's loop, once it has posted, waits for that WRITE's completion
// without looking at its alarm, so a side that vanished first would leave
// the peer retrying its last WRITE. It half-closes first, so two softroce
// sides each see the other's end of file.
func awaitPeerExit(conn net.Conn, timeout time.Duration) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(timeout))
	io.Copy(io.Discard, conn)
}
