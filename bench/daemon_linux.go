//go:build linux

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

// daemonName is the device the daemon rows serve (librxe binds only to
// names that start with "rxe").
const daemonName = "rxebench"

// daemonAddr is the daemon's address: its GID index 1 (::ffff:10.78.0.1).
var daemonAddr = netip.MustParsePrefix("10.78.0.1/24")

// runDaemon measures Debian's ib_write_bw and ib_send_lat on a daemon
// (in-memory link, MTU 4200 so that the active MTU is 4096) against the
// in-process RC WRITE (MTU 4096, 64 KiB messages) and RC pingpong of the
// Go API and against the socket round trip's floor (socketFloor),
// alternating rounds and keeping the best of each; the same tools with
// one-way doorbells (a second daemon on the device) beside them.
func runDaemon(ctx context.Context, o *Options) ([]Row, error) {
	for _, tool := range []string{"ib_write_bw", "ib_send_lat"} {
		if _, err := exec.LookPath(tool); err != nil {
			return daemonRows("needs Debian's perftest (" + tool + ")"), nil
		}
	}
	so, err := preload.Path(preload.Config{})
	if err != nil {
		return daemonRows("needs a C compiler for the preload library"), nil
	}
	tmp, err := os.MkdirTemp("", "softroce-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, daemonName)
	n, err := node.New(ctx, node.Config{Name: daemonName, MTU: pipeMTU, NoDAD: true, Addrs: []netip.Prefix{daemonAddr}})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir, Settle: n.Settle})
	if err != nil {
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	defer func() { srv.Close(); <-served }()
	env := append(os.Environ(), uverbsd.Env(dir, so)...)
	dir1 := filepath.Join(tmp, "oneway", daemonName)
	srv1, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir1, Settle: n.Settle, NoRDMACM: true, OneWayDoorbells: true, WatchPage: true})
	if err != nil {
		return nil, err
	}
	served1 := make(chan error, 1)
	go func() { served1 <- srv1.Serve() }()
	defer func() { srv1.Close(); <-served1 }()
	env1 := append(os.Environ(), uverbsd.Env(dir1, so)...)
	set, err := check.NewSet(check.Config{})
	if err != nil {
		return nil, err
	}
	dir2 := filepath.Join(tmp, "check", daemonName)
	srv2, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir2, Settle: n.Settle, NoRDMACM: true, Check: set})
	if err != nil {
		return nil, err
	}
	served2 := make(chan error, 1)
	go func() { served2 <- srv2.Serve() }()
	defer func() { srv2.Close(); <-served2 }()
	env2 := append(os.Environ(), uverbsd.Env(dir2, so)...)

	iters := 2000
	if o.Quick {
		iters = 200
	}
	wc := writeCase{ib.MTU4096, 64 << 10, 16}
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU, QueueLen: 1024})
	wp, err := newPair(&Options{}, ea, eb, pipeMTU, wc.mtu)
	if err != nil {
		return nil, err
	}
	defer wp.close()
	wp.a.spin, wp.b.spin = inprocSpin, inprocSpin
	la, lb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU})
	lp, err := newPair(&Options{}, la, lb, pipeMTU, ib.MTU1024)
	if err != nil {
		return nil, err
	}
	defer lp.close()
	lp.a.spin, lp.b.spin = inprocSpin, inprocSpin
	if err := warmUp(o, wp, wc, func() uint64 { return ea.Stats().TxFrames }, func() uint64 { return eb.Stats().TxFrames }); err != nil {
		return nil, err
	}

	bw, inBW := [3]float64{}, 0.0
	lat, inLat := [3]time.Duration{1 << 62, 1 << 62, 1 << 62}, time.Duration(1<<62)
	floor, idleFloor := time.Duration(1<<62), time.Duration(1<<62)
	envs := [3][]string{env, env1, env2}
	for range o.rounds() {
		for i, env := range envs {
			out, err := perftest(ctx, env, "ib_write_bw", "-s", "65536", "-n", strconv.Itoa(iters), "--report_gbits")
			if err != nil {
				return nil, err
			}
			v, err := perftestResult(out, 3) // BW average[Gb/sec]
			if err != nil {
				return nil, err
			}
			if !(v > 0 && v < 1e6) { // not a rate (NaN), as t_typical below
				o.logf("daemon: ib_write_bw reported %v Gb/s, ignored", v)
				continue
			}
			bw[i] = max(bw[i], v)
		}
		nb, el, err := wp.writeLoop(wc.msg, wc.depth, o.round())
		if err != nil {
			return nil, err
		}
		inBW = max(inBW, gbps(nb, el))

		for i, env := range envs {
			out, err := perftest(ctx, env, "ib_send_lat", "-s", "64", "-n", strconv.Itoa(iters))
			if err != nil {
				return nil, err
			}
			v, err := perftestResult(out, 4) // t_typical[usec]
			if err != nil {
				return nil, err
			}
			// perftest was seen to print a t_typical that is not a
			// Duration (NaN, or past its range: the row then read
			// -9223372036854776 us): such a round counts for nothing.
			if !(v > 0 && v < 1e9) {
				o.logf("daemon: ib_send_lat reported t_typical %v us, ignored", v)
				continue
			}
			lat[i] = min(lat[i], time.Duration(v*1000))
		}
		rtts, err := lp.pingpong(64, iters)
		if err != nil {
			return nil, fmt.Errorf("in-process RC pingpong: %w", err)
		}
		inLat = min(inLat, percentile(rtts, 0.5))
		f, err := socketFloor(iters, 2)
		if err != nil {
			return nil, err
		}
		floor = min(floor, f)
		if f, err = socketFloor(iters, 0); err != nil {
			return nil, err
		}
		idleFloor = min(idleFloor, f)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	rows := daemonRows("")
	measured := func(r *Row, v, base float64) { r.Value, r.BaseValue, r.Ratio = v, base, ratio(v, base) }
	measured(&rows[0], us(lat[0]), us(floor))
	measured(&rows[1], bw[0], inBW)
	measured(&rows[2], us(lat[0]), us(inLat))
	measured(&rows[3], bw[1], inBW)
	measured(&rows[4], us(lat[1]), us(inLat))
	measured(&rows[5], us(floor), us(idleFloor))
	measured(&rows[6], bw[2], bw[0])
	measured(&rows[7], us(lat[2]), us(lat[0]))
	rows[0] = rows[0].atMost(1.5)
	rows[3] = rows[3].atLeast(0.5)
	rows[6] = rows[6].atLeast(0.8)
	rows[7] = rows[7].atMost(1.25)
	if found := set.All(); len(found) > 0 {
		o.logf("daemon: --check found %d things in perftest: %+v", len(found), found)
	}
	o.logf("daemon: ib_write_bw %.2f Gb/s (one-way doorbells %.2f, --check %.2f, in-process %.2f), ib_send_lat typical %v (one-way %v, --check %v, in-process p50 %v, floor %v, idle floor %v)",
		bw[0], bw[1], bw[2], inBW, lat[0], lat[1], lat[2], inLat, floor, idleFloor)
	o.logf("daemon: doorbells %+v, one-way %+v", srv.DoorbellStats(), srv1.DoorbellStats())
	return rows, nil
}

