//go:build linux

package peer

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
	"golang.org/x/sys/unix"
)

// toolPair is one interop run: a server command on VM 1 and a client
// command on VM 2 (which gets the server's address appended).
type toolPair struct {
	name   string
	port   int
	server string
	client string
	// want must match both sides' output; serverWant, if set, replaces it
	// for the server (ib_read_lat's and ib_atomic_lat's servers print
	// no result row).
	want, serverWant *regexp.Regexp
	// opcodes are BTH opcodes the run must put on the wire.
	opcodes []uint8
	// ipv6 marks a run over the global IPv6 GID (index 2): every RoCEv2
	// frame must be IPv6. The tools' out-of-band TCP exchange still uses
	// the server's IPv4 address (their servers listen on IPv4 only).
	ipv6 bool
}

// wantFor returns what side ("server" or "client") must print.
func (p toolPair) wantFor(side string) *regexp.Regexp {
	if side == "server" && p.serverWant != nil {
		return p.serverWant
	}
	return p.want
}

// BTH opcodes (IBTA 9.2, table 38) the runs must show.
const (
	opRCSendFirst     = 0x00
	opRCSendMiddle    = 0x01
	opRCSendLast      = 0x02
	opRCSendOnly      = 0x04
	opRCWriteFirst    = 0x06
	opRCWriteMiddle   = 0x07
	opRCWriteLast     = 0x08
	opRCWriteOnly     = 0x0a
	opRCReadRequest   = 0x0c
	opRCReadRespFirst = 0x0d
	opRCReadRespLast  = 0x0f
	opRCAck           = 0x11
	opRCAtomicAck     = 0x12
	opRCFetchAdd      = 0x14
	opUCSendFirst     = 0x20
	opUCSendLast      = 0x22
	opUDSendOnly      = 0x64
)

