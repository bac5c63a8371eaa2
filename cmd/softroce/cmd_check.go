package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:     "check",
		summary:  "report the findings of softroce's RDMA sanitizer (run and serve --check): a --check-out file's, or a serving daemon's so far (exit status 66 with --fail and findings)",
		operands: "FILE... | --live [-d NAME]",
		run:      runCheck,
	})
}

// runCheck prints the report of the findings in the --check-out files
// given, or with --live those the daemon serving -d has found so far
// (its programs' that ended and its live ones').
func runCheck(e *env) error {
	fs := newFlagSet(e, "check")
	live := fs.Bool("live", false, "ask the daemon serving -d (softroce serve --check, softroce run --check) for its findings so far")
	dev := fs.String("d", defaultServeName, "the device `NAME` of the daemon --live asks")
	asJSON := fs.Bool("json", false, "print the findings as JSON (the --check-out format)")
	fail := fs.Bool("fail", false, "exit with status 66 when there is any finding")
	list := fs.Bool("list", false, "list every finding softroce knows, with its rule and its fix")
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if *list {
		for _, c := range check.Checks {
			fmt.Fprintf(e.stdout, "%s (%s)\n  %s\n", c.Name, c.Rule, c.Explain)
		}
		return nil
	}
	if len(operands) == 0 && !*live || len(operands) > 0 && *live {
		fs.Usage()
		return errUsage
	}
	var found []check.Finding
	for _, path := range operands {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		more, err := check.ReadJSON(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		found = append(found, more...)
	}
	if *live {
		dir, err := uverbsd.DeviceDir(*dev)
		if err != nil {
			return err
		}
		out, err := uverbsd.Control(dir, "check")
		if err != nil {
			return fmt.Errorf("check --live -d %s: %w (does it serve with --check?)", *dev, err)
		}
		if found, err = check.ReadJSON(strings.NewReader(out)); err != nil {
			return err
		}
	}
	if *asJSON {
		err = check.WriteJSON(e.stdout, found)
	} else {
		err = check.WriteReport(e.stdout, found)
	}
	if err != nil {
		return err
	}
	if *fail && len(found) > 0 {
		return &exitError{code: checkFailStatus}
	}
	return nil
}
