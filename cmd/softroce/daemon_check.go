package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/uverbsd"
)

// checkMode is --check: off, warn (report the findings) or fail (and
// softroce run exits non-zero on any).
type checkMode int

const (
	checkOff checkMode = iota
	checkWarn
	checkFail
)

func (m *checkMode) String() string {
	switch *m {
	case checkWarn:
		return "warn"
	case checkFail:
		return "fail"
	}
	return ""
}

// Set takes "warn", "fail", or "true" for a bare --check (warn).
func (m *checkMode) Set(v string) error {
	switch v {
	case "warn", "true":
		*m = checkWarn
	case "fail":
		*m = checkFail
	case "false", "off":
		*m = checkOff
	default:
		return fmt.Errorf("--check takes warn or fail, not %q", v)
	}
	return nil
}

func (m *checkMode) IsBoolFlag() bool { return true }

// ignoreFlag is --check-ignore NAME, repeatable.
type ignoreFlag struct{ names []check.Name }

func (f *ignoreFlag) String() string {
	var s []string
	for _, n := range f.names {
		s = append(s, string(n))
	}
	return strings.Join(s, ",")
}

func (f *ignoreFlag) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if _, ok := check.Lookup(check.Name(n)); !ok {
			var known []string
			for _, c := range check.Checks {
				known = append(known, string(c.Name))
			}
			return fmt.Errorf("no finding is named %q (the findings: %s)", n, strings.Join(known, ", "))
		}
		f.names = append(f.names, check.Name(n))
	}
	return nil
}

// checkFlags are the sanitizer's flags of serve and run.
type checkFlags struct {
	mode   checkMode
	out    string
	ignore ignoreFlag
}

func addCheckFlags(fs *flag.FlagSet) *checkFlags {
	cf := &checkFlags{}
	fs.Var(&cf.mode, "check", "check the programs' use of verbs (`MODE` warn, the default of a bare --check, or fail): leaked objects, QPs destroyed and MRs deregistered with WRs outstanding, CQ overflows, send queues never reclaimed, error completions ignored, posts to a QP in error; a report at each program's end (docs/testing-your-program.md); with fail, softroce run exits with status 66 when the program exited 0 but something was found")
	fs.StringVar(&cf.out, "check-out", "", "with --check, write the findings as JSON to `FILE` (run: the program's; serve: all, at its end)")
	fs.Var(&cf.ignore, "check-ignore", "with --check, do not report the finding `NAME` (repeatable, or comma-separated)")
	return cf
}

// checkFailStatus is softroce run's exit status under --check=fail when
// the program exited 0 and something was found.
const checkFailStatus = 66

// checkWait bounds how long run waits for the daemon to close the files
// of an ended program, whose findings come at their close.
const checkWait = 10 * time.Second

// daemonCheck is the findings of a daemon's programs.
type daemonCheck struct {
	set *check.Set
}

// newDaemonCheck returns the daemon's check per the flags (nil: off).
// serve reports each program at its end on stderr (report true).
func newDaemonCheck(cf *checkFlags, report bool, stderr io.Writer) (*daemonCheck, error) {
	if cf == nil || cf.mode == checkOff {
		return nil, nil
	}
	cfg := check.Config{Ignore: cf.ignore.names}
	if report {
		var mu sync.Mutex
		cfg.OnEnd = func(pid int, found []check.Finding) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stderr, "softroce: pid %d ended:\n", pid)
			check.WriteReport(stderr, found)
		}
	}
	set, err := check.NewSet(cfg)
	if err != nil {
		return nil, err
	}
	return &daemonCheck{set: set}, nil
}

// serverConfig has the server check its clients, and serves the control
// command "check [PID]": the findings (of PID and its descendants, once
// their files are closed) as JSON.
func (c *daemonCheck) serverConfig(cfg *uverbsd.Config) {
	if c == nil {
		return
	}
	cfg.Check = c.set
	if cfg.Control == nil {
		cfg.Control = map[string]uverbsd.ControlFunc{}
	}
	cfg.Control["check"] = func(args []string) (string, error) {
		found := c.set.All()
		switch len(args) {
		case 0:
		case 1:
			pid, err := strconv.Atoi(args[0])
			if err != nil || pid <= 0 {
				return "", fmt.Errorf("check: %q is no pid", args[0])
			}
			found = c.of(pid)
		default:
			return "", fmt.Errorf("check takes at most a pid")
		}
		var b bytes.Buffer
		if err := check.WriteJSON(&b, found); err != nil {
			return "", err
		}
		return b.String(), nil
	}
}

// of returns the findings of pid and its descendants once their files
// are closed (or checkWait passed).
func (c *daemonCheck) of(pid int) []check.Finding {
	for deadline := time.Now().Add(checkWait); c.set.Active(pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return c.set.Of(pid)
}

// writeOut writes found as JSON to path ("" nothing).
func writeCheckOut(path string, found []check.Finding) error {
	if path == "" {
		return nil
	}
	var b bytes.Buffer
	if err := check.WriteJSON(&b, found); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--check-out: %w", err)
	}
	return nil
}

// runCheckReport reports the findings of the program pid at its end
// (run --check): from the daemon run started (c), or asked of the
// serving daemon in dir. It returns the exit error run ends with: err,
// or with --check=fail and findings, checkFailStatus when err is nil.
func runCheckReport(cf *checkFlags, c *daemonCheck, dir string, pid int, err error, stderr io.Writer) error {
	if cf.mode == checkOff {
		return err
	}
	var found []check.Finding
	if c != nil {
		found = c.of(pid)
	} else {
		out, cerr := uverbsd.Control(dir, "check", strconv.Itoa(pid))
		if cerr != nil {
			fmt.Fprintf(stderr, "softroce run: --check: the serving daemon does not check (softroce serve --check): %v\n", cerr)
			if err == nil {
				err = &exitError{code: checkFailStatus}
			}
			return err
		}
		if found, cerr = check.ReadJSON(strings.NewReader(out)); cerr != nil {
			fmt.Fprintf(stderr, "softroce run: --check: %v\n", cerr)
		}
	}
	found = dropIgnored(found, cf.ignore.names)
	check.WriteReport(stderr, found)
	if werr := writeCheckOut(cf.out, found); werr != nil {
		fmt.Fprintf(stderr, "softroce run: %v\n", werr)
	}
	if err == nil && cf.mode == checkFail && len(found) > 0 {
		return &exitError{code: checkFailStatus}
	}
	return err
}

// dropIgnored returns found without the names ignored.
func dropIgnored(found []check.Finding, ignore []check.Name) []check.Finding {
	out := found[:0]
	for _, f := range found {
		keep := true
		for _, n := range ignore {
			if f.Name == n {
				keep = false
			}
		}
		if keep {
			out = append(out, f)
		}
	}
	return out
}
