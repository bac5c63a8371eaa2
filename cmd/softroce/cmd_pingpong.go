package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:    "pingpong",
		summary: "ibv_{rc,uc,ud,srq}_pingpong from an emulated HCA on a real segment: same flags, exchange and output",
		usage: "--mode rc|uc|ud|srq [--tap NAME|--iface NAME] [--bridge BR] --ip CIDR [--mac MAC] [--mtu N] [--pcap FILE] [--nodad]\n" +
			"\t[the tool's options: -p PORT -d DEV -i PORT -s SIZE -m MTU -r RX -n ITERS -l SL -e -g GIDX -c -q NQP] [SERVER]",
		run: runPingpong,
	})
}

// runPingpong is "softroce pingpong": rdma-core 44's ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong or ibv_srq_pingpong, chosen by --mode
// (default rc), with the tool's options (package oob's getopt_long parser
// and defaults) plus softroce's link flags. The address exchange runs over
// TCP through the host kernel (-p, default 18515; with SERVER this side is
// the client); the RoCE traffic leaves from softroce's own MAC and --ip
// address on the link. Either side may be the real tool.
//
// Differences from the tools: without -g the GID of the first --ip address
// is used (the tools would send no GRH, which RoCE refuses); the client
// retries its TCP connect for a few seconds; a wait for a completion gives
// up after 10 s instead of hanging (UC and UD lose messages under loss).
// -o -O -P -t -j -N (ODP, timestamps, device memory, new send API) are
// refused.

func runPingpong(args []string, stdout, stderr io.Writer) error {
	mode := oob.PingpongRC
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--mode" && i+1 < len(args):
			i++
			a = "--mode=" + args[i]
			fallthrough
		case len(a) > 7 && a[:7] == "--mode=":
			m, err := oob.ParsePingpongMode(a[7:])
			if err != nil {
				fmt.Fprintf(stderr, "softroce pingpong: --mode %q: rc, uc, ud or srq\n", a[7:])
				return errUsage
			}
			mode = m
		default:
			rest = append(rest, a)
		}
	}
	linkArgs, toolArgs, err := splitLinkArgs(rest)
	if err != nil {
		fmt.Fprintln(stderr, "softroce pingpong:", err)
		return errUsage
	}
	pc, err := oob.ParsePingpongFlags(mode, toolArgs)
	if err != nil {
		fmt.Fprintf(stderr, "softroce pingpong: %v\nusage: softroce pingpong %s\n", err, commands["pingpong"].usage)
		return errUsage
	}
	if pc.ODP || pc.ImplicitOD || pc.Prefetch || pc.Timestamps || pc.DM || pc.NewSend {
		return fmt.Errorf("-o -O -P -t -j -N are not supported by softroce: %w", unix.EOPNOTSUPP)
	}
	n, err := toolNode("pingpong", linkArgs, pc.IBDev, stderr)
	if err != nil {
		return err
	}
	defer n.Close()
	gidx, err := gidIndex(n, pc.GIDIndex)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	pp, err := workload.NewPingpong(n.Device(), workload.PingpongConfig{Mode: mode, Client: pc.Server != "",
		Size: pc.Size, Iters: pc.Iters, RxDepth: pc.RxDepth, NumQP: int(pc.NumQP), MTU: pc.MTU, SL: uint8(pc.SL),
		GIDIndex: gidx, Check: pc.Check, Resolver: resolver(n), Seed: uint64(n.MAC()[5]) << 32})
	if err != nil {
		return err
	}
	defer pp.Close()
	for _, d := range pp.Local() {
		w.WriteString(oob.FormatPingpongAddress(mode, false, d))
	}
	w.Flush()
	conn, err := oobConn(pc.Server, pc.Port, serverReady)
	if err != nil {
		return err
	}
	defer conn.Close()
	var remote []oob.PingpongDest
	if pc.Server != "" {
		if remote, err = oob.PingpongClientExchange(conn, mode, pp.Local()); err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
	} else {
		if remote, err = oob.PingpongServerExchange(conn, mode, pp.Local(), pp.Connect); err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
	}
	for _, d := range remote {
		w.WriteString(oob.FormatPingpongAddress(mode, true, d))
	}
	w.Flush()
	if pc.Server != "" {
		if err := pp.Connect(remote); err != nil {
			return err
		}
	}
	// The peer's last send completes when this side's ACK for it is on
	// the wire; closing the device (deferred) writes what it has queued
	// before the link goes, as the kernel's destroy path drains rxe's
	// tasks.
	res, err := pp.Run()
	if err != nil {
		return err
	}
	w.WriteString(res.Lines())
	if len(res.InvalidPages) > 0 {
		w.Flush()
		return &exitError{code: 1}
	}
	return nil
}
