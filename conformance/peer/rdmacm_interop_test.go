//go:build linux

package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/wire"
)

// The librdmacm suite: Debian's unmodified rdmacm-utils and perftest -R
// programs on softroce (`softroce serve --tap` on the lab, the program
// under `softroce run`, both as nobody) against the same programs on the
// kernel rxe VM, connecting through the RDMA CM: CM MADs on QP1 between
// softroce's Communication Manager (package cma behind the daemon's
// rdma_cm) and the kernel's ib_cm and rdma_cm.

// rdmacmCase is one program pair of TestInteropRDMACM. Its command lines
// hold {addr}, the server's address, and {port}.
type rdmacmCase struct {
	name           string
	server, client string
	// serverWant and clientWant match the output each side must print
	// (nil: exit status 0 is all it shows).
	serverWant, clientWant *regexp.Regexp
	// opcodes are the BTH opcodes the run must put on the wire besides
	// the CM's UD SENDs to QP1.
	opcodes []uint8
	// ipv4Only: the case runs over IPv4 only (perftest's -R client
	// resolves the server's name as IPv4; rdma_xserver listens on the
	// IPv4 wildcard).
	ipv4Only bool
	// port is the program's fixed port (udaddy's 7174: its -p is the
	// port space); 0 gives each cell a port of its own.
	port int
	// perftest marks perftest's -R tools. Their client connects its
	// test QPs right after the control connection; a server that has
	// not yet listened again (the VM's, slow under TCG, or softroce's on
	// a loaded host) rejects it (REJ, invalid service ID, as the kernel
	// answers a REQ nobody listens for), and the client's own retry then
	// reuses the IDs it has just destroyed and crashes (perftest 4.5's
	// rdma_cm_client_connection). A pair whose client is rejected so
	// runs again, server and client.
	perftest bool
}

var (
	rdmacmStatus0  = regexp.MustCompile(`(?m)^return status 0$`)
	rpingClientOK  = regexp.MustCompile(`(?m)^ping data: rdma-ping-9: `)
	rpingServerOK  = regexp.MustCompile(`(?m)^server ping data: rdma-ping-9: `)
	rstreamRow     = regexp.MustCompile(`(?m)^custom\s+4k\s+200\s+1\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+`)
	rdmaServerEnd0 = regexp.MustCompile(`(?m)^rdma_server: end 0$`)
	rdmaClientEnd0 = regexp.MustCompile(`(?m)^rdma_client: end 0$`)
)

