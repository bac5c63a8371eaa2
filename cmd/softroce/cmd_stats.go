package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/softroce/softroce/node"
)

func init() {
	register(command{
		name:    "stats",
		summary: "print the device's counters as `rdma statistic show` does",
		run:     runStats,
	})
}

// stat is one named counter value.
type stat struct {
	name  string
	value uint64
}

// nodeStats returns the port 1 counters of n's device in the kernel's
// order (rxe_hw_counters.c: rxe's fifteen, the byte counters of Linux 7.2
// on --kernel 7.3, then the driver's softroce_ extras), followed by softroce's
// extras outside the device, all prefixed "softroce_": the port's
// bad_pkey_cntr and qkey_viol_cntr, what the IP host dropped, and RoCE
// frames lost to a full device queue; on a UDP link, instead of the
// host's, the link's: datagrams in and out, IPv4 frames whose ICRC could
// not be verified (the sender's IP identification is not visible to a
// socket: see package link/udp), datagrams dropped, sends that failed.
func nodeStats(n *node.Node) ([]stat, error) {
	dev := n.Device()
	hs, err := dev.AllocHWPortStats(1)
	if err != nil {
		return nil, err
	}
	dev.GetHWStats(hs, 1)
	out := make([]stat, 0, len(hs.Descs)+8)
	for i, d := range hs.Descs {
		out = append(out, stat{d.Name, hs.Value[i]})
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	ns := n.Stats()
	if n.Host() == nil { // a UDP link: the kernel is the IP host
		return append(out,
			stat{"softroce_bad_pkey", uint64(pa.BadPKeyCntr)},
			stat{"softroce_bad_qkey", uint64(pa.QKeyViolCntr)},
			stat{"softroce_udp_rx_frames", ns.UDP.RxFrames},
			stat{"softroce_udp_tx_frames", ns.UDP.TxFrames},
			stat{"softroce_udp_unverifiable_icrc", ns.UDP.Unverifiable},
			stat{"softroce_udp_rx_dropped", ns.UDP.RxDropped},
			stat{"softroce_udp_tx_errors", ns.UDP.TxErrors},
		), nil
	}
	return append(out,
		stat{"softroce_bad_pkey", uint64(pa.BadPKeyCntr)},
		stat{"softroce_bad_qkey", uint64(pa.QKeyViolCntr)},
		stat{"softroce_host_rx_frames", ns.Host.RxFrames},
		stat{"softroce_host_not_for_us", ns.Host.NotForUs},
		stat{"softroce_host_malformed", ns.Host.Malformed},
		stat{"softroce_host_unhandled", ns.Host.Unhandled},
		stat{"softroce_host_tx_errors", ns.Host.TxErrors},
		stat{"softroce_rx_queue_drops", ns.RoCEQueueDrops},
	), nil
}

// runStats builds the device, optionally keeps it on its link for a while
// (answering ARP and ping, counting what arrives), and prints its counters.
// Equivalent to: `rdma statistic show link softroce0/1` (with --json,
// `rdma -j statistic show link softroce0/1`).
func runStats(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "stats")
	asJSON := fs.Bool("json", false, "print JSON as `rdma -j statistic show` does")
	dur := fs.Duration("for", 0, "stay on the link for `DURATION` before printing")
	lf := addLinkFlags(fs)
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) > 0 {
		fmt.Fprintf(stderr, "softroce stats: unexpected argument %q\n", operands[0])
		return errUsage
	}
	if *dur < 0 {
		fmt.Fprintf(stderr, "softroce stats: --for %v: a duration to stay on the link cannot be negative\n", *dur)
		return errUsage
	}
	n, err := e.openNode(lf)
	if err != nil {
		return err
	}
	defer n.Close()
	if *dur > 0 {
		time.Sleep(*dur)
	}
	st, err := nodeStats(n)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	if *asJSON {
		writeStatsJSON(w, n.Name(), 1, st)
	} else {
		writeStats(w, n.Name(), 1, st)
	}
	return w.Flush()
}

// writeStats prints one line as `rdma statistic show link DEV/PORT`:
// "link DEV/PORT name value name value ...".
func writeStats(w io.Writer, dev string, port int, st []stat) {
	fmt.Fprintf(w, "link %s/%d", dev, port)
	for _, s := range st {
		fmt.Fprintf(w, " %s %d", s.name, s.value)
	}
	fmt.Fprintln(w)
}

// writeStatsJSON prints the JSON array `rdma -j statistic show` prints:
// one object per port with ifname, port and the counters, in order.
func writeStatsJSON(w io.Writer, dev string, port int, st []stat) {
	name, _ := json.Marshal(dev)
	fmt.Fprintf(w, `[{"ifname":%s,"port":%d`, name, port)
	for _, s := range st {
		k, _ := json.Marshal(s.name)
		fmt.Fprintf(w, `,%s:%d`, k, s.value)
	}
	fmt.Fprintln(w, "}]")
}
