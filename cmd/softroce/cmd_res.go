package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:     "res",
		summary:  "list a serving daemon's resources as rdma resource show does (cm_id)",
		operands: "[show] [cm_id] [KEY VALUE]...",
		run:      runRes,
	})
}

// resHelp follows -h.
const resHelp = `
Each line is one rdma_cm ID the daemon's programs hold, with the fields of
"rdma resource show cm_id": link DEV/PORT, cm-idn, lqpn and qp-type once
connect or accept named a QP, state, ps, pid, comm, src-addr, dst-addr.
KEY VALUE pairs keep the lines whose field KEY is VALUE; src-port and
dst-port match the port of src-addr and dst-addr.

examples:
  softroce res -d rxe0
  softroce res -d rxe0 show cm_id state LISTEN src-port 7174
`

// runRes asks the daemon serving -d for its resources and prints the
// lines the filters keep.
func runRes(e *env) error {
	fs := newFlagSet(e, "res")
	dev := fs.String("d", defaultServeName, "the device `NAME` of the serving daemon")
	flagUsage := fs.Usage
	fs.Usage = func() {
		flagUsage()
		io.WriteString(e.stderr, resHelp)
	}
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(operands) > 0 && operands[0] == "show" {
		operands = operands[1:]
	}
	if len(operands) > 0 && operands[0] == "cm_id" {
		operands = operands[1:]
	}
	if len(operands)%2 != 0 {
		fs.Usage()
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(*dev)
	if err != nil {
		return err
	}
	out, err := uverbsd.Control(dir, "res", "cm_id")
	if err != nil {
		return fmt.Errorf("res -d %s: %w", *dev, err)
	}
	for _, line := range strings.SplitAfter(out, "\n") {
		if line != "" && resLineMatches(line, operands) {
			if _, err := io.WriteString(e.stdout, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// resLineMatches reports whether every KEY VALUE pair of filters names a
// field of line with that value.
func resLineMatches(line string, filters []string) bool {
	f := strings.Fields(line)
	fields := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		fields[f[i]] = f[i+1]
	}
	for _, k := range []string{"src", "dst"} {
		if a, ok := fields[k+"-addr"]; ok {
			if i := strings.LastIndexByte(a, ':'); i >= 0 {
				fields[k+"-port"] = a[i+1:]
			}
		}
	}
	for i := 0; i+1 < len(filters); i += 2 {
		if v, ok := fields[filters[i]]; !ok || v != filters[i+1] {
			return false
		}
	}
	return true
}
