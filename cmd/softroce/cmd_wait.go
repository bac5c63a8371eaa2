package main

import (
	"fmt"
	"time"

	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:    "wait",
		summary: "wait until a served device can be opened (its daemon started otherwise than with serve --background); non-zero with the reason after the timeout",
		run:     runWait,
	})
}

// defaultWaitTimeout is wait's and stop's default bound.
const defaultWaitTimeout = 30 * time.Second

func runWait(e *env) error {
	fs := newFlagSet(e, "wait")
	name := fs.String("d", defaultServeName, "the device `NAME`")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "give up after `D` (a Go duration: 500ms, 10s)")
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fmt.Fprintf(e.stderr, "softroce wait: unexpected argument %q\n", operands[0])
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(*name)
	if err != nil {
		return err
	}
	return uverbsd.WaitReady(dir, *timeout)
}