// rdmacmCases are the programs with their default options and with the
// options that change what goes on the wire: rping's data check and
// message size (-v -V -S), ucmatose's and udaddy's four connections.
var rdmacmCases = []rdmacmCase{
	{name: "rping", server: "rping -s -a {addr} -p {port} -C 10", client: "rping -c -a {addr} -p {port} -C 10",
		opcodes: []uint8{opRCSendOnly, opRCReadRequest, opRCReadRespOnly, opRCWriteOnly, opRCAck}},
	{name: "rping-vVS", server: "rping -s -a {addr} -p {port} -C 10 -v -V -S 512", client: "rping -c -a {addr} -p {port} -C 10 -v -V -S 512",
		serverWant: rpingServerOK, clientWant: rpingClientOK,
		opcodes: []uint8{opRCSendOnly, opRCReadRequest, opRCReadRespOnly, opRCWriteOnly, opRCAck}},
	{name: "ucmatose", server: "ucmatose -b {addr} -p {port}", client: "ucmatose -s {addr} -p {port}",
		serverWant: rdmacmStatus0, clientWant: rdmacmStatus0, opcodes: []uint8{opRCSendOnly, opRCAck}},
	{name: "ucmatose-c4", server: "ucmatose -b {addr} -p {port} -c 4", client: "ucmatose -s {addr} -p {port} -c 4",
		serverWant: rdmacmStatus0, clientWant: rdmacmStatus0, opcodes: []uint8{opRCSendOnly, opRCAck}},
	// udaddy resolves the service (SIDR_REQ/SIDR_REP), then sends UD
	// SENDs with immediate data.
	{name: "udaddy", server: "udaddy -b {addr}", client: "udaddy -s {addr}", port: 7174,
		serverWant: rdmacmStatus0, clientWant: rdmacmStatus0, opcodes: []uint8{opUDSendOnlyImm}},
	{name: "udaddy-c4", server: "udaddy -b {addr} -c 4", client: "udaddy -s {addr} -c 4", port: 7174,
		serverWant: rdmacmStatus0, clientWant: rdmacmStatus0, opcodes: []uint8{opUDSendOnlyImm}},
	{name: "rdma_server", server: "rdma_server -s {addr} -p {port}", client: "rdma_client -s {addr} -p {port}",
		serverWant: rdmaServerEnd0, clientWant: rdmaClientEnd0, opcodes: []uint8{opRCSendOnly, opRCAck}},
	// rdma_xserver/rdma_xclient in their default RC mode (rxe has no
	// XRC).
	{name: "rdma_xserver", server: "rdma_xserver -p {port}", client: "rdma_xclient -s {addr} -p {port}", ipv4Only: true,
		serverWant: regexp.MustCompile(`(?m)^rdma_xserver: end 0$`), clientWant: regexp.MustCompile(`(?m)^rdma_xclient: end 0$`),
		opcodes: []uint8{opRCSendOnly, opRCAck}},
	// rsockets carries its data in RDMA WRITEs with immediate data;
	// riostream's riowrite writes into the peer's mapped buffer with
	// plain WRITEs.
	{name: "rstream", server: "rstream -b {addr} -p {port} -S 4096 -C 200", client: "rstream -s {addr} -p {port} -S 4096 -C 200",
		serverWant: rstreamRow, clientWant: rstreamRow, opcodes: []uint8{opRCWriteOnlyImm, opRCAck}},
	{name: "riostream", server: "riostream -b {addr} -p {port} -S 4096 -C 200", client: "riostream -s {addr} -p {port} -S 4096 -C 200",
		serverWant: rstreamRow, clientWant: rstreamRow, opcodes: []uint8{opRCWriteOnly, opRCWriteOnlyImm, opRCAck}},
	{name: "ib_write_bw-R", server: "ib_write_bw -R -F -n 200 -s 16384 -p {port}", client: "ib_write_bw -R -F -n 200 -s 16384 -p {port} {addr}",
		serverWant: perftestOK("16384", "200"), clientWant: perftestOK("16384", "200"), ipv4Only: true, perftest: true,
		opcodes: []uint8{opRCWriteFirst, opRCWriteLast, opRCAck}},
	{name: "ib_send_bw-R", server: "ib_send_bw -R -F -n 200 -s 16384 -p {port}", client: "ib_send_bw -R -F -n 200 -s 16384 -p {port} {addr}",
		serverWant: perftestOK("16384", "200"), clientWant: perftestOK("16384", "200"), ipv4Only: true, perftest: true,
		opcodes: []uint8{opRCSendFirst, opRCSendLast, opRCAck}},
	{name: "ib_read_lat-R", server: "ib_read_lat -R -F -n 200 -p {port}", client: "ib_read_lat -R -F -n 200 -p {port} {addr}",
		serverWant: perftestServerAddr, clientWant: perftestOK("2", "200"), ipv4Only: true, perftest: true,
		opcodes: []uint8{opRCReadRequest, opRCReadRespOnly}},
}

// rdmacmCell is one run: a case, a direction, an address family.
type rdmacmCell struct {
	rdmacmCase
	softroceServer bool
	ipv6           bool
}

func (c rdmacmCell) cellName() string {
	return c.name + "/" + cellSide(c.softroceServer, c.ipv6)
}

