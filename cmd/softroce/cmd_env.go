package main

import (
	"fmt"
	"io"

	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:    "env",
		summary: "print the export lines that put programs on a served device (LD_PRELOAD, SYSFS_PATH, SOFTROCE_SOCK)",
		usage:   "[-d rxe0]",
		run:     runEnv,
	})
}

func runEnv(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("env", stderr)
	name := fs.String("d", defaultServeName, "the device `NAME`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(*name)
	if err != nil {
		return err
	}
	so, err := preload.Path(preload.Config{})
	if err != nil {
		return err
	}
	if !uverbsd.Serving(dir) {
		fmt.Fprintf(stderr, "softroce env: no daemon serves %s yet (start `softroce serve -d %s`)\n", *name, *name)
	}
	fmt.Fprint(stdout, exportLines(uverbsd.Env(dir, so)))
	return nil
}
