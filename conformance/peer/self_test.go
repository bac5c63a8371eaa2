package peer

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// toolPair is one interop run: a server command on VM 1 and a client
// command on VM 2 (which gets the server's address appended).
type toolPair struct {
	name   string
	port   int
	server string
	client string
	// want must match both sides' output.
	want *regexp.Regexp
	// opcodes are BTH opcodes the run must put on the wire.
	opcodes []uint8
}

// BTH opcodes (IBTA 9.2, table 38) the runs must show.
const (
	opRCSendFirst   = 0x00
	opRCSendLast    = 0x02
	opRCSendOnly    = 0x04
	opRCWriteFirst  = 0x06
	opRCWriteLast   = 0x08
	opRCWriteOnly   = 0x0a
	opRCAck         = 0x11
	opUCSendOnly    = 0x24
	opUDSendOnly    = 0x64
	opRCReadRequest = 0x0c
)

// selfPairs are the tools TestRxePeerSelf runs between two rxe VMs.
// The pingpongs check the received data (-c); GID index 1 is the IPv4
// RoCEv2 GID.
var selfPairs = []toolPair{
	{
		name: "ibv_rc_pingpong", port: 18515,
		server:  "ibv_rc_pingpong -g 1 -n 20 -c -p 18515",
		client:  "ibv_rc_pingpong -g 1 -n 20 -c -p 18515",
		want:    regexp.MustCompile(`(?m)^\d+ bytes in [0-9.]+ seconds = `),
		opcodes: []uint8{opRCSendFirst, opRCSendLast, opRCAck},
	},
	{
		name: "ibv_ud_pingpong", port: 18516,
		server:  "ibv_ud_pingpong -g 1 -n 20 -s 1024 -c -p 18516",
		client:  "ibv_ud_pingpong -g 1 -n 20 -s 1024 -c -p 18516",
		want:    regexp.MustCompile(`(?m)^\d+ bytes in [0-9.]+ seconds = `),
		opcodes: []uint8{opUDSendOnly},
	},
	{
		name: "ib_write_bw", port: 18517,
		server:  "ib_write_bw -d rxe0 -x 1 -F -n 50 -s 65536 -p 18517",
		client:  "ib_write_bw -d rxe0 -x 1 -F -n 50 -s 65536 -p 18517",
		want:    regexp.MustCompile(`(?m)^\s*65536\s+50\s+[0-9.]+`),
		opcodes: []uint8{opRCWriteFirst, opRCWriteLast, opRCAck},
	},
}

// TestRxePeerSelf runs rdma-core's and perftest's tools between two
// kernel rxe VMs on a lab bridge: the harness's proof that the peer works,
// before softroce takes one side. Every run must exit 0 on both sides,
// and every RoCEv2 frame on the bridge must carry a valid ICRC and decode
// in tshark.
func TestRxePeerSelf(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := exec.LookPath("tcpdump")
	testenv.Require(t, err == nil, "tcpdump is not installed (apt-get install tcpdump)")
	_, err = exec.LookPath("tshark")
	testenv.Require(t, err == nil, "tshark is not installed (apt-get install tshark)")
	img := buildTestImage(t)
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	pcap := filepath.Join(dir, "bridge.pcap")
	capture, err := lab.StartCapture(ctx, pcap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %s; console logs in %s", pcap, dir)

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

	for _, p := range selfPairs {
		t.Run(p.name, func(t *testing.T) {
			runStart := time.Now()
			srv, cli := runPair(t, ctx, server, client, p, serverIP.Addr().String())
			t.Logf("%s: %v", p.name, time.Since(runStart).Round(time.Millisecond))
			for side, r := range map[string]Result{"server": srv, "client": cli} {
				if r.Status != 0 {
					t.Errorf("%s exited %d:\n%s", side, r.Status, r.Output)
				} else if !p.want.MatchString(r.Output) {
					t.Errorf("%s output lacks %v:\n%s", side, p.want, r.Output)
				}
			}
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
	if err := capture.Stop(); err != nil {
		t.Error(err)
	}

	rep, err := CheckCapture(pcap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %d frames, %d RoCEv2: %s", rep.Frames, rep.RoCE, rep.OpcodeSummary())
	if len(rep.BadICRC) > 0 {
		t.Errorf("%d RoCEv2 frames with a bad ICRC: %v", len(rep.BadICRC), rep.BadICRC[:min(10, len(rep.BadICRC))])
	}
	for _, p := range selfPairs {
		for _, op := range p.opcodes {
			if rep.Opcodes[op] == 0 {
				t.Errorf("%s: no frame with opcode 0x%02x in the capture", p.name, op)
			}
		}
	}
	malformed, ib, err := TsharkCheck(ctx, pcap)
	if err != nil {
		t.Fatal(err)
	}
	if len(malformed) > 0 {
		t.Errorf("tshark: malformed frames %v", malformed)
	}
	if ib != rep.RoCE {
		t.Errorf("tshark decodes %d frames as InfiniBand, want the %d RoCEv2 frames", ib, rep.RoCE)
	}
}

// runPair starts p's server on server, waits until it listens, runs the
// client on client and waits for both.
func runPair(t *testing.T, ctx context.Context, server, client *VM, p toolPair, serverAddr string) (srv, cli Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sj, err := server.StartJob(ctx, p.server)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := server.Run(ctx, fmt.Sprintf("softroce-listening %d 60", p.port)); err != nil || r.Status != 0 {
		sj.Kill()
		r2, _ := sj.Wait(ctx)
		t.Fatalf("server never listened on %d: %v %q; server output:\n%s", p.port, err, r.Output, r2.Output)
	}
	cj, err := client.StartJob(ctx, p.client+" "+serverAddr)
	if err != nil {
		t.Fatal(err)
	}
	cli, cerr := cj.Wait(ctx)
	if cerr != nil {
		sj.Kill()
	}
	srv, serr := sj.Wait(ctx)
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\nserver: %v\nclient output:\n%s\nserver output:\n%s", cerr, serr, cli.Output, srv.Output)
	}
	return srv, cli
}