// TestInteropRDMACM runs Debian 12's unmodified librdmacm programs
// (rdmacm-utils: rping, ucmatose, udaddy, rdma_server/rdma_client,
// rdma_xserver/rdma_xclient, rstream and riostream over rsockets, mckey;
// perftest's ib_write_bw, ib_send_bw and ib_read_lat with -R) on softroce
// — `softroce serve --tap` on the lab and the program under `softroce
// run`, both as nobody without capabilities — against the same programs
// on one Debian 12 kernel rxe VM, softroce as server and as client, over
// IPv4 and IPv6 (not perftest, whose -R client resolves IPv4 names only,
// nor rdma_xserver, which listens on the IPv4 wildcard). The programs
// connect through the RDMA CM: softroce's Communication Manager talks to
// the kernel's ib_cm over QP1 (REQ/REP/RTU, SIDR for udaddy, DREQ/DREP).
// Each run must end with exit status 0 and the program's result on both
// sides; every RoCEv2 frame of its capture on the bridge must parse with
// a good ICRC and decode in tshark (checked while the next cells run,
// reported in the subtests tshark/CELL), with the run's address family
// and opcodes (the CM's UD SENDs among them); the VM's rxe must accept
// every frame the capture has to it (rcvd_pkts) and log no bad ICRC;
// softroce's counters at the end must show every frame of the captures to
// it received or dropped, none with a bad ICRC. mckey runs across the
// link, a receiver on one side and a sender on the other, over IPv4 only:
// the kernel's rdma_cm refuses to join an IPv6 group on a RoCEv2 port
// (cma_iboe_join_multicast: ENOTSUPP, which reaches mckey as errno 524),
// and the cell mckey/ipv6-group-refused checks that both sides refuse it
// alike. The test boots one VM (agent mode) and takes about 3 minutes
// under TCG on two cores.
// SOFTROCE_INTEROP_RUN=REGEXP selects cells by name (case/direction/ip).
func TestInteropRDMACM(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"tcpdump", "cc"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed")
	}
	testutil.Tshark(t)
	_, err := os.Stat("/dev/net/tun")
	testenv.Require(t, err == nil, "no /dev/net/tun (the tun module)")
	for _, name := range []string{"rping", "ucmatose", "udaddy", "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "rstream", "riostream", "mckey"} {
		debianTool(t, name, "rdmacm-utils")
	}
	for _, name := range []string{"ib_write_bw", "ib_send_bw", "ib_read_lat"} {
		debianTool(t, name, "perftest")
	}
	sel := interopSelection()

	testStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	u, lab, vm, dir := startUserVM(t, ctx)
	defer func() { t.Logf("test took %v", time.Since(testStart).Round(time.Second)) }()
	l := verbsLinks(lab)[0]
	if l.name != "tap" {
		t.Fatalf("verbsLinks' first link is %q, want the TAP", l.name)
	}
	// The VM's neighbour entries of softroce's addresses are permanent.
	// Unpinned, the kernel's rdma_resolve_addr completed only at the
	// programs' resolution timeout (2 s), which added 2 s to every cell
	// with softroce as server: rdma_resolve_ip sends the ARP request or
	// neighbour solicitation (addr_resolve) before it queues the request
	// that a neighbour update wakes (queue_req), and softroce's answer
	// (0.2 ms) reaches the VM, slow under TCG, in between, so only the
	// timeout retries the resolution.
	l.serve = append(slices.Clip(l.serve), "--mac", rdmacmSoftMAC)
	d := u.serve(t, ctx, lab, l)
	t.Cleanup(func() { os.WriteFile(filepath.Join(dir, "serve.log"), []byte(d.out.String()), 0o644) })
	for _, a := range []netip.Addr{l.softAddr, l.softAddr6} {
		if res, err := vm.Run(ctx, "/usr/bin/ip neigh replace "+a.String()+" lladdr "+rdmacmSoftMAC+" dev eth0 nud permanent"); err != nil || res.Status != 0 {
			t.Fatalf("pin the VM's neighbour %v: %v %s", a, err, res.Output)
		}
	}
	r := &rdmacmRun{ctx: ctx, lab: lab, vm: vm, u: u, l: l, dir: dir, tshark: newTsharkQueue(ctx)}
	badBefore, err := rxeBadICRCs(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if r.counters, err = rxeCounters(ctx, vm); err != nil {
		t.Fatal(err)
	}

	port := 19600
	for _, cs := range rdmacmCases {
		for _, v6 := range []bool{false, true} {
			for _, srv := range []bool{true, false} {
				c := rdmacmCell{rdmacmCase: cs, softroceServer: srv, ipv6: v6}
				if v6 && cs.ipv4Only || sel != nil && !sel.MatchString(c.cellName()) {
					continue
				}
				port++
				p := port
				if cs.port != 0 {
					p = cs.port
				}
				t.Run(c.cellName(), func(t *testing.T) {
					for _, pr := range r.cell(t, c, p) {
						t.Error(pr)
					}
				})
			}
		}
	}
	for _, recv := range []bool{true, false} {
		name := "mckey/softroce-receiver/ipv4"
		if !recv {
			name = "mckey/softroce-sender/ipv4"
		}
		if sel != nil && !sel.MatchString(name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			for _, pr := range r.mckey(t, recv) {
				t.Error(pr)
			}
		})
	}

	if sel == nil || sel.MatchString("mckey/ipv6-group-refused") {
		t.Run("mckey/ipv6-group-refused", func(t *testing.T) { r.mckeyIPv6Refused(t) })
	}

	for _, j := range r.tshark.wait() {
		t.Run("tshark/"+j.name, func(t *testing.T) {
			switch {
			case j.err != nil:
				t.Fatal(j.err)
			case len(j.malformed) > 0:
				t.Errorf("tshark: malformed frames %s (capture %s)", strings.Join(j.malformed, " "), j.pcap)
			}
			if j.ib != j.roce {
				t.Errorf("tshark decodes %d frames as InfiniBand, want the %d RoCEv2 frames (capture %s)", j.ib, j.roce, j.pcap)
			}
		})
	}
	if bad, err := rxeBadICRCs(ctx, vm); err != nil {
		t.Fatal(err)
	} else if bad != badBefore {
		t.Errorf("the VM's kernel logged %d \"bad ICRC\" lines", bad-badBefore)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	checkServeCounters(t, l, d.out.String(), r.sum)
}

