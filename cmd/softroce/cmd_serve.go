package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

// defaultServeName is the device name of serve, run and env: librxe binds
// only to names starting with "rxe".
const defaultServeName = "rxe0"

func init() {
	register(command{
		name:    "serve",
		summary: "serve the emulated device to unmodified libibverbs programs (LD_PRELOAD, SYSFS_PATH)",
		run:     runServe,
	})
}

// serveLinkFlags registers the link flags with serve's default device name.
func serveLinkFlags(fs *flag.FlagSet) *linkFlags {
	lf := addLinkFlags(fs)
	lf.dev = defaultServeName
	fs.Lookup("d").DefValue = defaultServeName
	fs.Lookup("d").Usage = "the device `NAME` (the rxe provider serves only names starting with rxe)"
	return lf
}

// daemon is a running uverbsd.Server with its node.
type daemon struct {
	n      *node.Node
	extra  []*node.Node // the nodes of the devices after the first (-d repeated)
	fabric *link.Hub    // the in-memory fabric of several devices (nil: one)
	links  *daemonLinks // adds and deletes devices (extra, fabric: under its mu)
	srv    *uverbsd.Server
	served chan error
	cov    *daemonCoverage
	faults *daemonFaults
	check  *daemonCheck
	df     *daemonFlags
	stderr io.Writer
	report bool   // serve's: --check-out is all the findings
	atExit func() // run after the server ends, before the node closes (nil: nothing)
}

// startDaemon builds the node the flags describe and serves it in the
// device's directory, recording its coverage.
func startDaemon(e *env, lf *linkFlags, df *daemonFlags, dir string) (*daemon, error) {
	return startDaemonReporting(e, lf, df, dir, false)
}