var (
	pingpongOK = regexp.MustCompile(`(?m)^\d+ bytes in [0-9.]+ seconds = `)
	// perftest's result row: "#bytes #iterations ..." numbers.
	perftestOK = func(size, iters string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\s*` + size + `\s+` + iters + `\s+[0-9.]+`)
	}
)

// selfPairs are the tools TestRxePeerSelf runs between two rxe VMs. The
// pingpongs check the received data (-c). GID index 1 is the RoCEv2 IPv4
// GID, index 2 the global IPv6 one. The VMs' netdev MTU is 9000, so
// path MTU 4096 is available (-m 4096); the pingpongs default to 1024.
var selfPairs = []toolPair{
	{
		name: "ibv_rc_pingpong", port: 18515,
		server:  "ibv_rc_pingpong -g 1 -n 20 -c -p 18515",
		client:  "ibv_rc_pingpong -g 1 -n 20 -c -p 18515",
		want:    pingpongOK,
		opcodes: []uint8{opRCSendFirst, opRCSendMiddle, opRCSendLast, opRCAck},
	},
	{
		name: "ibv_rc_pingpong_ipv6_mtu4096", port: 18516,
		server:  "ibv_rc_pingpong -g 2 -m 4096 -n 20 -c -p 18516",
		client:  "ibv_rc_pingpong -g 2 -m 4096 -n 20 -c -p 18516",
		want:    pingpongOK,
		opcodes: []uint8{opRCSendOnly, opRCAck},
		ipv6:    true,
	},
	{
		name: "ibv_uc_pingpong", port: 18517,
		server:  "ibv_uc_pingpong -g 1 -n 20 -c -p 18517",
		client:  "ibv_uc_pingpong -g 1 -n 20 -c -p 18517",
		want:    pingpongOK,
		opcodes: []uint8{opUCSendFirst, opUCSendLast},
	},
	{
		name: "ibv_ud_pingpong", port: 18518,
		server:  "ibv_ud_pingpong -g 1 -n 20 -s 1024 -c -p 18518",
		client:  "ibv_ud_pingpong -g 1 -n 20 -s 1024 -c -p 18518",
		want:    pingpongOK,
		opcodes: []uint8{opUDSendOnly},
	},
	{
		name: "ibv_srq_pingpong", port: 18519,
		server:  "ibv_srq_pingpong -g 1 -q 4 -n 20 -c -p 18519",
		client:  "ibv_srq_pingpong -g 1 -q 4 -n 20 -c -p 18519",
		want:    pingpongOK,
		opcodes: []uint8{opRCSendFirst, opRCSendLast, opRCAck},
	},
	{
		name: "ib_write_bw", port: 18520,
		server:  "ib_write_bw -d rxe0 -x 1 -F -n 50 -s 65536 -p 18520",
		client:  "ib_write_bw -d rxe0 -x 1 -F -n 50 -s 65536 -p 18520",
		want:    perftestOK("65536", "50"),
		opcodes: []uint8{opRCWriteFirst, opRCWriteMiddle, opRCWriteLast, opRCAck},
	},
	{
		name: "ib_read_bw", port: 18521,
		server:  "ib_read_bw -d rxe0 -x 1 -F -n 50 -s 16384 -p 18521",
		client:  "ib_read_bw -d rxe0 -x 1 -F -n 50 -s 16384 -p 18521",
		want:    perftestOK("16384", "50"),
		opcodes: []uint8{opRCReadRequest, opRCReadRespFirst, opRCReadRespLast},
	},
	{
		name: "ib_send_bw", port: 18522,
		server:  "ib_send_bw -d rxe0 -x 1 -F -n 50 -s 8192 -p 18522",
		client:  "ib_send_bw -d rxe0 -x 1 -F -n 50 -s 8192 -p 18522",
		want:    perftestOK("8192", "50"),
		opcodes: []uint8{opRCSendFirst, opRCSendLast, opRCAck},
	},
	{
		name: "ib_atomic_bw", port: 18523,
		server:  "ib_atomic_bw -d rxe0 -x 1 -F -n 50 -p 18523",
		client:  "ib_atomic_bw -d rxe0 -x 1 -F -n 50 -p 18523",
		want:    perftestOK("8", "50"),
		opcodes: []uint8{opRCFetchAdd, opRCAtomicAck},
	},
	{
		name: "ib_write_lat", port: 18524,
		server:  "ib_write_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18524",
		client:  "ib_write_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18524",
		want:    perftestOK("64", "50"),
		opcodes: []uint8{opRCWriteOnly},
	},
	// The other latency tools: reference exchanges for softroce perf
	// (docs/interop.md).
	{
		name: "ib_read_lat", port: 18525,
		server: "ib_read_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18525",
		client: "ib_read_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18525",
		want:   perftestOK("64", "50"), serverWant: perftestServerAddr,
		opcodes: []uint8{opRCReadRequest, 0x10},
	},
	{
		name: "ib_send_lat", port: 18526,
		server:  "ib_send_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18526",
		client:  "ib_send_lat -d rxe0 -x 1 -F -n 50 -s 64 -p 18526",
		want:    perftestOK("64", "50"),
		opcodes: []uint8{opRCSendOnly},
	},
	{
		name: "ib_atomic_lat", port: 18527,
		server: "ib_atomic_lat -d rxe0 -x 1 -F -n 50 -p 18527",
		client: "ib_atomic_lat -d rxe0 -x 1 -F -n 50 -p 18527",
		want:   perftestOK("8", "50"), serverWant: perftestServerAddr,
		opcodes: []uint8{opRCFetchAdd, opRCAtomicAck},
	},
}

// TestRxePeerSelf runs rdma-core's and perftest's tools between two
// kernel rxe VMs on a lab bridge: the harness's proof that the peer works,
// before softroce takes one side. Every run must exit 0 on both sides
// with its result line, and every RoCEv2 frame on the bridge (one capture
// per run, kept under $SOFTROCE_ARTIFACTS) must carry a valid ICRC, decode
// in tshark with no malformed frame, and show the run's opcodes.
func TestRxePeerSelf(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := exec.LookPath("tcpdump")
	testenv.Require(t, err == nil, "tcpdump is not installed (apt-get install tcpdump)")
	testutil.Tshark(t)
	img := buildTestImage(t)
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	t.Logf("captures and console logs in %s", dir)

	start := time.Now()
	server := startTestVM(t, ctx, lab, img, dir, 1, "")
	client := startTestVM(t, ctx, lab, img, dir, 2, "")
	for _, vm := range []*VM{server, client} {
		if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("both VMs up in %v (boot %v and %v)", time.Since(start).Round(time.Millisecond),
		server.BootTime().Round(time.Millisecond), client.BootTime().Round(time.Millisecond))
	serverIP, _ := lab.PeerAddr(1)
	t.Run("agent", func(t *testing.T) { testAgent(t, ctx, client) })

	for _, p := range selfPairs {
		t.Run(p.name, func(t *testing.T) {
			pcap := filepath.Join(dir, p.name+".pcap")
			capture, err := lab.StartCapture(ctx, pcap)
			if err != nil {
				t.Fatal(err)
			}
			runStart := time.Now()
			srv, cli := runPair(t, ctx, server, client, p, serverIP.Addr().String())
			elapsed := time.Since(runStart)
			if err := capture.Stop(); err != nil {
				t.Error(err)
			}
			for _, side := range []struct {
				name string
				r    Result
			}{{"server", srv}, {"client", cli}} {
				if side.r.Status != 0 {
					t.Errorf("%s exited %d:\n%s", side.name, side.r.Status, side.r.Output)
				} else if want := p.wantFor(side.name); !want.MatchString(side.r.Output) {
					t.Errorf("%s output lacks %v:\n%s", side.name, want, side.r.Output)
				}
			}
			rep := checkPairCapture(t, ctx, pcap, p, t.Errorf)
			t.Logf("%v; %d frames, %d RoCEv2: %s", elapsed.Round(time.Millisecond), rep.Frames, rep.RoCE, rep.OpcodeSummary())
		})
	}

	shutdownStart := time.Now()
	var wg sync.WaitGroup
	for _, vm := range []*VM{server, client} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, scancel := context.WithTimeout(ctx, time.Minute)
			defer scancel()
			if err := vm.Shutdown(sctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	t.Logf("shutdown in %v", time.Since(shutdownStart).Round(time.Millisecond))
}

// checkPairCapture checks a run's capture: ICRCs, opcodes, address family
// and tshark's decoding. Problems go to errorf (t.Errorf, or a collector).
func checkPairCapture(t *testing.T, ctx context.Context, pcap string, p toolPair, errorf func(string, ...any)) *CaptureReport {
	t.Helper()
	rep, err := CheckCapture(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.BadICRC) > 0 {
		errorf("%d RoCEv2 frames with a bad ICRC: %v", len(rep.BadICRC), rep.BadICRC[:min(10, len(rep.BadICRC))])
	}
	for _, op := range p.opcodes {
		if rep.Opcodes[op] == 0 {
			errorf("no frame with opcode 0x%02x in the capture (%s)", op, rep.OpcodeSummary())
		}
	}
	if p.ipv6 && rep.RoCEv6 != rep.RoCE {
		errorf("%d of %d RoCEv2 frames over IPv6, want all", rep.RoCEv6, rep.RoCE)
	}
	if !p.ipv6 && rep.RoCEv6 != 0 {
		errorf("%d RoCEv2 frames over IPv6, want none", rep.RoCEv6)
	}
	malformed, ib, err := TsharkCheck(ctx, pcap)
	if err != nil {
		t.Fatal(err)
	}
	if len(malformed) > 0 {
		errorf("tshark: malformed frames %s", strings.Join(malformed, " "))
	}
	if ib != rep.RoCE {
		errorf("tshark decodes %d frames as InfiniBand, want the %d RoCEv2 frames", ib, rep.RoCE)
	}
	return rep
}

// runPair starts p's server on server, waits until it listens, runs the
// client on client and waits for both. If the client fails, the server
// gets a few seconds to notice before it is killed.
func runPair(t *testing.T, ctx context.Context, server, client *VM, p toolPair, serverAddr string) (srv, cli Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sj, err := server.StartListening(ctx, p.server, p.port)
	if err != nil {
		t.Fatal(err)
	}
	cj, err := client.StartJob(ctx, p.client+" "+serverAddr)
	if err != nil {
		sj.Kill()
		t.Fatal(err)
	}
	cli, cerr := cj.Wait(ctx)
	sctx := ctx
	if cerr != nil || cli.Status != 0 {
		var scancel context.CancelFunc
		sctx, scancel = context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
	}
	srv, serr := sj.Wait(sctx)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\nserver: %v\nclient output:\n%s\nserver output:\n%s", cerr, serr, cli.Output, srv.Output)
	}
	return srv, cli
}

// testAgent checks the agent protocol on a booted VM: exit status and
// output of a command, a killed job, concurrent jobs, and a rejected
// multi-line request.
func testAgent(t *testing.T, ctx context.Context, vm *VM) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cases := []struct {
		name   string
		cmd    string
		status int
		output string
	}{
		{"status", "exit 5", 5, ""},
		{"output", "echo out; echo err >&2; echo; echo last", 0, "out\nerr\n\nlast\n"},
		{"gid 1 is IPv4", "cat /sys/class/infiniband/rxe0/ports/1/gids/1", 0, "0000:0000:0000:0000:0000:ffff:0a4d:000c\n"},
		{"iproute2 mtu", "/usr/bin/ip -o link show eth0 | grep -o 'mtu [0-9]*'", 0, "mtu 9000\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := vm.Run(ctx, c.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != c.status || r.Output != c.output {
				t.Errorf("%q: status %d output %q, want %d %q", c.cmd, r.Status, r.Output, c.status, c.output)
			}
		})
	}
	t.Run("kill", func(t *testing.T) {
		long, err := vm.StartJob(ctx, "echo started; sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		// Another job runs and ends while the first is still running.
		if r, err := vm.Run(ctx, "echo second"); err != nil || r.Output != "second\n" {
			t.Fatalf("concurrent job: %v %q", err, r.Output)
		}
		if err := long.Kill(); err != nil {
			t.Fatal(err)
		}
		r, err := long.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 128+9 || r.Output != "started\n" {
			t.Errorf("killed job: status %d output %q, want 137 %q", r.Status, r.Output, "started\n")
		}
	})
	t.Run("multi-line request", func(t *testing.T) {
		if _, err := vm.StartJob(ctx, "echo a\necho b"); !errors.Is(err, unix.EINVAL) {
			t.Errorf("error %v, want EINVAL", err)
		}
	})
}