// rdmacmSoftMAC is softroce's MAC address on the TAP.
const rdmacmSoftMAC = "52:54:00:4d:00:02"

// rdmacmRun is what TestInteropRDMACM's cells share.
type rdmacmRun struct {
	ctx context.Context
	lab *Lab
	vm  *VM
	u   *verbsUser
	l   verbsLink
	dir string
	// counters are the VM's rxe counters after the last cell.
	counters map[string]int64
	// sum counts the RoCEv2 frames of the captures to softroce.
	sum    verbsTally
	tshark *tsharkQueue
}

// tsharkJob is one capture for tshark.
type tsharkJob struct {
	name, pcap string
	// roce is the number of RoCEv2 frames CheckCapture found.
	roce int
	// What TsharkCheck returned.
	malformed []string
	ib        int
	err       error
}

// tsharkQueue runs TsharkCheck on captures one after the other in the
// background, while the next cells run: tshark takes as long as a short
// cell.
type tsharkQueue struct {
	jobs chan *tsharkJob
	done chan []*tsharkJob
}

func newTsharkQueue(ctx context.Context) *tsharkQueue {
	q := &tsharkQueue{jobs: make(chan *tsharkJob, 128), done: make(chan []*tsharkJob, 1)}
	go func() {
		var all []*tsharkJob
		for j := range q.jobs {
			j.malformed, j.ib, j.err = TsharkCheck(ctx, j.pcap)
			all = append(all, j)
		}
		q.done <- all
	}()
	return q
}

// add queues a capture.
func (q *tsharkQueue) add(j *tsharkJob) { q.jobs <- j }

// wait returns the checked captures once all are.
func (q *tsharkQueue) wait() []*tsharkJob {
	close(q.jobs)
	return <-q.done
}

// checkCapture checks a cell's capture at once (ICRCs, opcodes, address
// family: CheckCapture) and queues it for tshark.
func (r *rdmacmRun) checkCapture(t *testing.T, name, pcap string, opcodes []uint8, ipv6 bool, errorf func(string, ...any)) *CaptureReport {
	t.Helper()
	rep, err := CheckCapture(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.BadICRC) > 0 {
		errorf("%d RoCEv2 frames with a bad ICRC: %v", len(rep.BadICRC), rep.BadICRC[:min(10, len(rep.BadICRC))])
	}
	for _, op := range opcodes {
		if rep.Opcodes[op] == 0 {
			errorf("no frame with opcode 0x%02x in the capture (%s)", op, rep.OpcodeSummary())
		}
	}
	if ipv6 && rep.RoCEv6 != rep.RoCE {
		errorf("%d of %d RoCEv2 frames over IPv6, want all", rep.RoCEv6, rep.RoCE)
	}
	if !ipv6 && rep.RoCEv6 != 0 {
		errorf("%d RoCEv2 frames over IPv6, want none", rep.RoCEv6)
	}
	r.tshark.add(&tsharkJob{name: name, pcap: pcap, roce: rep.RoCE})
	return rep
}

