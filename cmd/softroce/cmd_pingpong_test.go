package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/oob"
)

// pipeNodes returns hooks that make "softroce pingpong/perf/rping" build
// their node on one end of an in-memory link: device -d a on one end, -d b
// on the other, so that two commands in this process talk RoCE over the
// pipe and TCP over 127.0.0.1.
func pipeNodes(t *testing.T) hooks {
	t.Helper()
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 1500, QueueLen: 1024})
	ends := map[string]link.Link{"a": ea, "b": eb}
	t.Cleanup(func() { ea.Close(); eb.Close() })
	return hooks{openNode: func(lf *linkFlags, stderr io.Writer) (*node.Node, error) {
		cfg, err := lf.config()
		if err != nil {
			return nil, err
		}
		l, ok := ends[lf.dev]
		if !ok {
			return nil, fmt.Errorf("test: no pipe end for device %q", lf.dev)
		}
		cfg.Link = l
		cfg.MTU = 0
		return node.New(context.Background(), cfg)
	}}
}

// port is what tests pass to -p: the server listens on port 0 (the kernel
// picks a free one) and the client gets the port the server listens on, so
// that concurrent test processes never collide.
const port = "PORT"

// withPort returns args with every "PORT" replaced by p.
func withPort(args []string, p string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == port {
			out[i] = p
		}
	}
	return out
}

type cmdResult struct {
	code        int
	out, errout string
}

// runPair runs a server command and, once it listens, a client command,
// both with the hooks h. A client that fails before reaching the server
// ends the server's wait for it (it would wait for ever, as the real
// tools do).
func runPair(t *testing.T, h hooks, server, client []string) (sv, cl cmdResult) {
	t.Helper()
	giveUp := make(chan struct{})
	h.giveUp = giveUp
	listening := make(chan struct{})
	var once sync.Once
	var lport string
	h.serverReady = func(a net.Addr) {
		once.Do(func() { lport = strconv.Itoa(a.(*net.TCPAddr).Port); close(listening) })
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer once.Do(func() { close(listening) })
		var o, e bytes.Buffer
		sv.code = runWith(h, withPort(server, "0"), &o, &e)
		sv.out, sv.errout = o.String(), e.String()
	}()
	<-listening
	var o, e bytes.Buffer
	cl.code = runWith(h, withPort(client, lport), &o, &e)
	cl.out, cl.errout = o.String(), e.String()
	if cl.code != 0 {
		close(giveUp)
	}
	wg.Wait()
	return sv, cl
}

var (
	ppLocal  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::ffff:10\.9\.0\.(\d)$`)
	ppRemote = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:10\.9\.0\.(\d)$`)
	ppLines  = regexp.MustCompile(`(?m)^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter\n`)
)

func TestPingpongCommand(t *testing.T) {
	for _, tc := range []struct {
		mode string
		args []string
		nqp  int
	}{
		{"rc", []string{"-n", "50", "-c"}, 1},
		{"rc", []string{"-n", "20", "-s", "10000", "-m", "512", "-r", "4"}, 1},
		{"uc", []string{"-n", "50", "-c", "-s", "2000"}, 1},
		{"ud", []string{"-n", "50", "-c", "-s", "1000"}, 1},
		{"srq", []string{"-n", "64", "-q", "4", "-c", "-s", "3000"}, 4},
		{"rc", []string{"-n", "50", "-c", "-o"}, 1},
		{"srq", []string{"-n", "64", "-q", "4", "-c", "-s", "3000", "-o"}, 4},
	} {
		t.Run(tc.mode+"/"+strings.Join(tc.args, "_"), func(t *testing.T) {
			h := pipeNodes(t)
			common := append([]string{"pingpong", "--mode", tc.mode, "-p", port}, tc.args...)
			sv, cl := runPair(t, h,
				append(append([]string{}, common...), "-d", "b", "--ip", "10.9.0.2/24"),
				append(append([]string{}, common...), "-d", "a", "--ip=10.9.0.1/24", "127.0.0.1"))
			for _, r := range []struct {
				name  string
				res   cmdResult
				local string
			}{{"server", sv, "2"}, {"client", cl, "1"}} {
				if r.res.code != 0 {
					t.Fatalf("%s: exit %d\n%s\n%s", r.name, r.res.code, r.res.out, r.res.errout)
				}
				loc, rem := ppLocal.FindAllStringSubmatch(r.res.out, -1), ppRemote.FindAllStringSubmatch(r.res.out, -1)
				if len(loc) != tc.nqp || len(rem) != tc.nqp || loc[0][1] != r.local || rem[0][1] == r.local {
					t.Errorf("%s: address lines:\n%s", r.name, r.res.out)
				}
				m := ppLines.FindStringSubmatch(r.res.out)
				if m == nil || strings.Contains(r.res.out, "invalid data") {
					t.Errorf("%s: result lines:\n%s", r.name, r.res.out)
				}
			}
		})
	}
}

func TestPingpongCommandBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "xx"},
		{"-m", "1000"},
		{"--mode", "ud", "-o"},
		{"--tap"},
		{"a", "b"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"pingpong"}, args...)...)
			if code == 0 || errs == "" {
				t.Errorf("exit %d, stderr %q", code, errs)
			}
		})
	}
}

