package main

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:    "stop",
		summary: "stop the daemon serving a device (SIGTERM, as softroce serve's own end) and wait until it has ended",
		run:     runStop,
	})
}

func runStop(e *env) error {
	fs := newFlagSet(e, "stop")
	name := fs.String("d", defaultServeName, "the device `NAME`")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "give up waiting for the daemon's end after `D` (a Go duration: 500ms, 10s)")
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fmt.Fprintf(e.stderr, "softroce stop: unexpected argument %q\n", operands[0])
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(*name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	pid, held := uverbsd.Held(dir)
	// A daemon that has just taken the name writes its pid next.
	for held && pid == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		pid, held = uverbsd.Held(dir)
	}
	if !held {
		return fmt.Errorf("%s: no daemon serves it: %w", *name, unix.ESRCH)
	}
	if pid == 0 {
		return fmt.Errorf("%s: its daemon did not say its pid within %v", *name, *timeout)
	}
	if err := unix.Kill(pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%s: SIGTERM to its daemon (pid %d): %w", *name, pid, err)
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		if _, held := uverbsd.Held(dir); !held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: its daemon (pid %d) has not ended within %v of SIGTERM: %w", *name, pid, *timeout, unix.ETIMEDOUT)
		}
		time.Sleep(delay)
	}
}
