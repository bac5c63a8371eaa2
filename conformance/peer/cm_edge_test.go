//go:build linux

package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/tap"
	"github.com/softroce/softroce/wire"
)

// The Communication Manager at its edges against the kernel's: the same
// librdmacm program (testdata/cm_edge.c) on Debian 13's kernel 6.12
// rdma_cm in the VM and on softroce's daemon (`softroce serve` on a TAP,
// the program under `softroce run`, as nobody), each case with either as
// the client.

// cmEdgeEvent is one line "EV NAME id=I status=S data=TEXT t=MS" of
// cm_edge.
type cmEdgeEvent struct {
	name   string // without RDMA_CM_EVENT_
	id     int
	status int
	data   string
	t      time.Duration // since the connection's connect or request
}

var cmEdgeLine = regexp.MustCompile(`(?m)^EV RDMA_CM_EVENT_(\S+) id=(-?\d+) status=(-?\d+) data=(\S+) t=(\d+)$`)

// cmEdgeEvents returns the events of connection id in out.
func cmEdgeEvents(out string, id int) []cmEdgeEvent {
	var evs []cmEdgeEvent
	for _, m := range cmEdgeLine.FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[2])
		if i != id {
			continue
		}
		st, _ := strconv.Atoi(m[3])
		ms, _ := strconv.Atoi(m[5])
		evs = append(evs, cmEdgeEvent{name: m[1], id: i, status: st, data: m[4], t: time.Duration(ms) * time.Millisecond})
	}
	return evs
}

// cmEdgeSeq is a connection's events as "NAME/STATUS".
func cmEdgeSeq(evs []cmEdgeEvent) string {
	var s []string
	for _, e := range evs {
		s = append(s, fmt.Sprintf("%s/%d", e.name, e.status))
	}
	return strings.Join(s, " ")
}

