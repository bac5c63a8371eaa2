package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:    "pingpong",
		summary: "ibv_{rc,uc,ud,srq}_pingpong from an emulated HCA on a real segment: same flags, exchange and output",
		help:    pingpongHelp,
		run:     runPingpong,
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
// -o registers the buffer as an on-demand paging MR (rc and srq), after
// the tools' capability check; -O (implicit ODP) fails as the tools do on
// rxe, which has no implicit ODP; -P (prefetch, ibv_advise_mr) and -t -j
// -N (timestamps, device memory, new send API) are refused.

// modeFlag is pingpong's own long flag, taken out of the command line as
// the link flags are.
var modeFlag = linkFlag{name: "mode", arg: "MODE", help: "the tool: rc, uc, ud or srq (ibv_MODE_pingpong; default rc)", tool: true}

// pingpongSynopsis is the synopsis of "softroce pingpong --mode m",
// derived from the link flags' definitions and the tool's option table.
func pingpongSynopsis(m oob.PingpongMode) []string {
	words := append([]string{"--mode", m.String()}, linkSynopsis(true)...)
	words = append(words, oob.PingpongSynopsis(m)...)
	return append(words, "[SERVER]")
}

// pingpongHelp prints the usage of each mode, the link flags and what the
// tool's options mean.
func pingpongHelp(e *env) {
	w := e.stdout
	for m := oob.PingpongRC; m <= oob.PingpongSRQ; m++ {
		fmt.Fprintf(w, "%s\n\n", wrapWords(append([]string{"usage:", "softroce", "pingpong"}, pingpongSynopsis(m)...), 80, "\t"))
	}
	fmt.Fprintf(w, "%s\n\n  --%s %s\n    \t%s\n\nlink flags:\n", commands["pingpong"].summary, modeFlag.name, modeFlag.arg, modeFlag.help)
	printLinkFlags(w)
	fmt.Fprint(w, `
The tool's options are those of rdma-core's ibv_*_pingpong (see its man
page), with its defaults; without -g the GID of the first --ip address is
used. With SERVER this side is the client. -o registers the buffer as an
on-demand paging MR; -O fails as on rxe (no implicit ODP); -P -t -j -N are
refused.
`)
}

func runPingpong(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	mode := oob.PingpongRC
	modeArgs, rest, err := splitLongFlags(args, func(name string) *linkFlag {
		if name == "mode" {
			return &modeFlag
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(stderr, "softroce pingpong:", err)
		return errUsage
	}
	for _, a := range modeArgs {
		v := strings.TrimPrefix(a, "--mode=")
		m, err := oob.ParsePingpongMode(v)
		if err != nil {
			fmt.Fprintf(stderr, "softroce pingpong: --mode %q: rc, uc, ud or srq\n", v)
			return errUsage
		}
		mode = m
	}
	linkArgs, toolArgs, err := splitLinkArgs(rest)
	if err != nil {
		fmt.Fprintln(stderr, "softroce pingpong:", err)
		return errUsage
	}
	pc, err := oob.ParsePingpongFlags(mode, toolArgs)
	if err != nil {
		fmt.Fprintf(stderr, "softroce pingpong: %v\n%s\n", err, wrapWords(append([]string{"usage:", "softroce", "pingpong"}, pingpongSynopsis(mode)...), 80, "\t"))
		return errUsage
	}
	if pc.Prefetch {
		return fmt.Errorf("-P prefetches with ibv_advise_mr, which softroce does not serve yet: %w", unix.EOPNOTSUPP)
	}
	if pc.Timestamps || pc.DM || pc.NewSend {
		return fmt.Errorf("-t -j -N are not supported by softroce: %w", unix.EOPNOTSUPP)
	}
	n, seed, err := e.toolNode("pingpong", linkArgs, pc.IBDev)
	if err != nil {
		return err
	}
	defer n.Close()
	if pc.ODP {
		if err := checkODP(n.Device().Query().ODPCaps, mode, pc.ImplicitOD); err != nil {
			return err
		}
	}
	gidx, err := gidIndex(n, pc.GIDIndex)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	pp, err := workload.NewPingpong(n.Device(), workload.PingpongConfig{Mode: mode, Client: pc.Server != "",
		Size: pc.Size, Iters: pc.Iters, RxDepth: pc.RxDepth, NumQP: int(pc.NumQP), MTU: pc.MTU, SL: uint8(pc.SL), Port: uint32(pc.IBPort),
		GIDIndex: gidx, Check: pc.Check, ODP: pc.ODP, Resolver: resolver(n), Seed: seedFor(seed, "pingpong")})
	if err != nil {
		return err
	}
	defer pp.Close()
	for _, d := range pp.Local() {
		w.WriteString(oob.FormatPingpongAddress(mode, false, d))
	}
	w.Flush()
	conn, err := e.oobConn(pc.Server, pc.Port)
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

// checkODP is the tools' check before -o (pp_init_ctx): the device must
// have ODP and serve the mode's send and receive with it, and, for -O,
// implicit ODP; their messages.
func checkODP(c emu.ODPCaps, mode oob.PingpongMode, implicit bool) error {
	want, what := emu.ODPSupportSend|emu.ODPSupportRecv, "RC send and receive"
	if mode == oob.PingpongSRQ {
		want, what = want|emu.ODPSupportSRQRecv, "RC send, receive and srq"
	}
	if c.General&emu.ODPSupport == 0 || c.RC&want != want {
		return fmt.Errorf("The device isn't ODP capable or does not support %s with ODP", what)
	}
	if implicit && c.General&emu.ODPSupportImplicit == 0 {
		return errors.New("The device doesn't support implicit ODP")
	}
	return nil
}
