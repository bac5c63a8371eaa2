package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:     "run",
		summary:  "run an unmodified libibverbs program on softroce (exit status: the program's)",
		operands: "-- PROGRAM [ARGS...]",
		run:      runRun,
	})
}

// startWait bounds how long run waits for a daemon that another softroce
// is starting on the name to become ready.
const startWait = 30 * time.Second

// serveOrWait returns nil when a daemon serves the name in dir (ready:
// its tree published, its socket accepting), waiting up to timeout for one
// that is starting; otherwise it starts one and returns it. A daemon that
// ends before it is ready (killed, or its start failed) leaves the name to
// the next try.
func serveOrWait(e *env, lf *linkFlags, df *daemonFlags, dir string, timeout time.Duration) (*daemon, error) {
	deadline := time.Now().Add(timeout)
	for {
		if uverbsd.Ready(dir) {
			return nil, nil
		}
		if _, held := uverbsd.Held(dir); !held {
			d, err := startDaemon(e, lf, df, dir)
			if !errors.Is(err, unix.EADDRINUSE) {
				return d, err
			}
			// Another softroce took the name meanwhile.
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, uverbsd.WaitReady(dir, 0)
		}
		// Wait for the starting daemon, a slice at a time: it may end
		// before it is ready, and the name is then to be taken.
		if err := uverbsd.WaitReady(dir, min(left, 100*time.Millisecond)); err == nil {
			return nil, nil
		}
	}
}

// runRun runs the program with the device's environment. Without -d, the
// daemon that serves the user's devices is used (every device it serves:
// a program lists them all); with none, rxe0 is served. A daemon already
// serving the name is used (--fault rules are added to it for the
// program's lifetime, --coverage writes its profile at the program's end;
// the link flags do not apply); otherwise one is served for the program's
// lifetime (and as long as other programs that found it keep the device
// open), on the link the flags describe (default: the in-memory link,
// where the device reaches its own GIDs). With --check the program's
// findings are reported at its end (from the serving daemon, which must
// check too: softroce serve --check).
func runRun(e *env) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet(e, "run")
	lf := serveLinkFlags(fs)
	df := addDaemonFlags(fs)
	df.devices = addDeviceFlags(fs, lf)
	prog, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(prog) == 0 {
		fs.Usage()
		return errUsage
	}
	if err := df.devices.check(); err != nil {
		fmt.Fprintf(stderr, "softroce run: %v\n", err)
		return errUsage
	}
	if !flagGiven(fs, "d") {
		// The daemon already serving the user's devices, all of them.
		serving, err := theServingDaemon("run")
		if err != nil {
			return err
		}
		if serving != "" {
			lf.dev = serving
		}
	}
	dir, err := uverbsd.DeviceDir(lf.dev)
	if err != nil {
		return err
	}
	so, err := preload.Path(preload.Config{})
	if err != nil {
		return err
	}
	d, err := serveOrWait(e, lf, df, dir, startWait)
	if err != nil {
		return err
	}
	shared := d == nil
	var chk *daemonCheck
	if d != nil {
		chk = d.check
	}
	if d != nil {
		defer func() {
			// Programs that found this daemon serving keep it until
			// they are done, as a device outlives the process that set
			// it up.
			for d.srv.Clients() > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			if err := d.stop(); err != nil {
				fmt.Fprintf(stderr, "softroce run: %v\n", err)
			}
		}()
	}
	if shared && (df.coverage != "" || len(df.faults.rules) > 0) {
		done, err := useServing(dir, df, stderr)
		if err != nil {
			return err
		}
		defer func() {
			if err := done(); err != nil {
				fmt.Fprintf(stderr, "softroce run: %v\n", err)
			}
		}()
	}
	cmd := exec.Command(prog[0], prog[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = programEnv(os.Environ(), uverbsd.Env(dir, so))
	// The terminal's signals reach the program (same process group); the
	// ones sent to softroce alone are passed on. Either way softroce
	// waits for the program and then stops its daemon.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case s := <-sig:
			cmd.Process.Signal(s)
			continue
		case err := <-waited:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					err = &exitError{code: 128 + int(ws.Signal())}
				} else {
					err = &exitError{code: ee.ExitCode()}
				}
			}
			// The findings come before the daemon stops (the deferred
			// stop above).
			return runCheckReport(df.check, chk, dir, cmd.Process.Pid, err, stderr)
		}
	}
}

// programEnv is base with the device's variables set; LD_PRELOAD keeps
// libraries already listed after the preload library, and base keeps its
// values of the defaults the user overrides (uverbsd.UserWins).
func programEnv(base, dev []string) []string {
	set := map[string]string{}
	for _, kv := range dev {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	var out []string
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		if nv, ok := set[k]; ok {
			if uverbsd.UserWins(k) {
				nv = v
			}
			if k == "LD_PRELOAD" && v != "" {
				nv += ":" + v
			}
			out = append(out, k+"="+nv)
			delete(set, k)
			continue
		}
		out = append(out, kv)
	}
	for _, kv := range dev {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := set[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}
