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
		usage:   "[-d rxe0] [link flags]",
		run:     runServe,
	})
}

// serveLinkFlags registers the link flags with serve's default device name.
func serveLinkFlags(fs *flag.FlagSet) *linkFlags {
	lf := addLinkFlags(fs)
	lf.dev = defaultServeName
	fs.Lookup("d").DefValue = defaultServeName
	return lf
}

// daemon is a running uverbsd.Server with its node.
type daemon struct {
	n      *node.Node
	srv    *uverbsd.Server
	served chan error
}

// startDaemon builds the node the flags describe and serves it in the
// device's directory.
func startDaemon(lf *linkFlags, dir string, stderr io.Writer) (*daemon, error) {
	n, err := lf.open(stderr)
	if err != nil {
		return nil, err
	}
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir})
	if err != nil {
		n.Close()
		return nil, err
	}
	d := &daemon{n: n, srv: srv, served: make(chan error, 1)}
	go func() { d.served <- srv.Serve() }()
	return d, nil
}

// stop closes the server (every client's File), then the node.
func (d *daemon) stop() error {
	err := d.srv.Close()
	err = errors.Join(err, <-d.served)
	return errors.Join(err, d.n.Close())
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

func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	lf := serveLinkFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
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
	d, err := startDaemon(lf, dir, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# softroce serves %s; run programs with `softroce run -d %s -- PROGRAM`, or in this environment:\n",
		lf.dev, lf.dev)
	fmt.Fprint(stdout, exportLines(d.srv.Env(so)))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-sig:
	case err := <-d.served:
		d.served <- err
	}
	return d.stop()
}
