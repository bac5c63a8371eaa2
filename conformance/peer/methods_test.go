package peer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// The uverbs ioctl methods ibv_rc_pingpong and ib_write_bw call on the
// kernel's rxe, recorded with testdata/ioctl_trace.c on each release's VM
// (its kernel and its rdma-core): kept in testdata, where cmd/softroce's
// tests compare the daemon's method log with them. SOFTROCE_RECORD=1
// writes them anew.
var methodsKernel = map[Release]string{
	Bookworm: "testdata/verbs_methods.kernel-6.1.txt",
	Trixie:   "testdata/verbs_methods.kernel-6.12.txt",
}

// MethodRuns are the tool runs of the method recording: a name, and the
// server's and the client's command lines on one host (the client
// reaches the server at 127.0.0.1; its RoCE traffic is the device's
// loopback). The same runs are made under softroce by cmd/softroce.
var MethodRuns = []struct {
	Name           string
	Server, Client string
}{
	{"ibv_rc_pingpong", "ibv_rc_pingpong -d rxe0 -g 1 -n 10 -p 18515", "ibv_rc_pingpong -d rxe0 -g 1 -n 10 -p 18515 127.0.0.1"},
	{"ib_write_bw", "ib_write_bw -d rxe0 -x 1 -n 50 -F -p 18516", "ib_write_bw -d rxe0 -x 1 -n 50 -F -p 18516 127.0.0.1"},
}

// methodsScript runs each of MethodRuns with the tracer and prints the
// traces: "== NAME server" (or client), then its lines.
func methodsScript(tracer string) string {
	var b strings.Builder
	for _, r := range MethodRuns {
		fmt.Fprintf(&b, "rm -f /tmp/s.trace /tmp/c.trace; "+
			"IOCTL_TRACE=/tmp/s.trace LD_PRELOAD=%[1]s %[2]s >/tmp/s.out 2>&1 & sleep 3; "+
			"IOCTL_TRACE=/tmp/c.trace LD_PRELOAD=%[1]s %[3]s >/tmp/c.out 2>&1 || { cat /tmp/c.out; exit 1; }; wait $! || { cat /tmp/s.out; exit 1; }; "+
			"echo '== %[4]s server'; cat /tmp/s.trace; echo '== %[4]s client'; cat /tmp/c.trace; ",
			tracer, r.Server, r.Client, r.Name)
	}
	return b.String()
}

// BuildIoctlTrace compiles testdata/ioctl_trace.c (an LD_PRELOAD
// library) into dir and returns its path.
func BuildIoctlTrace(dir string) (string, error) {
	out := filepath.Join(dir, "ioctl_trace.so")
	src, err := filepath.Abs("testdata/ioctl_trace.c")
	if err != nil {
		return "", err
	}
	if b, err := exec.Command("cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", out, src, "-ldl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc ioctl_trace.c: %v\n%s", err, b)
	}
	return out, nil
}

// TestKernelVerbsMethods: on each release's VM, the methods the tools
// call are as recorded.
func TestKernelVerbsMethods(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := exec.LookPath("cc")
	testenv.Require(t, err == nil, "cc is not installed")
	so, err := BuildIoctlTrace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	// The releases whose userspace softroce's tests run the same tools
	// on (Debian 12's and 13's): their kernels' sequences are recorded.
	for _, rel := range []Release{Bookworm, Trixie} {
		t.Run(string(rel), func(t *testing.T) {
			img := buildTestImageFor(t, rel)
			lab := newTestLab(t)
			dir := artifactDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ip4, ip6 := lab.PeerAddr(1)
			con, err := os.Create(filepath.Join(dir, "vm1.console.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer con.Close()
			vm, err := lab.StartVM(ctx, VMConfig{Image: img, Name: "vm1", IP: ip4, IP6: ip6, Console: con, Timeout: 12 * time.Minute,
				Programs: map[string][]byte{"ioctl_trace.so": prog}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { vm.Kill(); <-vm.Done() })
			if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
				t.Fatal(err)
			}
			r, err := vm.Run(ctx, methodsScript("/bin/ioctl_trace.so"))
			if err != nil || r.Status != 0 {
				t.Fatalf("%v, status %d\n%s", err, r.Status, r.Output)
			}
			got := strings.ReplaceAll(r.Output, "\r", "")
			file := methodsKernel[rel]
			if os.Getenv("SOFTROCE_RECORD") == "1" {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the kernel's methods changed:\n%s\nrecorded:\n%s", got, want)
			}
		})
	}
}