// rxeAccepted reads the VM's rxe counters and returns how many packets
// rxe_rcv accepted (rcvd_pkts, counted after its header and ICRC checks)
// since the last call.
func (r *rdmacmRun) rxeAccepted(t *testing.T) int {
	t.Helper()
	after, err := rxeCounters(r.ctx, r.vm)
	if err != nil {
		t.Fatal(err)
	}
	n := int(after["rcvd_pkts"] - r.counters["rcvd_pkts"])
	r.counters = after
	return n
}

// startUserProc starts `softroce run -d DEV -- ARGS` as the user; nothing
// of it outlives t.
func (r *rdmacmRun) startUserProc(t *testing.T, ctx context.Context, args []string) *softroceProc {
	t.Helper()
	return r.u.start(t, ctx, r.lab, append([]string{"run", "-d", r.l.dev, "--"}, args...)...)
}

// waitListening waits until softroce's daemon lists an rdma_cm ID of
// the server sp listening on port (softroce res, as the user), as
// startCMListening waits for the VM's with the rdma tool: a UD client
// (udaddy) that came first would have some resolutions refused and wait
// for the others forever, as against the kernel, and a client that
// connects several IDs (ucmatose -c 4) would leave the server the ones
// it abandons after its first rejection.
func (r *rdmacmRun) waitListening(t *testing.T, ctx context.Context, sp *softroceProc, port int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		st, out := r.u.start(t, ctx, r.lab, "res", "-d", r.l.dev, "cm_id", "state", "LISTEN", "src-port", strconv.Itoa(port)).wait(ctx)
		switch {
		case st != 0:
			t.Fatalf("softroce res: status %d\n%s", st, out)
		case strings.TrimSpace(out) != "":
			return
		case time.Now().After(deadline):
			t.Fatalf("nothing listens on port %d after 20 s; server:\n%s", port, sp.out.String())
		}
		select {
		case <-sp.done:
			return // the server failed: the cell reports its output
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// vmRetry is a VM shell line running cmd until it succeeds, at most n
// times a pause apart: a client of a softroce server that is not yet
// listening is rejected (REJ, invalid service ID) and tries again. A
// run whose output holds stop (if not empty) is not tried again: the
// line exits with vmRetryStopped.
func vmRetry(cmd string, n int, stop string) string {
	check := ""
	if stop != "" {
		check = fmt.Sprintf(`grep -qF '%s' %s && exit %d; `, stop, vmRetryOut, vmRetryStopped)
	}
	return fmt.Sprintf(`n=0; while :; do %s >%s 2>&1; s=$?; cat %s; [ $s = 0 ] && exit 0; %sn=$((n+1)); [ $n -ge %d ] && exit 1; echo "softroce-test: try again"; sleep 0.3; done`,
		cmd, vmRetryOut, vmRetryOut, check, n)
}

// vmRetryOut is where a vmRetry line keeps a run's output in the VM.
const vmRetryOut = "/tmp/softroce-try"

// vmRetryStopped is the status of a vmRetry line whose run printed stop.
const vmRetryStopped = 75

// perftestRejected is what perftest's -R client prints when the server
// rejects its test QPs' connection for want of a listener (its control
// connection, rejected, prints "Unexpected CM event").
const perftestRejected = "Event: RDMA_CM_EVENT_REJECTED; error: 8."

// cell runs one cell and returns what went wrong with it (a harness
// failure is fatal).
func (r *rdmacmRun) cell(t *testing.T, c rdmacmCell, port int) (problems []string) {
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	vm4, vm6 := r.lab.PeerAddr(1)
	srvAddr := vm4.Addr().String()
	switch {
	case c.softroceServer && c.ipv6:
		srvAddr = r.l.softAddr6.String()
	case c.softroceServer:
		srvAddr = r.l.softAddr.String()
	case c.ipv6:
		srvAddr = vm6.Addr().String()
	}
	rep := strings.NewReplacer("{addr}", srvAddr, "{port}", strconv.Itoa(port))
	serverCmd, clientCmd := rep.Replace(c.server), rep.Replace(c.client)
	base := filepath.Join(r.dir, strings.ReplaceAll(c.cellName(), "/", "_"))
	capture, err := r.lab.StartCapture(ctx, base+".pcap")
	if err != nil {
		t.Fatal(err)
	}
	runStart := time.Now()
	var (
		vmRes      Result
		vmErr      error
		softStatus int
		softOut    string
	)
	// A side that fails leaves the other a few seconds to end.
	shortly := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		t.Cleanup(cancel)
		return c
	}
	softCmd, stop := clientCmd, ""
	if c.softroceServer {
		softCmd = serverCmd
	}
	if c.perftest {
		stop = perftestRejected
	}
	for attempt := 1; ; attempt++ {
		var raced bool
		if c.softroceServer {
			sp := r.startUserProc(t, ctx, strings.Fields(serverCmd))
			r.waitListening(t, ctx, sp, port)
			vmRes, vmErr = r.vm.Run(ctx, vmRetry(clientCmd, 40, stop))
			wctx := ctx
			if vmErr != nil || vmRes.Status != 0 {
				wctx = shortly()
			}
			if raced = vmErr == nil && vmRes.Status == vmRetryStopped && attempt < 4; raced {
				killGroup(sp.cmd)
			}
			softStatus, softOut = sp.wait(wctx)
		} else {
			job, err := startCMListening(ctx, r.vm, serverCmd, port)
			if err != nil {
				t.Fatal(err)
			}
			softStatus, softOut = r.startUserProc(t, ctx, strings.Fields(clientCmd)).wait(ctx)
			if raced = c.perftest && softStatus != 0 && strings.Contains(softOut, perftestRejected) && attempt < 4; raced {
				job.Kill()
			}
			wctx := ctx
			if softStatus != 0 {
				wctx = shortly()
			}
			vmRes, vmErr = job.Wait(wctx)
		}
		if !raced {
			break
		}
		t.Logf("attempt %d: the server had not listened for the test QPs yet (REJ 8) and the client crashed in its retry; again", attempt)
	}
	elapsed := time.Since(runStart)
	if err := capture.Stop(); err != nil {
		errorf("%v", err)
	}
	os.WriteFile(base+".softroce.log", []byte(softOut), 0o644)
	os.WriteFile(base+".rxe.log", []byte(vmRes.Output), 0o644)
	vmCmd, vmWant, softWant := clientCmd, c.clientWant, c.serverWant
	if !c.softroceServer {
		vmCmd, vmWant, softWant = serverCmd, c.serverWant, c.clientWant
	}
	switch {
	case vmErr != nil:
		errorf("rxe side (%s): %v\n%s", vmCmd, vmErr, vmRes.Output)
	case vmRes.Status != 0 || vmWant != nil && !vmWant.MatchString(vmRes.Output):
		errorf("rxe side (%s) exited %d, want 0 and a line matching %v:\n%s", vmCmd, vmRes.Status, vmWant, vmRes.Output)
	}
	if softStatus != 0 || softWant != nil && !softWant.MatchString(softOut) {
		errorf("softroce run -- %s exited %d, want 0 and a line matching %v:\n%s", softCmd, softStatus, softWant, softOut)
	}
	crep := r.checkCapture(t, c.cellName(), base+".pcap", append([]uint8{opUDSendOnly}, c.opcodes...), c.ipv6, errorf)
	softAddr := r.l.softAddr
	if c.ipv6 {
		softAddr = r.l.softAddr6
	}
	dirs, err := captureDirections(base+".pcap", softAddr)
	if err != nil {
		t.Fatal(err)
	}
	toVM, toSoft := dirs[false], dirs[true]
	r.sum.toSoftroce += toSoft.frames
	t.Logf("%v; %d frames, %d RoCEv2 (%d to rxe, %d to softroce): %s", elapsed.Round(time.Millisecond),
		crep.Frames, crep.RoCE, toVM.frames, toSoft.frames, crep.OpcodeSummary())
	// rxe drops a frame whose QP is gone before counting it: a frame
	// repeated by a retransmission, or the last frame to a QP (the ACK
	// of a program's last message) when the program has destroyed the
	// QP without waiting for it. rxe refused any other shortfall.
	qps, err := vmQPs(base+".pcap", softAddr)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.rxeAccepted(t); got > toVM.frames || got < toVM.frames-toVM.repeats-qps {
		errorf("rxe accepted %d packets (rcvd_pkts), the capture has %d to it (%d repeated, to %d QPs)", got, toVM.frames, toVM.repeats, qps)
	}
	if len(problems) > 0 {
		t.Logf("capture and logs: %s.*", base)
	}
	return problems
}

// vmQPs counts the QPs of the VM that a capture has RoCEv2 frames to
// (not QP1 nor the multicast QPN): frames to the side whose address is
// not softAddr.
func vmQPs(path string, softAddr netip.Addr) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rd, err := pcapgo.NewReader(f)
	if err != nil {
		return 0, err
	}
	qps := map[uint32]bool{}
	for {
		data, _, err := rd.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return len(qps), nil
		}
		if err != nil {
			return 0, err
		}
		pkt, err := wire.Parse(data)
		if err != nil || pkt.Dst().Unmap() == softAddr {
			continue
		}
		if qp := pkt.BTH().DestQP(); qp != 1 && qp != 0xffffff {
			qps[qp] = true
		}
	}
}