// cmEdgeDisconnectAt returns when the program called rdma_disconnect on
// connection id ("DISCONNECT id=I t=MS"), or -1.
func cmEdgeDisconnectAt(out string, id int) time.Duration {
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^DISCONNECT id=%d t=(\d+)$`, id)).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	ms, _ := strconv.Atoi(m[1])
	return time.Duration(ms) * time.Millisecond
}

// Sequences cm_edge prints.
const (
	cmSeqClient  = "ESTABLISHED/0 DISCONNECTED/0 TIMEWAIT_EXIT/0"
	cmSeqServer  = "CONNECT_REQUEST/0 ESTABLISHED/0 DISCONNECTED/0 TIMEWAIT_EXIT/0"
	cmSeqLeftSrv = "CONNECT_REQUEST/0 ESTABLISHED/0 DISCONNECTED/-110 TIMEWAIT_EXIT/0"
)

// buildCMEdge compiles testdata/cm_edge.c with the host's cc against the
// host's librdmacm (Debian 12's). The binary runs on the Debian 13 VM
// too: its librdmacm and glibc keep every older symbol version.
func buildCMEdge(t *testing.T) string {
	t.Helper()
	_, err := os.Stat("/usr/include/rdma/rdma_cma.h")
	testenv.Require(t, err == nil, "librdmacm's headers are not installed (Debian package librdmacm-dev)")
	out := filepath.Join(t.TempDir(), "cm_edge")
	if b, err := exec.Command("cc", "-O1", "-Wall", "-Werror", "-o", out, "testdata/cm_edge.c", "-lrdmacm", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("cc cm_edge.c: %v\n%s", err, b)
	}
	return out
}

// vmWaitOutput waits until the output of VM job j holds s: the agent
// prints a job's output when it ends, so this reads the file it collects
// it in (softroce-agent's /tmp/jobs/ID.out).
func vmWaitOutput(ctx context.Context, j *Job, s string, d time.Duration) error {
	r, err := j.vm.Run(ctx, fmt.Sprintf(`n=%d; while ! grep -q '%s' /tmp/jobs/%d.out; do n=$((n-1)); [ $n -gt 0 ] || exit 1; sleep 0.05; done`,
		int(d/(50*time.Millisecond)), s, j.id))
	if err == nil && r.Status != 0 {
		err = fmt.Errorf("no %q in the output of %q within %v", s, j.cmd, d)
	}
	return err
}

// cmEdgeLab is the test's lab: the VM and softroce's daemon on it.
type cmEdgeLab struct {
	t      *testing.T
	ctx    context.Context
	lab    *Lab
	vm     *VM
	u      *verbsUser
	d      *verbsDaemon
	link   verbsLink
	prog   string // cm_edge in the user's home
	dir    string
	vmIP   netip.Addr
	vmTAP  string
	nextID int
}

// soft starts cm_edge ARGS under `softroce run`.
func (l *cmEdgeLab) soft(args ...string) *softroceProc {
	l.t.Helper()
	p := &softroceProc{done: make(chan struct{})}
	p.cmd = l.u.command(l.ctx, l.lab, false, l.u.bin, append([]string{"run", "-d", l.link.dev, "--", l.prog}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { killGroup(p.cmd) })
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// softServer starts a softroce cm_edge server and waits until it listens.
func (l *cmEdgeLab) softServer(args ...string) *softroceProc {
	l.t.Helper()
	p := l.soft(append([]string{"server"}, args...)...)
	ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
	defer cancel()
	if err := waitOutput(ctx, p, "LISTENING"); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// vmServer starts a cm_edge server in the VM and waits until it listens.
func (l *cmEdgeLab) vmServer(args ...string) *Job {
	l.t.Helper()
	j, err := l.vm.StartJob(l.ctx, "cm_edge server "+strings.Join(args, " "))
	if err != nil {
		l.t.Fatal(err)
	}
	if err := vmWaitOutput(l.ctx, j, "LISTENING", 30*time.Second); err != nil {
		j.Kill()
		r, _ := j.Wait(l.ctx)
		l.t.Fatalf("cm_edge server in the VM: %v\n%s", err, r.Output)
	}
	return j
}

// vmClient starts a cm_edge client in the VM towards softroce.
func (l *cmEdgeLab) vmClient(port int, args ...string) *Job {
	l.t.Helper()
	j, err := l.vm.StartJob(l.ctx, fmt.Sprintf("cm_edge client %s %d %s", l.link.softAddr, port, strings.Join(args, " ")))
	if err != nil {
		l.t.Fatal(err)
	}
	return j
}

// softClient starts a softroce cm_edge client towards the VM.
func (l *cmEdgeLab) softClient(port int, args ...string) *softroceProc {
	return l.soft(append([]string{"client", l.vmIP.String(), strconv.Itoa(port)}, args...)...)
}

// waitSoft waits for a softroce cm_edge and returns its output; it must
// end with status 0.
func (l *cmEdgeLab) waitSoft(p *softroceProc, d time.Duration) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(l.ctx, d)
	defer cancel()
	st, out := p.wait(ctx)
	l.t.Logf("softroce cm_edge:\n%s", out)
	if st != 0 || !strings.Contains(out, "DONE") {
		l.t.Errorf("softroce cm_edge exited %d", st)
	}
	return out
}

// waitVM waits for a VM cm_edge and returns its output; it must end with
// status 0.
func (l *cmEdgeLab) waitVM(j *Job, d time.Duration) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(l.ctx, d)
	defer cancel()
	r, err := j.Wait(ctx)
	l.t.Logf("rxe cm_edge:\n%s", r.Output)
	if err != nil || r.Status != 0 || !strings.Contains(r.Output, "DONE") {
		l.t.Errorf("rxe cm_edge exited %d: %v", r.Status, err)
	}
	return r.Output
}

// fault adds a fault rule to the daemon and returns a function deleting
// it.
func (l *cmEdgeLab) fault(rule string) func() {
	l.t.Helper()
	out, err := l.u.command(l.ctx, l.lab, false, l.u.bin, "fault", "add", "-d", l.link.dev, rule).CombinedOutput()
	if err != nil {
		l.t.Fatalf("softroce fault add %s: %v\n%s", rule, err, out)
	}
	id := regexp.MustCompile(`\d+`).FindString(string(out))
	return func() {
		if out, err := l.u.command(l.ctx, l.lab, false, l.u.bin, "fault", "del", "-d", l.link.dev, id).CombinedOutput(); err != nil {
			l.t.Errorf("softroce fault del %s (%s): %v\n%s", id, strings.TrimSpace(string(out)), err, out)
		}
	}
}

// capture starts a capture of the case on the bridge.
func (l *cmEdgeLab) capture(name string) *Capture {
	l.t.Helper()
	c, err := l.lab.StartCapture(l.ctx, filepath.Join(l.dir, name+".pcap"))
	if err != nil {
		l.t.Fatal(err)
	}
	return c
}

// cmMAD is a CM MAD seen on the wire.
type cmMAD struct {
	at     time.Time
	src    netip.Addr
	attr   mad.AttrID
	tid    uint64
	reason mad.RejReason // REJ
}

// cmMADs stops c, checks its frames (good ICRCs) and returns the CM MADs
// in it.
func cmMADs(t *testing.T, c *Capture) []cmMAD {
	t.Helper()
	checkEdgeCapture(t, c)
	f, err := os.Open(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []cmMAD
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := wire.Parse(data)
		if err != nil || p.BTH().DestQP() != 1 {
			continue
		}
		m, err := mad.ParseCM(p.Payload())
		if err != nil {
			continue
		}
		cm := cmMAD{at: ci.Timestamp, src: p.Src().Unmap(), attr: m.AttributeID(), tid: m.TransactionID()}
		if cm.attr == mad.AttrREJ {
			cm.reason = mad.REJ(m).Reason()
		}
		out = append(out, cm)
	}
}

// cmMADSummary prints the MADs with their sender and time from the first.
func cmMADSummary(ms []cmMAD, soft netip.Addr) string {
	var s []string
	for _, m := range ms {
		who := "rxe"
		if m.src == soft {
			who = "softroce"
		}
		e := fmt.Sprintf("%s %v", who, m.attr)
		if m.attr == mad.AttrREJ {
			e += fmt.Sprintf("(%d)", m.reason)
		}
		s = append(s, fmt.Sprintf("%s +%v", e, m.at.Sub(ms[0].at).Round(time.Millisecond)))
	}
	return strings.Join(s, ", ")
}

// cmCount counts the MADs of attr from src.
func cmCount(ms []cmMAD, src netip.Addr, attr mad.AttrID) int {
	n := 0
	for _, m := range ms {
		if m.src == src && m.attr == attr {
			n++
		}
	}
	return n
}

// TestInteropCMEdge runs the Communication Manager's edge cases between
// softroce's daemon and Debian 13's kernel 6.12 rdma_cm (rdma-core 56's
// librdmacm in the VM; the kernel softroce's CM follows), with
// testdata/cm_edge.c on both sides, each case with softroce as the client
// and as the server, and checks the events and statuses librdmacm reports
// on both sides, the timers, and the CM MADs on the wire:
//
//   - a connect to a port nobody listens on: REJ 8 (invalid service ID),
//     REJECTED with status 8;
//   - a listener that rejects with private data: REJ 28, REJECTED with
//     status 28 and the data; the CONNECT_REQUEST carried the client's;
//   - softroce's first REQ lost (a fault rule of the daemon): the REQ
//     timer (4608 ms) sends it again and the connection is made; with
//     softroce as the server its first REP lost: its REP timer (4096 ms)
//     sends it again before the kernel's REQ timer runs out; the VM's
//     first REQ lost (an ebtables rule on the lab's bridge): the kernel's
//     REQ timer (4608 ms) sends it again, with the same TID;
//   - two connects racing for one listener: both are made;
//   - a peer that disappears (the VM's TAP goes down between them): the
//     side left disconnects, its DREQ is sent 16 times 4096 ms apart,
//     then DISCONNECTED with -ETIMEDOUT; both directions at once. Once the
//     link is back the other side's DREQ finds no connection and is
//     answered all the same;
//   - MADs for QP1 that no agent takes, from an in-process softroce node's
//     GSI QP: a Get (CM ClassPortInfo, PerfMgt PortCounters) is answered
//     by both with the same MAD as a GetResp of status 0x000c, byte for
//     byte; a CM Get of a REQ, a LAP, a CM MAD of class version 1 get
//     nothing from either.
//
// Every disconnect ends with TIMEWAIT_EXIT 512 ms after DISCONNECTED
// (the timewait of two 6.12 CMs). One VM boot serves every case; the test
// takes about two and a half minutes, of which the DREQ retries take 70 s.
func TestInteropCMEdge(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"cc", "tcpdump", "setpriv"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed")
	}
	_, err := os.Stat("/dev/net/tun")
	testenv.Require(t, err == nil, "no /dev/net/tun (the tun module)")
	progPath := buildCMEdge(t)
	prog, err := os.ReadFile(progPath)
	if err != nil {
		t.Fatal(err)
	}
	img := buildTestImageFor(t, Trixie)
	u := newVerbsUser(t, buildSoftroce(t))
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := addUserTAP(ctx, lab, softroceUserTAP, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	l := &cmEdgeLab{t: t, ctx: ctx, lab: lab, u: u, dir: dir, link: verbsLinks(lab)[0], prog: filepath.Join(u.home, "cm_edge")}
	if err := os.WriteFile(l.prog, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	ip4, ip6 := lab.PeerAddr(1)
	l.vmIP = ip4.Addr()
	con, err := os.Create(filepath.Join(dir, "vm1.console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	start := time.Now()
	vmcfg := VMConfig{Image: img, Name: "vm1", IP: ip4, IP6: ip6, Console: con, Timeout: 10 * time.Minute,
		Programs: map[string][]byte{"cm_edge": prog}}
	l.vm, err = lab.StartVM(ctx, vmcfg)
	if err != nil {
		t.Fatal(err)
	}
	l.vmTAP = "tap-vm1"
	t.Cleanup(func() {
		l.vm.Kill()
		<-l.vm.Done()
		if t.Failed() {
			logConsoleTail(t, con.Name(), 40)
		}
	})
	if _, err := l.vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	t.Logf("VM up in %v", time.Since(start).Round(time.Millisecond))
	l.d = u.serve(t, ctx, lab, l.link)
	t.Cleanup(func() { os.WriteFile(filepath.Join(dir, "serve.log"), []byte(l.d.out.String()), 0o644) })
	soft := l.link.softAddr

	sub := func(name string, f func(l *cmEdgeLab)) {
		t.Run(name, func(t *testing.T) {
			c := *l
			c.t = t
			start := time.Now()
			f(&c)
			t.Logf("%v", time.Since(start).Round(time.Millisecond))
		})
	}

	// Nobody listens: REJ 8 from the passive CM, REJECTED 8.
	sub("no-listener/softroce-client", func(l *cmEdgeLab) {
		c := l.capture("no-listener-softroce-client")
		out := l.waitSoft(l.softClient(19801), 30*time.Second)
		checkCMSeq(l.t, "softroce client", cmEdgeEvents(out, 0), "REJECTED/8")
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		checkREJ(l.t, ms, l.vmIP, mad.RejInvalidServiceID)
	})
	sub("no-listener/rxe-client", func(l *cmEdgeLab) {
		c := l.capture("no-listener-rxe-client")
		out := l.waitVM(l.vmClient(19802), 30*time.Second)
		checkCMSeq(l.t, "rxe client", cmEdgeEvents(out, 0), "REJECTED/8")
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		checkREJ(l.t, ms, soft, mad.RejInvalidServiceID)
	})

	// The listener rejects with private data: REJ 28 carrying it.
	sub("reject/softroce-client", func(l *cmEdgeLab) {
		c := l.capture("reject-softroce-client")
		srv := l.vmServer("19803", "-r")
		out := l.waitSoft(l.softClient(19803), 30*time.Second)
		sout := l.waitVM(srv, 10*time.Second)
		checkCMSeq(l.t, "softroce client", cmEdgeEvents(out, 0), "REJECTED/28")
		checkCMData(l.t, "softroce client's REJECTED", cmEdgeEvents(out, 0), "nope")
		checkCMSeq(l.t, "rxe server", cmEdgeEvents(sout, 0), "CONNECT_REQUEST/0")
		checkCMData(l.t, "rxe server's CONNECT_REQUEST", cmEdgeEvents(sout, 0), "hello")
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		checkREJ(l.t, ms, l.vmIP, mad.RejConsumerDefined)
	})
	sub("reject/rxe-client", func(l *cmEdgeLab) {
		c := l.capture("reject-rxe-client")
		srv := l.softServer("19804", "-r")
		out := l.waitVM(l.vmClient(19804), 30*time.Second)
		sout := l.waitSoft(srv, 10*time.Second)
		checkCMSeq(l.t, "rxe client", cmEdgeEvents(out, 0), "REJECTED/28")
		checkCMData(l.t, "rxe client's REJECTED", cmEdgeEvents(out, 0), "nope")
		checkCMSeq(l.t, "softroce server", cmEdgeEvents(sout, 0), "CONNECT_REQUEST/0")
		checkCMData(l.t, "softroce server's CONNECT_REQUEST", cmEdgeEvents(sout, 0), "hello")
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		checkREJ(l.t, ms, soft, mad.RejConsumerDefined)
	})

	// softroce's first MAD on QP1 is lost: the REQ as client, the REP as
	// server.
	const dropFirstMAD = "wire:drop,qp=1,opcode=UD_SEND_ONLY,nth=1"
	sub("lost-req/softroce-client", func(l *cmEdgeLab) {
		c := l.capture("lost-req-softroce-client")
		srv := l.vmServer("19805")
		del := l.fault(dropFirstMAD)
		defer del()
		out := l.waitSoft(l.softClient(19805), 60*time.Second)
		sout := l.waitVM(srv, 30*time.Second)
		evs := cmEdgeEvents(out, 0)
		checkCMSeq(l.t, "softroce client", evs, cmSeqClient)
		checkCMSeq(l.t, "rxe server", cmEdgeEvents(sout, 0), cmSeqServer)
		if len(evs) > 0 && (evs[0].t < 4500*time.Millisecond || evs[0].t > 6*time.Second) {
			l.t.Errorf("ESTABLISHED %v after rdma_connect, want one REQ timeout later (4608 ms)", evs[0].t)
		}
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		if n := cmCount(ms, soft, mad.AttrREQ); n != 1 {
			l.t.Errorf("%d REQs from softroce on the wire, want the retransmission alone", n)
		}
	})
	sub("lost-rep/rxe-client", func(l *cmEdgeLab) {
		c := l.capture("lost-rep-rxe-client")
		srv := l.softServer("19806")
		del := l.fault(dropFirstMAD)
		defer del()
		out := l.waitVM(l.vmClient(19806), 60*time.Second)
		sout := l.waitSoft(srv, 30*time.Second)
		evs := cmEdgeEvents(out, 0)
		checkCMSeq(l.t, "rxe client", evs, cmSeqClient)
		checkCMSeq(l.t, "softroce server", cmEdgeEvents(sout, 0), cmSeqServer)
		if len(evs) > 0 && (evs[0].t < 4*time.Second || evs[0].t > 6*time.Second) {
			l.t.Errorf("ESTABLISHED %v after rdma_connect, want one REP timeout later (4096 ms)", evs[0].t)
		}
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		if n, m := cmCount(ms, l.vmIP, mad.AttrREQ), cmCount(ms, soft, mad.AttrREP); n != 1 || m != 1 {
			l.t.Errorf("%d REQs from rxe and %d REPs from softroce on the wire, want 1 and the retransmitted 1", n, m)
		}
	})

	// The VM's first REQ lost: softroce's fault rules act on what it
	// sends, so a bridge filter drops the frames to softroce's TAP until
	// it has dropped one (the bridge's capture still sees it).
	sub("lost-req/rxe-client", func(l *cmEdgeLab) {
		_, err := exec.LookPath("ebtables")
		testenv.Require(l.t, err == nil, "ebtables is not installed")
		rule := []string{"FORWARD", "-p", "IPv4", "--ip-proto", "udp", "--ip-dport", "4791", "-o", softroceUserTAP, "-j", "DROP"}
		if out, err := l.lab.Exec(l.ctx, append([]string{"ebtables", "-A"}, rule...)...); err != nil {
			testenv.Require(l.t, false, fmt.Sprintf("the kernel takes no bridge filter: %v %s", err, out))
		}
		removed := false
		remove := func() {
			if !removed {
				removed = true
				if _, err := l.lab.Exec(context.Background(), append([]string{"ebtables", "-D"}, rule...)...); err != nil {
					l.t.Error(err)
				}
			}
		}
		defer remove()
		c := l.capture("lost-req-rxe-client")
		srv := l.softServer("19811")
		cli := l.vmClient(19811)
		dropped := regexp.MustCompile(`pcnt = [1-9]`)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			out, err := l.lab.Exec(l.ctx, "ebtables", "-L", "FORWARD", "--Lc")
			if err != nil {
				l.t.Fatal(err)
			}
			if dropped.Match(out) {
				break
			}
			if time.Now().After(deadline) {
				l.t.Fatalf("the VM's REQ never came:\n%s", out)
			}
		}
		remove()
		out := l.waitVM(cli, 60*time.Second)
		sout := l.waitSoft(srv, 30*time.Second)
		evs := cmEdgeEvents(out, 0)
		checkCMSeq(l.t, "rxe client", evs, cmSeqClient)
		checkCMSeq(l.t, "softroce server", cmEdgeEvents(sout, 0), cmSeqServer)
		if len(evs) > 0 && (evs[0].t < 4500*time.Millisecond || evs[0].t > 6*time.Second) {
			l.t.Errorf("ESTABLISHED %v after rdma_connect, want one REQ timeout later (4608 ms)", evs[0].t)
		}
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		var reqs []cmMAD
		for _, m := range ms {
			if m.src == l.vmIP && m.attr == mad.AttrREQ {
				reqs = append(reqs, m)
			}
		}
		if len(reqs) != 2 || reqs[0].tid != reqs[1].tid {
			l.t.Errorf("REQs from rxe on the wire: %+v, want the lost one and its retransmission", reqs)
		} else {
			l.t.Logf("rxe retransmitted its REQ %v later", reqs[1].at.Sub(reqs[0].at).Round(time.Millisecond))
		}
	})

	// Two connects race for one listener.
	race := func(l *cmEdgeLab, out, sout string) {
		for i := range 2 {
			checkCMSeq(l.t, fmt.Sprintf("client connection %d", i), cmEdgeEvents(out, i), cmSeqClient)
			checkCMSeq(l.t, fmt.Sprintf("server connection %d", i), cmEdgeEvents(sout, i), cmSeqServer)
		}
	}
	sub("race/softroce-client", func(l *cmEdgeLab) {
		srv := l.vmServer("19807", "-n", "2")
		out := l.waitSoft(l.softClient(19807, "-n", "2"), 30*time.Second)
		race(l, out, l.waitVM(srv, 30*time.Second))
	})
	sub("race/rxe-client", func(l *cmEdgeLab) {
		srv := l.softServer("19808", "-n", "2")
		out := l.waitVM(l.vmClient(19808, "-n", "2"), 30*time.Second)
		race(l, out, l.waitSoft(srv, 30*time.Second))
	})

	// The peer disappears: both directions at once, the servers left.
	sub("peer-gone", func(l *cmEdgeLab) {
		c := l.capture("peer-gone")
		softLeft, softGone := filepath.Join(u.home, "left"), filepath.Join(u.home, "gone")
		// The VM's server is left with softroce's client gone; softroce's
		// server with the VM's client gone.
		vmSrv := l.vmServer("19809", "-w", "/tmp/left")
		softCli := l.softClient(19809, "-w", softGone)
		softSrv := l.softServer("19810", "-w", softLeft)
		vmCli := l.vmClient(19810, "-w", "/tmp/gone")
		for _, j := range []*Job{vmSrv, vmCli} {
			if err := vmWaitOutput(l.ctx, j, "ESTABLISHED", 30*time.Second); err != nil {
				l.t.Fatal(err)
			}
		}
		for _, p := range []*softroceProc{softCli, softSrv} {
			ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
			err := waitOutput(ctx, p, "ESTABLISHED")
			cancel()
			if err != nil {
				l.t.Fatal(err)
			}
		}
		if err := ipCmd(l.ctx, "-n", l.lab.Name(), "link", "set", l.vmTAP, "down"); err != nil {
			l.t.Fatal(err)
		}
		linkDown := true
		defer func() {
			if linkDown {
				ipCmd(context.Background(), "-n", l.lab.Name(), "link", "set", l.vmTAP, "up")
			}
		}()
		if err := os.WriteFile(softLeft, nil, 0o644); err != nil {
			l.t.Fatal(err)
		}
		if _, err := l.vm.Run(l.ctx, "touch /tmp/left"); err != nil {
			l.t.Fatal(err)
		}
		soutLeft := l.waitSoft(softSrv, 150*time.Second)
		voutLeft := l.waitVM(vmSrv, 30*time.Second)
		for _, side := range []struct{ name, out string }{{"softroce server", soutLeft}, {"rxe server", voutLeft}} {
			evs := cmEdgeEvents(side.out, 0)
			checkCMSeq(l.t, side.name+" left", evs, cmSeqLeftSrv)
			if len(evs) == 4 {
				dreq := evs[2].t - cmEdgeDisconnectAt(side.out, 0)
				tw := evs[3].t - evs[2].t
				l.t.Logf("%s: DISCONNECTED %v after its DREQ, TIMEWAIT_EXIT %v later", side.name, dreq.Round(time.Millisecond), tw.Round(time.Millisecond))
				if dreq < 64*time.Second || dreq > 80*time.Second {
					l.t.Errorf("%s: DISCONNECTED %v after rdma_disconnect, want 16 DREQs 4096 ms apart", side.name, dreq)
				}

			}
		}
		// The link is back: the clients' DREQs find no connection and
		// are answered all the same.
		if err := ipCmd(l.ctx, "-n", l.lab.Name(), "link", "set", l.vmTAP, "up"); err != nil {
			l.t.Fatal(err)
		}
		linkDown = false
		if err := os.WriteFile(softGone, nil, 0o644); err != nil {
			l.t.Fatal(err)
		}
		if _, err := l.vm.Run(l.ctx, "touch /tmp/gone"); err != nil {
			l.t.Fatal(err)
		}
		checkCMSeq(l.t, "softroce client", cmEdgeEvents(l.waitSoft(softCli, 30*time.Second), 0), cmSeqClient)
		checkCMSeq(l.t, "rxe client", cmEdgeEvents(l.waitVM(vmCli, 30*time.Second), 0), cmSeqClient)
		ms := cmMADs(l.t, c)
		l.t.Logf("wire: %s", cmMADSummary(ms, soft))
		// The bridge sees softroce's DREQs, not the VM's (its TAP was
		// down): 16 from the server left, then the client's.
		if n := cmCount(ms, soft, mad.AttrDREQ); n != 17 {
			l.t.Errorf("%d DREQs from softroce on the wire, want 16 from its server and 1 from its client", n)
		}
	})

	// MADs QP1 takes no agent for: the kernel's MAD layer answers a Get
	// or a Set with a GetResp of status 0x000c and drops the rest;
	// softroce's daemon must answer the same.
	sub("unmatched-mad", func(l *cmEdgeLab) {
		c := l.capture("unmatched-mad")
		probeIP := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, 0, 3}), 24)
		p := newGSIProbe(l.t, l.ctx, l.lab, probeIP)
		mads := []struct {
			name   string
			make   func(m mad.MAD)
			answer bool
		}{
			{"CM Get ClassPortInfo", func(m mad.MAD) { m[3], m[16], m[17] = mad.MethodGet, 0, 1 }, true},
			{"PerfMgt Get PortCounters", func(m mad.MAD) { m[1], m[2], m[3], m[16], m[17] = 0x04, 1, mad.MethodGet, 0, 0x12 }, true},
			{"CM Get of a REQ", func(m mad.MAD) { m[3] = mad.MethodGet }, false},
			{"CM LAP", func(m mad.MAD) { m[17] = 0x19 }, false},
			{"CM class version 1", func(m mad.MAD) { m[2] = 1 }, false},
		}
		for i, mm := range mads {
			m := mad.NewCM(mad.AttrREQ, 0x5a5a0000+uint64(i))
			for j := mad.HeaderSize; j < mad.Size; j++ {
				m[j] = byte(j)
			}
			mm.make(m)
			for _, peer := range []struct {
				name string
				addr netip.Addr
			}{{"rxe", l.vmIP}, {"softroce", soft}} {
				got := p.exchange(l.t, peer.addr, m, 500*time.Millisecond)
				want := mad.MAD(nil)
				if mm.answer {
					want = append(mad.MAD(nil), m...)
					want[3] = mad.MethodGetResp
					want[4], want[5] = 0, 0x0c
				}
				switch {
				case want == nil && len(got) != 0:
					l.t.Errorf("%s: %s answers %x, want nothing", mm.name, peer.name, got[0][:mad.HeaderSize])
				case want != nil && (len(got) != 1 || !bytes.Equal(got[0], want)):
					l.t.Errorf("%s: %s answers %d MADs %x, want the GetResp %x", mm.name, peer.name, len(got), got, want[:mad.HeaderSize])
				case want != nil:
					l.t.Logf("%s: %s answers %x", mm.name, peer.name, got[0][:mad.HeaderSize])
				}
			}
		}
		checkEdgeCapture(l.t, c)
	})

	if err := l.d.stop(); err != nil {
		t.Error(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := l.vm.Shutdown(sctx); err != nil {
		t.Error(err)
	}
}

// checkCMSeq checks a connection's events against want ("NAME/STATUS
// ..."); a TIMEWAIT_EXIT must come the timewait of two Linux 6.12 CMs
// (512 ms) after the DISCONNECTED before it.
func checkCMSeq(t *testing.T, who string, evs []cmEdgeEvent, want string) {
	t.Helper()
	if got := cmEdgeSeq(evs); got != want {
		t.Errorf("%s: events %q, want %q", who, got, want)
		return
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].name != "TIMEWAIT_EXIT" || evs[i-1].name != "DISCONNECTED" {
			continue
		}
		if tw := evs[i].t - evs[i-1].t; tw < cmTimewait-50*time.Millisecond || tw > cmTimewait+time.Second {
			t.Errorf("%s: TIMEWAIT_EXIT %v after DISCONNECTED, want the timewait of %v", who, tw, cmTimewait)
		}
	}
}

// cmTimewait is the timewait of a connection between two Linux 6.12 CMs
// on RoCE: 2^(17−8) ms for the ACK timeout 17 of a path of packet life
// time 16.
const cmTimewait = 512 * time.Millisecond

// checkCMData checks that the connection's first event carries data.
func checkCMData(t *testing.T, who string, evs []cmEdgeEvent, data string) {
	t.Helper()
	if len(evs) == 0 || evs[0].data != data {
		t.Errorf("%s: private data %v, want %q", who, evs, data)
	}
}

// checkREJ checks that from sent one REJ with reason on the wire, and
// nothing else after the REQ.
func checkREJ(t *testing.T, ms []cmMAD, from netip.Addr, reason mad.RejReason) {
	t.Helper()
	n := 0
	for _, m := range ms {
		if m.attr == mad.AttrREJ {
			n++
			if m.src != from || m.reason != reason {
				t.Errorf("REJ %d from %v, want %d from %v", m.reason, m.src, reason, from)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d REJs on the wire, want 1", n)
	}
}

// gsiProbe is a GSI QP of an in-process softroce node on the lab: it
// sends MADs to QP1 of an address and takes what comes back.
type gsiProbe struct {
	n    *node.Node
	pd   *emu.PD
	cq   *emu.CQ
	qp   *emu.QP
	mr   *emu.MR
	addr uint64
	buf  []byte
	sgid int
}

// gsiSlot is the room of one receive (GRH and MAD) or send.
const gsiSlot = emu.GRHSize + mad.Size

// newGSIProbe starts a node on the lab's TAP softroceTAP with address
// ip and a GSI QP on its device with 16 receives posted.
func newGSIProbe(t *testing.T, ctx context.Context, lab *Lab, ip netip.Prefix) *gsiProbe {
	t.Helper()
	if err := lab.AddTAP(ctx, softroceTAP); err != nil {
		t.Fatal(err)
	}
	p := &gsiProbe{}
	if err := lab.Do(func() error {
		td, err := tap.Open(softroceTAP, &tap.Config{Bridge: lab.Bridge(), MTU: lab.MTU()})
		if err != nil {
			return err
		}
		if p.n, err = node.New(context.Background(), node.Config{Link: td, NoDAD: true, Addrs: []netip.Prefix{ip}, Seed: 11}); err != nil {
			td.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.n.Close() })
	dev := p.n.Device()
	var err error
	if p.pd, err = dev.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	if p.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: 64}); err != nil {
		t.Fatal(err)
	}
	if err := dev.TakeMADLayer(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatal(err)
	}
	if p.qp, err = p.pd.CreateQP(&emu.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: qpstate.TypeGSI, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a qpstate.Attr
		m qpstate.AttrMask
	}{
		{qpstate.Attr{QPState: qpstate.StateInit, QKey: emu.GSIQKey}, qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrQKey},
		{qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState},
		{qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState | qpstate.AttrSQPSN},
	} {
		if err := p.qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	p.addr, p.buf = dev.Memory().Alloc(17 * gsiSlot)
	if p.mr, err = p.pd.RegUserMR(p.addr, uint64(len(p.buf)), p.addr, ib.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := p.qp.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: p.addr + uint64(i*gsiSlot), Length: gsiSlot, LKey: p.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	p.sgid = -1
	for i := 0; i < pa.GIDTblLen && p.sgid < 0; i++ {
		if e, err := dev.QueryGID(1, i); err == nil && e.Type == ib.GIDTypeRoCEv2 && e.GID.Addr() == ip.Addr() {
			p.sgid = i
		}
	}
	if p.sgid < 0 {
		t.Fatalf("no RoCEv2 GID of %v", ip)
	}
	return p
}

// exchange sends m to QP1 of dst and returns the MADs that come back
// within wait.
func (p *gsiProbe) exchange(t *testing.T, dst netip.Addr, m mad.MAD, wait time.Duration) []mad.MAD {
	t.Helper()
	dmac, err := nodeResolver(p.n)(emu.GIDFromAddr(dst))
	if err != nil {
		t.Fatal(err)
	}
	ah, err := p.pd.CreateAH(&ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: dmac,
		GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(dst), SGIDIndex: uint8(p.sgid), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	send := 16 * gsiSlot
	copy(p.buf[send:], m)
	if _, err := p.qp.PostSend([]emu.SendWR{{WRID: 100, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: p.addr + uint64(send), Length: mad.Size, LKey: p.mr.LKey()}},
		AH:     ah, RemoteQPN: 1, RemoteQKey: emu.GSIQKey}}); err != nil {
		t.Fatal(err)
	}
	var got []mad.MAD
	wc := make([]emu.WC, 4)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, w := range wc[:p.cq.Poll(wc)] {
			if w.Opcode&emu.WCRecv == 0 {
				if w.Status != emu.WCSuccess {
					t.Fatalf("send to QP1 of %v: %v", dst, w.Status)
				}
				continue
			}
			i := int(w.WRID)
			if w.Status == emu.WCSuccess && int(w.ByteLen) >= gsiSlot {
				got = append(got, append(mad.MAD(nil), p.buf[i*gsiSlot+emu.GRHSize:(i+1)*gsiSlot]...))
			}
			p.qp.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: p.addr + uint64(i*gsiSlot), Length: gsiSlot, LKey: p.mr.LKey()}}}})
		}
	}
	return got
}