// perftest runs a perftest tool as server and client on the daemon
// (GID index 1, a free TCP port) and returns the client's output.
func perftest(ctx context.Context, env []string, tool string, args ...string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	common := append([]string{"-d", daemonName, "-x", "1", "-p", strconv.Itoa(port)}, args...)
	var sout bytes.Buffer
	srv := exec.CommandContext(ctx, tool, common...)
	srv.Env, srv.Stdout, srv.Stderr = env, &sout, &sout
	if err := srv.Start(); err != nil {
		return "", err
	}
	defer srv.Wait()
	defer srv.Process.Kill()
	var out []byte
	// The server listens once it has opened the device: retry the
	// client's connection for a while.
	for try := 0; ; try++ {
		time.Sleep(100 * time.Millisecond)
		cl := exec.CommandContext(ctx, tool, append(common, "127.0.0.1")...)
		cl.Env = env
		out, err = cl.CombinedOutput()
		if err == nil {
			return string(out), nil
		}
		if try == 30 || ctx.Err() != nil || !bytes.Contains(out, []byte("Couldn't connect")) {
			return "", fmt.Errorf("%s: %w\n%s\nserver:\n%s", tool, err, out, sout.Bytes())
		}
	}
}

// freePort returns a TCP port nobody listens on at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("listener without a TCP address")
	}
	return a.Port, nil
}