// opUDSendOnlyImm is mckey's opcode (IBTA 9.2): its messages carry the
// sender's QPN as immediate data.
const opUDSendOnlyImm = 0x65

// mckeyGroupAddr is the IPv4 group mckey's cells join.
const mckeyGroupAddr = "239.1.2.5"

// mckey runs mckey across the link: a receiver on one side (softroce's if
// softroceReceiver) joins the group, and a sender on the other joins it
// and sends its messages, again until the receiver has them all (a UD
// sender cannot know whether the receiver has joined yet). Both exit 0;
// the receiver prints the group's GID.
func (r *rdmacmRun) mckey(t *testing.T, softroceReceiver bool) (problems []string) {
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	vm4, _ := r.lab.PeerAddr(1)
	softCmd := "mckey -m " + mckeyGroupAddr + " -b " + r.l.softAddr.String()
	vmCmd := "mckey -m " + mckeyGroupAddr + " -b " + vm4.Addr().String()
	name := "mckey/softroce-receiver/ipv4"
	if !softroceReceiver {
		name = "mckey/softroce-sender/ipv4"
	}
	base := filepath.Join(r.dir, strings.ReplaceAll(name, "/", "_"))
	capture, err := r.lab.StartCapture(ctx, base+".pcap")
	if err != nil {
		t.Fatal(err)
	}
	runStart := time.Now()
	var (
		recvDone func(time.Duration) bool
		recvOut  func() (int, string)
		send     func() (int, string)
	)
	if softroceReceiver {
		rp := r.startUserProc(t, ctx, strings.Fields(softCmd))
		recvDone = func(d time.Duration) bool {
			select {
			case <-rp.done:
				return true
			case <-time.After(d):
				return false
			}
		}
		recvOut = func() (int, string) { return rp.wait(ctx) }
		send = func() (int, string) {
			res, err := r.vm.Run(ctx, vmCmd+" -s")
			if err != nil {
				return -1, err.Error() + "\n" + res.Output
			}
			return res.Status, res.Output
		}
	} else {
		job, err := r.vm.StartJob(ctx, vmCmd)
		if err != nil {
			t.Fatal(err)
		}
		recvDone = func(d time.Duration) bool {
			select {
			case <-job.done:
				return true
			case <-time.After(d):
				return false
			}
		}
		recvOut = func() (int, string) {
			res, err := job.Wait(ctx)
			if err != nil {
				return -1, err.Error() + "\n" + res.Output
			}
			return res.Status, res.Output
		}
		send = func() (int, string) { return r.startUserProc(t, ctx, strings.Fields(softCmd+" -s")).wait(ctx) }
	}
	// The receiver's join takes a moment (the kernel's under TCG).
	recvDone(time.Second)
	var sends int
	for !recvDone(time.Second) && sends < 20 && ctx.Err() == nil {
		sends++
		if st, out := send(); st != 0 || !rdmacmStatus0.MatchString(out) {
			errorf("sender (mckey -s) exited %d, want 0 and \"return status 0\":\n%s", st, out)
			break
		}
	}
	if !recvDone(5 * time.Second) {
		errorf("the receiver did not get its messages from %d senders", sends)
	}
	st, out := recvOut()
	elapsed := time.Since(runStart)
	if err := capture.Stop(); err != nil {
		errorf("%v", err)
	}
	os.WriteFile(base+".receiver.log", []byte(out), 0o644)
	if st != 0 || !rdmacmStatus0.MatchString(out) || !strings.Contains(out, "joined dgid: ::ffff:"+mckeyGroupAddr) {
		errorf("receiver exited %d, want 0, the group's GID and \"return status 0\":\n%s", st, out)
	}
	rep := r.checkCapture(t, name, base+".pcap", []uint8{opUDSendOnlyImm}, false, errorf)
	// Every RoCEv2 frame is the sender's, to the group. softroce's
	// receiver gets the VM's; softroce's sender, whose QP joined the
	// group too, gets its own, which softroce's node loops back to
	// itself as the kernel does an IP multicast datagram.
	r.sum.toSoftroce += rep.RoCE
	// Multicast frames reach rxe only once it has joined (the NIC's
	// filter): the count is not checked, but it is taken so that the
	// next cell's starts after these.
	r.rxeAccepted(t)
	t.Logf("%v, %d senders; %d frames, %d RoCEv2: %s", elapsed.Round(time.Millisecond), sends, rep.Frames, rep.RoCE, rep.OpcodeSummary())
	if len(problems) > 0 {
		t.Logf("capture and logs: %s.*", base)
	}
	return problems
}

