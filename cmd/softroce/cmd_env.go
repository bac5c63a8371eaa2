package main

import (
	"fmt"

	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:    "env",
		summary: "print the export lines that put programs on a served device (LD_PRELOAD, SYSFS_PATH, SOFTROCE_SOCK)",
		run:     runEnv,
	})
}

func runEnv(e *env) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet(e, "env")
	name := fs.String("d", defaultServeName, "the `NAME` of the daemon's device (its first); without -d, the daemon that serves the user's devices, all of them")
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fmt.Fprintf(stderr, "softroce env: unexpected argument %q\n", operands[0])
		return errUsage
	}
	if !flagGiven(fs, "d") {
		serving, err := theServingDaemon("env")
		if err != nil {
			return err
		}
		if serving != "" {
			*name = serving
		}
	}
	dir, err := uverbsd.DeviceDir(*name)
	if err != nil {
		return err
	}
	so, err := preload.Path(preload.Config{})
	if err != nil {
		return err
	}
	if !uverbsd.Ready(dir) {
		fmt.Fprintf(stderr, "softroce env: no daemon serves %s yet (start `softroce serve -d %s`)\n", *name, *name)
	}
	fmt.Fprint(stdout, exportLines(uverbsd.Env(dir, so)))
	return nil
}
