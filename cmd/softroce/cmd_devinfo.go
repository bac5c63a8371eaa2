package main

import (
	"bufio"
	"fmt"

	"github.com/softroce/softroce/devinfo"
)

func init() {
	register(command{
		name:    "devinfo",
		summary: "print the device's attributes and GID table as ibv_devinfo does",
		run:     runDevinfo,
	})
}

// runDevinfo builds the device on the link the flags give and prints it in
// the layout of rdma-core 44's ibv_devinfo (libibverbs/examples/devinfo.c).
// Equivalent to: `ibv_devinfo -d softroce0 [-v]` on a machine with `rdma
// link add softroce0 type rxe netdev DEV`, followed by a line naming the
// kernel whose rxe the device is (--kernel).
func runDevinfo(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "devinfo")
	verbose := fs.Bool("v", false, "print all the attributes, the GID table included")
	list := fs.Bool("l", false, "print only the device name")
	port := fs.Int("i", 0, "print only `PORT` (default all ports)")
	lf := addLinkFlags(fs)
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) > 0 || *port < 0 {
		fs.Usage()
		return errUsage
	}
	if *port > 1 { // rxe has one port (phys_port_cnt 1)
		fmt.Fprintln(stderr, "Invalid port requested for device")
		return &exitError{code: 4}
	}
	n, err := e.openNode(lf)
	if err != nil {
		return err
	}
	defer n.Close()
	w := bufio.NewWriter(stdout)
	if *list {
		fmt.Fprintf(w, "1 HCA found:\n\t%s\n\n", n.Device().Name())
		return w.Flush()
	}
	if err := devinfo.Write(w, n.Device(), *verbose, uint32(*port)); err != nil {
		w.Flush()
		return err
	}
	// Not ibv_devinfo's: which kernel's rxe this is (--kernel), after
	// everything the tool prints.
	fmt.Fprintf(w, "softroce: the rxe of Linux %v\n", n.Kernel())
	return w.Flush()
}