// TestPingpongODPRefusals: -O fails as ibv_rc_pingpong does on rxe (no
// implicit ODP), -o on a device without ODP (rxe before 6.15) as it does
// there, and -P (ibv_advise_mr) is refused with EOPNOTSUPP; each exits 1
// with its message before any address exchange.
func TestPingpongODPRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-O"}, "The device doesn't support implicit ODP"},
		{[]string{"-o", "-O"}, "The device doesn't support implicit ODP"},
		{[]string{"-o", "-P"}, "-P prefetches with ibv_advise_mr"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			code, out, errs := runCmd(t, append([]string{"pingpong", "--mode", "rc", "-p", "1"}, tc.args...)...)
			if code != 1 || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q, want 1 and %q", code, out, errs, tc.want)
			}
		})
	}
	for _, mode := range []string{"rc", "srq"} {
		if err := checkODP(emu.ODPCaps{}, map[string]oob.PingpongMode{"rc": oob.PingpongRC, "srq": oob.PingpongSRQ}[mode], false); err == nil ||
			!strings.HasPrefix(err.Error(), "The device isn't ODP capable") {
			t.Errorf("%s -o without ODP: %v", mode, err)
		}
	}
}

// TestPingpongNoSuchPort: -i names a port the device does not have (rxe
// has one): the tools fail before the address exchange, ud_pingpong at its
// port query, the others when ib_modify_qp refuses IB_QP_PORT in the move
// to INIT; exit 1 and no server listening.
func TestPingpongNoSuchPort(t *testing.T) {
	for _, tc := range []struct{ mode, port, want string }{
		{"rc", "9", "Failed to modify QP to INIT"},
		{"uc", "2", "Failed to modify QP to INIT"},
		{"srq", "9", "Failed to modify QP to INIT"},
		{"ud", "9", "Unable to query port info for port 9"},
	} {
		t.Run(tc.mode+"/"+tc.port, func(t *testing.T) {
			h := pipeNodes(t)
			h.serverReady = func(net.Addr) { t.Error("the server listened") }
			var o, e bytes.Buffer
			code := runWith(h, []string{"pingpong", "--mode", tc.mode, "-i", tc.port, "-p", "0", "-d", "a", "--ip", "10.9.0.1/24"}, &o, &e)
			if code != 1 || !strings.Contains(e.String(), tc.want) || !strings.Contains(e.String(), "invalid argument") {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, e.String(), tc.want)
			}
		})
	}
}

// TestPingpongSeed: without --seed each run draws its PSNs at random, as
// the tools do (srand48(getpid() * time(NULL))), so two runs differ; with
// --seed a run replays exactly, and --print-seed says the seed on stderr.
func TestPingpongSeed(t *testing.T) {
	psns := func(extra ...string) (server, client string, sv, cl cmdResult) {
		t.Helper()
		h := pipeNodes(t)
		common := append([]string{"pingpong", "--mode", "rc", "-p", port, "-n", "5"}, extra...)
		sv, cl = runPair(t, h,
			append(append([]string{}, common...), "-d", "b", "--ip", "10.9.0.2/24"),
			append(append([]string{}, common...), "-d", "a", "--ip=10.9.0.1/24", "127.0.0.1"))
		if sv.code != 0 || cl.code != 0 {
			t.Fatalf("exit %d %d\n%s%s\n%s%s", sv.code, cl.code, sv.out, sv.errout, cl.out, cl.errout)
		}
		psn := regexp.MustCompile(`local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN (0x[0-9a-f]{6})`)
		ms, mc := psn.FindStringSubmatch(sv.out), psn.FindStringSubmatch(cl.out)
		if ms == nil || mc == nil {
			t.Fatalf("no PSN in\n%s\n%s", sv.out, cl.out)
		}
		return ms[1], mc[1], sv, cl
	}
	s1, c1, _, _ := psns()
	s2, c2, _, _ := psns()
	if s1 == s2 || c1 == c2 {
		t.Errorf("two runs without --seed: server PSNs %s %s, client PSNs %s %s; want them to differ", s1, s2, c1, c2)
	}
	s1, c1, sv, _ := psns("--seed", "7", "--print-seed")
	s2, c2, _, _ = psns("--seed=7")
	if s1 != s2 || c1 != c2 {
		t.Errorf("two runs with --seed 7: server PSNs %s %s, client PSNs %s %s; want them equal", s1, s2, c1, c2)
	}
	if sv.errout != "softroce: seed 0x7\n" {
		t.Errorf("--print-seed: stderr %q", sv.errout)
	}
}

// TestServerGivesUpWhenTheClientFails: a perf server waiting for its
// client returns once the test's client has failed (here on a flag the
// tool does not know), so that a broken client fails the test instead of
// hanging it.
func TestServerGivesUpWhenTheClientFails(t *testing.T) {
	h := pipeNodes(t)
	done := make(chan struct{})
	var sv, cl cmdResult
	go func() {
		defer close(done)
		sv, cl = runPair(t, h,
			[]string{"perf", "write_bw", "-p", port, "-n", "10", "-d", "b", "--ip", "10.9.0.2/24"},
			[]string{"perf", "write_bw", "-p", port, "-n", "10", "--no-such-flag", "-d", "a", "--ip", "10.9.0.1/24", "localhost"})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the server still waits a minute after its client failed")
	}
	if cl.code == 0 || sv.code == 0 {
		t.Errorf("client exit %d, server exit %d: want both non-zero", cl.code, sv.code)
	}
}
