package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/rping"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:    "rping",
		summary: "librdmacm's rping from an emulated HCA on a real segment: RDMA CM connection, same flags, protocol and output",
		help:    rpingHelp,
		run:     runRping,
	})
}

// rpingHelp prints the synopsis derived from rping's option table and the
// link flags' definitions, then rping's own usage text.
func rpingHelp(e *env) {
	w := e.stdout
	words := append(append([]string{"usage:", "softroce", "rping", "-s|-c"}, linkSynopsis(true)...), rping.Synopsis()...)
	fmt.Fprintf(w, "%s\n\n%s\n\nlink flags:\n", wrapWords(words, 80, "\t"), commands["rping"].summary)
	printLinkFlags(w)
	fmt.Fprintf(w, "\nrping's options (--dev NAME names the device; -I, -P, -q and -t are refused):\n%s", rping.Usage)
}

// runRping is "softroce rping": rdma-core 44's rping (package rping: its
// options, protocol and output), connected by softroce's Communication
// Manager (package cma, the one the daemon serves librdmacm with: CM MADs
// on QP1, service ID of RDMA_PS_TCP port -p, default 7174) instead of the
// kernel's rdma_cm, so either side can be the real rping on rxe.
//
// Differences: -I, -P, -q and -t are refused; -d is rping's debug flag,
// so the device is named with --dev.
func runRping(e *env) error {
	linkArgs, toolArgs, err := splitLinkArgs(e.args)
	if err != nil {
		fmt.Fprintln(e.stderr, "softroce rping:", err)
		return errUsage
	}
	o, err := rping.ParseFlags(toolArgs)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		var ue *rping.UsageError
		if errors.As(err, &ue) {
			fmt.Fprint(e.stdout, rping.Usage)
		}
		return &exitError{code: int(unix.EINVAL)}
	}
	n, seed, err := e.toolNode("rping", linkArgs, o.Dev)
	if err != nil {
		return err
	}
	defer n.Close()
	cm, err := cma.New(cma.Config{Dev: n.Device(), Seed: seedFor(seed, "cma")})
	if err != nil {
		return err
	}
	defer cm.Close()
	err = rping.Run(rping.Config{Dev: n.Device(), CM: cm, Stdout: e.stdout, Stderr: e.stderr,
		Ready: func(port int) {
			if e.serverReady != nil {
				e.serverReady(&net.TCPAddr{Port: port})
			}
		}}, o)
	if errors.Is(err, rping.ErrFailed) {
		return &exitError{code: 255}
	}
	return err
}