// mckeyIPv6Group is an IPv6 group neither side may join on RoCEv2.
const mckeyIPv6Group = "ff0e::1:2:5"

// mckeyIPv6Refused runs a mckey receiver of an IPv6 group on each side:
// both fail the join alike (rdma_join_multicast's ENOTSUPP, errno 524,
// which mckey prints as an unknown error) and exit with status 255.
func (r *rdmacmRun) mckeyIPv6Refused(t *testing.T) {
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	_, vm6 := r.lab.PeerAddr(1)
	const want = "mckey: failure joining: Unknown error 524"
	res, err := r.vm.Run(ctx, "mckey -m "+mckeyIPv6Group+" -b "+vm6.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 255 || !strings.Contains(res.Output, want) {
		t.Errorf("rxe side: mckey of %s exited %d, want 255 and %q:\n%s", mckeyIPv6Group, res.Status, want, res.Output)
	}
	st, out := r.startUserProc(t, ctx, []string{"mckey", "-m", mckeyIPv6Group, "-b", r.l.softAddr6.String()}).wait(ctx)
	if st != 255 || !strings.Contains(out, want) {
		t.Errorf("softroce run -- mckey of %s exited %d, want 255 and %q:\n%s", mckeyIPv6Group, st, want, out)
	}
	r.rxeAccepted(t)
}

// TestVMRetryLine runs vmRetry's shell line in busybox's sh (the VM's):
// a command that fails is run again until it succeeds, or n times; one
// whose output holds stop is not, and the line exits vmRetryStopped;
// every run's output is printed.
func TestVMRetryLine(t *testing.T) {
	_, err := os.Stat("/bin/busybox")
	testenv.Require(t, err == nil, "busybox is not installed (apt-get install busybox-static)")
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	// The command fails (printing its run number) until its third run.
	cmd := fmt.Sprintf(`sh -c 'echo x >>%[1]s; r=$(wc -l <%[1]s); echo run $r; [ $r -ge 3 ]'`, count)
	for _, tc := range []struct {
		name, stop string
		n          int
		status     int
		runs       int
	}{
		{"succeeds at the third run", "", 5, 0, 3},
		{"gives up after n runs", "", 2, 1, 2},
		{"stops on the output", "run 1", 5, vmRetryStopped, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(count)
			line := strings.ReplaceAll(vmRetry(cmd, tc.n, tc.stop), vmRetryOut, filepath.Join(dir, "out"))
			out, err := exec.Command("/bin/busybox", "sh", "-c", line).CombinedOutput()
			status := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Errorf("status %d, want %d; output:\n%s", status, tc.status, out)
			}
			for i := 1; i <= tc.runs; i++ {
				if !strings.Contains(string(out), fmt.Sprintf("run %d\n", i)) {
					t.Errorf("output lacks run %d:\n%s", i, out)
				}
			}
			if strings.Contains(string(out), fmt.Sprintf("run %d\n", tc.runs+1)) {
				t.Errorf("more than %d runs:\n%s", tc.runs, out)
			}
		})
	}
}