// startDaemonReporting is startDaemon; with report, --check reports each
// program at its end (serve).
func startDaemonReporting(e *env, lf *linkFlags, df *daemonFlags, dir string, report bool) (*daemon, error) {
	chk, err := newDaemonCheck(df.check, report, e.stderr)
	if err != nil {
		return nil, err
	}
	cov := newDaemonCoverage(lf.dev)
	lf.recorder = cov.rec
	faults := newDaemonFaults(lf, cov, e.stderr)
	var fabric *link.Hub
	var extra []*node.Node
	if df.devices != nil {
		fabric = df.devices.newFabric()
	}
	n, err := e.openNode(lf)
	if err != nil {
		if fabric != nil {
			fabric.Close()
		}
		return nil, err
	}
	if fabric != nil {
		if extra, err = e.openFabric(df.devices); err != nil {
			n.Close()
			fabric.Close()
			return nil, err
		}
	}
	closeNodes := func() {
		for _, x := range extra {
			x.Close()
		}
		n.Close()
		if fabric != nil {
			fabric.Close()
		}
	}
	links := &daemonLinks{e: e, lf: lf}
	cfg := uverbsd.Config{Device: n.Device(), Dir: dir, Groups: n, Settle: n.Settle, OneWayDoorbells: df.oneWay, WatchPage: df.oneWay,
		PublishLater: true, HoldLock: true, Links: links}
	cov.serverConfig(&cfg)
	chk.serverConfig(&cfg)
	df.serverConfig(&cfg, e.stderr)
	faults.configure(n, &cfg)
	srv, err := uverbsd.New(cfg)
	if err != nil {
		faults.set.Close()
		closeNodes()
		return nil, err
	}
	for _, x := range extra {
		if err := srv.AddDevice(x.Device(), &uverbsd.DeviceConfig{Groups: x, Settle: x.Settle}); err != nil {
			srv.Close()
			faults.set.Close()
			closeNodes()
			srv.Unlock()
			return nil, err
		}
	}
	// The profile is the programs': what the daemon did to set the
	// device up (the MAD layer's QP1 brought to RTS) is not theirs.
	cov.rec.Reset()
	faults.mu.Lock()
	faults.syncDoorbells = srv.SetSyncDoorbells
	faults.mu.Unlock()
	if err := faults.add(df.faults.rules); err != nil {
		srv.Close()
		faults.set.Close()
		closeNodes()
		srv.Unlock()
		return nil, err
	}
	d := &daemon{n: n, extra: extra, fabric: fabric, links: links, srv: srv, served: make(chan error, 1), cov: cov, df: df, stderr: e.stderr, faults: faults, check: chk}
	links.mu.Lock()
	links.d = d
	links.mu.Unlock()
	go func() { d.served <- srv.Serve() }()
	// Set up: the device becomes visible, and openable from then on.
	if err := srv.Publish(); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// stop closes the server (every client's File), writes the coverage
// profile (--coverage), then closes the node.
func (d *daemon) stop() error {
	return d.finish(d.srv.Close())
}

// remove removes the device as the kernel removes an rxe device
// (uverbsd.Server.Remove): the programs that have it open get up to grace
// (or until now is closed) to close it, then IB_EVENT_DEVICE_FATAL and
// EIO. Then as stop.
func (d *daemon) remove(grace time.Duration, now <-chan struct{}) error {
	if n := d.srv.Clients(); n > 0 {
		fmt.Fprintf(d.stderr, "softroce serve: %s removed: waiting up to %v for the %d open files of it to be closed (a second SIGTERM ends the wait)\n",
			d.n.Device().Name(), grace, n)
	}
	left := d.srv.Clients()
	inTime, err := d.srv.Remove(grace, now)
	if !inTime {
		fmt.Fprintf(d.stderr, "softroce serve: %s: %d files still open: IB_EVENT_DEVICE_FATAL on their async event files, their calls fail with EIO from now on\n",
			d.n.Device().Name(), left)
	}
	return d.finish(err)
}

// finish ends the daemon after its server: the coverage profile
// (--coverage) written, then the node closed.
func (d *daemon) finish(err error) error {
	if d.atExit != nil {
		d.atExit()
	}
	d.faults.set.Close()
	err = errors.Join(err, <-d.served)
	err = errors.Join(err, d.cov.write(d.df.coverage, d.n.Device(), d.stderr))
	if d.check != nil && d.report {
		err = errors.Join(err, writeCheckOut(d.df.check.out, d.check.set.All()))
	}
	err = errors.Join(err, d.n.Close())
	d.links.mu.Lock()
	for _, x := range d.extra {
		err = errors.Join(err, x.Close())
	}
	if d.fabric != nil {
		err = errors.Join(err, d.fabric.Close())
	}
	d.links.mu.Unlock()
	// The name is free once all of the daemon's end is done.
	return errors.Join(err, d.srv.Unlock())
}

// exportLines formats env as shell export lines.
func exportLines(env []string) string {
	var b strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:,=@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func runServe(e *env) error {
	stdout := e.stdout
	fs := newFlagSet(e, "serve")
	lf := serveLinkFlags(fs)
	df := addDaemonFlags(fs)
	df.devices = addDeviceFlags(fs, lf)
	grace := fs.Duration("grace", 10*time.Second, "on SIGTERM or SIGINT (softroce stop), wait at most `D` for the programs that have the device open to close it, as the kernel waits when an rxe device is removed; then they get IB_EVENT_DEVICE_FATAL and EIO (a second signal ends the wait at once)")
	background := fs.Bool("background", false, "return once the device can be opened, with the export lines printed (exit status 0), leaving the daemon running in the background (its output in the log file it names; softroce stop -d NAME ends it); non-zero with the reason when it cannot start")
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fmt.Fprintf(e.stderr, "softroce serve: unexpected argument %q\n", operands[0])
		return errUsage
	}
	if err := df.devices.check(); err != nil {
		fmt.Fprintf(e.stderr, "softroce serve: %v\n", err)
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(lf.dev)
	if err != nil {
		return err
	}
	so, err := preload.Path(preload.Config{})
	if err != nil {
		return err
	}
	ready, readyErr := backgroundChild()
	if *background && ready == nil {
		return serveBackground(e, lf.dev, dir, so)
	}
	if readyErr != nil {
		return readyErr
	}
	d, err := startDaemonReporting(e, lf, df, dir, true)
	if err != nil {
		return err
	}
	d.report = true
	if names := df.devices.names(); len(names) > 1 {
		fmt.Fprintf(stdout, "# softroce serves %s on one fabric; run programs with `softroce run -d %s -- PROGRAM` (or `softroce run -- PROGRAM`), or in this environment:\n",
			strings.Join(names, ", "), lf.dev)
	} else {
		fmt.Fprintf(stdout, "# softroce serves %s; run programs with `softroce run -d %s -- PROGRAM`, or in this environment:\n",
			lf.dev, lf.dev)
	}
	fmt.Fprint(stdout, exportLines(d.srv.Env(so)))
	if ready != nil {
		ready(dir)
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-sig:
	case err := <-d.served:
		d.served <- err
	}
	// The device goes; the programs on it get the grace period, which a
	// second signal ends.
	now := make(chan struct{})
	removed := make(chan struct{})
	defer close(removed)
	go func() {
		select {
		case <-sig:
			close(now)
		case <-removed:
		}
	}()
	// What the device counted in its life, as `softroce stats` prints it
	// (on --udp with the link's unverifiable ICRCs), for the CI log, once
	// the programs are gone.
	d.atExit = func() {
		if st, err := nodeStats(d.n); err == nil {
			fmt.Fprintf(e.stderr, "softroce serve: %s's counters at exit:\n", lf.dev)
			writeStats(e.stderr, lf.dev, 1, st)
		}
	}
	return d.remove(*grace, now)
}
