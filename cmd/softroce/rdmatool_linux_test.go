package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// softrocePath builds the softroce binary once per test process, for
// tests that run it the way a user does: as a process of its own.
func softrocePath(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := filepathTemp()
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "softroce")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = err
			binaryPath = string(out)
		}
	})
	if binaryErr != nil {
		t.Fatalf("go build softroce: %v\n%s", binaryErr, binaryPath)
	}
	return binaryPath
}

// TestToolsOnABridge: as root, in a fresh namespace, two softroce
// processes on two TAPs of one bridge run every "softroce pingpong" mode
// and every "softroce perf" test against each other: the out-of-band
// exchange over the namespace's kernel TCP (the server listens on 18515),
// the RoCE traffic between the two softroce hosts, which find each other by
// ARP. Every pingpong mode runs with -c (the receiver checks the data);
// every run must exit 0 on both sides and print its result.
func TestToolsOnABridge(t *testing.T) {
	ns := testenv.NewNetNS(t)
	bin := softrocePath(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "addr", "add", "10.81.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	linkA := []string{"-d", "softroce_a", "--tap", "srpa", "--bridge", "br0", "--ip", "10.81.0.10/24", "--mac", "02:81:00:00:00:0a"}
	linkB := []string{"-d", "softroce_b", "--tap", "srpb", "--bridge", "br0", "--ip", "10.81.0.11/24", "--mac", "02:81:00:00:00:0b"}
	start := func(ctx context.Context, args []string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, bin}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &o, &e
	}
	for _, tc := range [][]string{
		{"pingpong", "--mode", "rc", "-c", "-n", "200"},
		{"pingpong", "--mode", "uc", "-c", "-n", "200", "-s", "1024"},
		{"pingpong", "--mode", "ud", "-c", "-n", "200", "-s", "512"},
		{"pingpong", "--mode", "srq", "-c", "-n", "200", "-q", "4"},
		{"perf", "write_bw", "-n", "500"},
		{"perf", "read_bw", "-n", "500"},
		{"perf", "send_bw", "-n", "500"},
		{"perf", "atomic_bw", "-n", "500"},
		{"perf", "write_lat", "-n", "200"},
		{"perf", "read_lat", "-n", "200"},
		{"perf", "send_lat", "-n", "200"},
		{"perf", "atomic_lat", "-n", "200"},
		{"perf", "write_bw", "-b", "-n", "500", "-q", "2"},
		{"perf", "send_bw", "-b", "-D", "1"},
		{"perf", "read_bw", "-D", "1"},
		{"perf", "send_lat", "-D", "1"},
	} {
		t.Run(strings.Join(tc, "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append(append([]string{}, tc...), "-p", "18515")
			srv, sout, serr := start(ctx, append(append([]string{}, args...), linkB...))
			// The client retries its connect until the server listens.
			cli, cout, cerr := start(ctx, append(append(append([]string{}, args...), linkA...), "10.81.0.1"))
			cliErr, srvErr := cli.Wait(), srv.Wait()
			for _, r := range []struct {
				name      string
				err       error
				out, err2 *bytes.Buffer
			}{{"server", srvErr, sout, serr}, {"client", cliErr, cout, cerr}} {
				if r.err != nil {
					t.Fatalf("%s: %v\n%s\n%s", r.name, r.err, r.out, r.err2)
				}
				out := r.out.String()
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: data check failed:\n%s", r.name, out)
				}
				if !strings.Contains(out, "remote address") {
					t.Errorf("%s: no remote address line:\n%s", r.name, out)
				}
			}
			// The client prints the result of every tool (a perftest _lat
			// server prints none, as perftest's does).
			out := cout.String()
			if !ppLines.MatchString(out) && !bwRow.MatchString(out) && !latRow.MatchString(out) && !latDurRow.MatchString(out) {
				t.Errorf("client printed no result:\n%s", out)
			}
			if tc[0] == "pingpong" && !ppLines.MatchString(sout.String()) {
				t.Errorf("server printed no result:\n%s", sout)
			}
		})
	}
}

// binaryDir holds the test binary; TestMain removes it.
var binaryDir string

// filepathTemp makes the directory for the test binary, which outlives any
// one test (the package's tests share it).
func filepathTemp() (string, error) {
	dir, err := os.MkdirTemp("", "softroce-test-")
	binaryDir = dir
	return dir, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}
