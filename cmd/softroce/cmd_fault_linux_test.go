package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/conformance/edge"
	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
)

// faultsOf returns the profile's fault cells as "RULE: ACTION" with their
// counts.
func faultsOf(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	p, err := coverage.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for k, n := range p.Faults {
		m[k.Rule+": "+k.Action] = n
	}
	return m
}

// TestFaultsReachTheProgram: each kind of fault rule, given to "softroce
// run --fault" or added live with "softroce fault add", makes an unmodified
// program (the C edge program, Debian's ibv_asyncwatch) see what it must,
// and the coverage profile lists the rule with what it did:
//   - verbs: the next CREATE_QP fails with ENOMEM (ibv_create_qp's errno);
//   - qp:silent: a SEND to a QP that answers nothing ends in
//     IBV_WC_RETRY_EXC_ERR where it succeeds without the rule;
//   - wire: dropping every SEND_ONLY does the same through the link
//     faults; a drop of the first, a corrupted SEND or ACK (a flipped bit
//     fails the receiver's ICRC check, unless it lands in a field the ICRC
//     leaves out), duplicated, reordered or delayed packets only cost a
//     retransmission or a wait (success);
//   - port: ibv_asyncwatch sees IBV_EVENT_PORT_ERR, IBV_EVENT_GID_CHANGE and
//     IBV_EVENT_PORT_ACTIVE for port:down, port:gid and port:up.
func TestFaultsReachTheProgram(t *testing.T) {
	home := userHome(t)
	edgeProgram(t, home)
	cov := func(name string) string { return filepath.Join(home, "run", name+".json") }
	t.Run("verbs", func(t *testing.T) {
		rule := "verbs:fail,verb=create_qp,errno=ENOMEM"
		exe := filepath.Join(home, "softroce_edge")
		cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe20", "--ip", "10.82.0.1/24",
			"--coverage", cov("verbs"), "--fault", rule, "--", exe, "flush")
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "flush setup ibv_create_qp: ENOMEM") {
			t.Fatalf("the program did not see ENOMEM from ibv_create_qp:\n%s", out)
		}
		if f := faultsOf(t, cov("verbs")); f[rule+": fail ENOMEM"] != 1 {
			t.Errorf("coverage faults %v", f)
		}
		report, err := userCommand(t, home, nil, "softroce", "coverage", cov("verbs")).CombinedOutput()
		if err != nil || !strings.Contains(string(report), "faults injected:\n  "+rule+": fail ENOMEM 1\n") ||
			!strings.Contains(string(report), "IB_USER_VERBS_CMD_CREATE_QP ENOMEM     1") {
			t.Errorf("softroce coverage: %v\n%s", err, report)
		}
	})
	for _, tc := range []struct {
		name  string
		rules []string
		want  string
		cells []string
	}{
		{"qp-silent", []string{"qp:silent,qp=0x11", "qp:silent,qp=0x12"}, "transport_retry_counter_exceeded",
			[]string{"silent RC_SEND_ONLY"}},
		{"wire-drop-all", []string{"wire:drop,opcode=SEND_ONLY"}, "transport_retry_counter_exceeded",
			[]string{"wire:drop,opcode=SEND_ONLY: drop RC_SEND_ONLY"}},
		{"wire-drop-nth", []string{"wire:drop,opcode=SEND_ONLY,nth=1"}, "success",
			[]string{"wire:drop,opcode=SEND_ONLY,nth=1: drop RC_SEND_ONLY"}},
		{"wire-duplicate", []string{"wire:duplicate,opcode=SEND_ONLY"}, "success",
			[]string{"wire:duplicate,opcode=SEND_ONLY: duplicate RC_SEND_ONLY"}},
		{"wire-corrupt", []string{"wire:corrupt,opcode=SEND_ONLY,count=1"}, "success",
			[]string{"wire:corrupt,opcode=SEND_ONLY,count=1: corrupt RC_SEND_ONLY"}},
		{"wire-corrupt-ack", []string{"wire:corrupt,opcode=ACKNOWLEDGE,nth=1"}, "success",
			[]string{"wire:corrupt,opcode=ACKNOWLEDGE,nth=1: corrupt RC_ACKNOWLEDGE"}},
		{"wire-reorder", []string{"wire:reorder,opcode=SEND_ONLY,count=1"}, "success",
			[]string{"wire:reorder,opcode=SEND_ONLY,count=1: reorder RC_SEND_ONLY"}},
		// One rule per opcode: with a single wire:delay,count=2 the
		// second frame delayed was the ACK, or, on a loaded machine
		// where the delayed SEND outlived the QP's 4 ms timeout, the
		// SEND's retransmission.
		{"wire-delay", []string{"wire:delay,opcode=SEND_ONLY,count=1", "wire:delay,opcode=ACKNOWLEDGE,count=1"}, "success",
			[]string{"wire:delay,opcode=SEND_ONLY,count=1: delay RC_SEND_ONLY",
				"wire:delay,opcode=ACKNOWLEDGE,count=1: delay RC_ACKNOWLEDGE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-d", "rxe21", "--ip", "10.83.0.1/24", "--seed", "7", "--coverage", cov(tc.name)}
			for _, r := range tc.rules {
				args = append(args, "--fault", r)
			}
			got, out := runEdge(t, home, args, "send")
			if got["send status"] != tc.want {
				t.Errorf("send status %q, want %q\n%s", got["send status"], tc.want, out)
			}
			f := faultsOf(t, cov(tc.name))
			for _, c := range tc.cells {
				found := false
				for k := range f {
					found = found || strings.Contains(k, c)
				}
				if !found {
					t.Errorf("coverage faults %v lack %q", f, c)
				}
			}
		})
	}
	t.Run("port", func(t *testing.T) {
		tool := distroTool(t, "ibv_asyncwatch", "ibverbs-utils")
		env := serveAsUser(t, home, "rxe22", "--ip", "10.84.0.1/24", "--coverage", cov("port"))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		watch := userCommand(t, home, env, tool, "-d", "rxe22")
		watch = exec.CommandContext(ctx, watch.Path, watch.Args[1:]...)
		watch.Env = userCommand(t, home, env, tool).Env
		var wout bytes.Buffer
		watch.Stdout, watch.Stderr = &wout, &wout
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { watch.Process.Kill(); watch.Wait() }()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(wout.String(), "async event FD"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("ibv_asyncwatch did not start:\n%s", wout.String())
			}
		}
		for _, r := range []string{"port:down", "port:gid,ip=10.84.0.9/24", "port:up"} {
			if out, err := userCommand(t, home, nil, "softroce", "fault", "add", "-d", "rxe22", r).CombinedOutput(); err != nil {
				t.Fatalf("softroce fault add %s: %v\n%s", r, err, out)
			}
		}
		list, err := userCommand(t, home, nil, "softroce", "fault", "list", "-d", "rxe22").CombinedOutput()
		if err != nil || !strings.Contains(string(list), "1 port:down applied=1") {
			t.Errorf("softroce fault list: %v\n%s", err, list)
		}
		if out, err := userCommand(t, home, nil, "softroce", "fault", "del", "-d", "rxe22", "1").CombinedOutput(); err != nil {
			t.Errorf("softroce fault del 1: %v\n%s", err, out)
		}
		list, _ = userCommand(t, home, nil, "softroce", "fault", "list", "-d", "rxe22").CombinedOutput()
		if strings.Contains(string(list), "port:down") || !strings.Contains(string(list), "3 port:up applied=1") {
			t.Errorf("softroce fault list after del 1:\n%s", list)
		}
		if out, err := userCommand(t, home, nil, "softroce", "fault", "del", "-d", "rxe22", "1").CombinedOutput(); err == nil ||
			!strings.Contains(string(out), "no rule 1") {
			t.Errorf("a second del 1: %v\n%s", err, out)
		}
		if out, err := userCommand(t, home, nil, "softroce", "fault", "add", "-d", "rxe22", "port:sideways").CombinedOutput(); err == nil ||
			!strings.Contains(string(out), `unknown action "sideways" for port`) {
			t.Errorf("a bad rule added live: %v\n%s", err, out)
		}
		want := []string{"IBV_EVENT_PORT_ERR (10), port 1", "IBV_EVENT_GID_CHANGE (18), port 1", "IBV_EVENT_PORT_ACTIVE (9), port 1"}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(wout.String(), w)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ibv_asyncwatch saw:\n%s\nwant %q", wout.String(), want)
			}
		}
		live := coverageReport(t, home, "--live", "-d", "rxe22")
		seen := map[string]uint64{}
		for _, f := range live.Faults {
			seen[f.Rule+": "+f.Action] = f.Count
		}
		for _, c := range []string{"port:down: port down", "port:up: port up", "port:gid,ip=10.84.0.9/24: port gid 10.84.0.9/24"} {
			if seen[c] != 1 {
				t.Errorf("coverage --live faults %v lack %q", seen, c)
			}
		}
	})
}

// waitingEdge starts the edge program's case c (errwait or writewait) on
// the daemon of env, waits for the line naming what the fault needs
// ("CASE KEY VALUE") and returns VALUE and a function that lets the
// program go on and returns its results.
func waitingEdge(t *testing.T, home string, env []string, dev, c, key string) (string, func() map[string]string) {
	t.Helper()
	cmd := userCommand(t, home, env, filepath.Join(home, "softroce_edge"), "-d", dev, c)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var value string
	for deadline := time.Now().Add(20 * time.Second); value == ""; time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == c && f[1] == key {
				value = f[2]
			}
		}
		if value == "" && time.Now().After(deadline) {
			t.Fatalf("%s did not print its %s:\n%s", c, key, out.String())
		}
	}
	return value, func() map[string]string {
		stdin.Write([]byte("go\n"))
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out.String())
		}
		m, _, err := edge.Parse(out.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out.String())
		}
		return m
	}
}

// faultAdd runs "softroce fault add -d DEV RULE" as the test's user.
func faultAdd(t *testing.T, home, dev, rule string) {
	t.Helper()
	if out, err := userCommand(t, home, nil, "softroce", "fault", "add", "-d", dev, rule).CombinedOutput(); err != nil {
		t.Fatalf("softroce fault add %s: %v\n%s", rule, err, out)
	}
}

// TestQPFaultsReachTheProgram: the QP rules, added live to a serving
// daemon, change what the edge program sees, and the coverage profile
// lists each:
//   - qp:err moves the program's QP to ERR: its posted receives complete
//     with IBV_WC_WR_FLUSH_ERR;
//   - qp:rnr answers the SENDs to the peer's QP with RNR NAKs: with
//     rnr_retry 1 the sender gets IBV_WC_RNR_RETRY_EXC_ERR (the transport
//     counted the RNR NAKs it received);
//   - qp:invalidate makes the peer refuse the rkey of an RDMA WRITE that
//     succeeds without it: IBV_WC_REM_ACCESS_ERR;
//   - qp:err,after=10 moves the program's QP to ERR once 10 of its 50
//     RDMA WRITEs have completed: the rest (but those already done when
//     the move lands) complete with IBV_WC_WR_FLUSH_ERR.
func TestQPFaultsReachTheProgram(t *testing.T) {
	home := userHome(t)
	edgeProgram(t, home)
	covFile := filepath.Join(home, "run", "qp.json")
	t.Run("serve", func(t *testing.T) {
		env := serveAsUser(t, home, "rxe23", "--ip", "10.85.0.1/24", "--coverage", covFile)

		qpn, finish := waitingEdge(t, home, env, "rxe23", "errwait", "qpn")
		faultAdd(t, home, "rxe23", "qp:err,qp="+qpn)
		got := finish()
		for _, k := range []string{"errwait recv_100", "errwait recv_101", "errwait recv_102"} {
			if got[k] != "Work_Request_Flushed_Error" {
				t.Errorf("%s: %q, want Work_Request_Flushed_Error (%v)", k, got[k], got)
			}
		}

		rkey, finish := waitingEdge(t, home, env, "rxe23", "writewait", "rkey")
		faultAdd(t, home, "rxe23", "qp:invalidate,rkey="+rkey)
		if got := finish(); got["writewait status"] != "remote_access_error" {
			t.Errorf("WRITE with an invalidated rkey: %q, want remote_access_error", got["writewait status"])
		}

		qpn, finish = waitingEdge(t, home, env, "rxe23", "errafter", "qpn")
		faultAdd(t, home, "rxe23", "qp:err,qp="+qpn+",after=10")
		got = finish()
		if n, err := strconv.Atoi(got["errafter good"]); err != nil || n < 10 || n >= 50 ||
			got["errafter first_error"] != "Work_Request_Flushed_Error" {
			t.Errorf("qp:err,after=10: %s WRITEs succeeded, then %q; want 10 or a few more, then Work_Request_Flushed_Error",
				got["errafter good"], got["errafter first_error"])
		}

		// The send case's QPs are the next two numbers; an RNR rule on
		// each catches the SEND whichever way the two processes raced.
		for _, q := range []string{"0x16", "0x17"} {
			faultAdd(t, home, "rxe23", "qp:rnr,qp="+q+",count=5")
		}
		cmd := userCommand(t, home, env, filepath.Join(home, "softroce_edge"), "-d", "rxe23", "send")
		out, err := cmd.CombinedOutput()
		m, _, perr := edge.Parse(out)
		if err != nil || perr != nil || m["send status"] != "RNR_retry_counter_exceeded" {
			t.Errorf("send under qp:rnr: %v %v %q, want RNR_retry_counter_exceeded\n%s", err, perr, m["send status"], out)
		}
	})
	p, err := coverage.ReadFiles(covFile)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]uint64{}
	for k, n := range p.Faults {
		actions[k.Action] += n
	}
	if actions["qp to ERR"] != 2 || actions["invalidate RC_RDMA_WRITE_ONLY"] != 1 || actions["rnr nak RC_SEND_ONLY"] != 2 {
		t.Errorf("coverage faults %v", p.Faults)
	}
	if p.Transport["rcvd_rnr_err"] != 2 || p.Transport["retry_rnr_exceeded_err"] != 1 {
		t.Errorf("transport %v: want 2 RNR NAKs received and 1 RNR retry exceeded", p.Transport)
	}
}

// TestCQFaultsReachTheProgram: the CQ rules, added live for the QP of the
// edge program's cqwait case, change what it sees, and the coverage
// profile lists each:
//   - cq:overflow: the next completion finds the CQ full: it is lost and
//     the program's async event fd reports IBV_EVENT_CQ_ERR;
//   - cq:delay,by=300ms: both completions of a SEND to itself arrive, the
//     first no sooner than 300 ms after the post.
func TestCQFaultsReachTheProgram(t *testing.T) {
	home := userHome(t)
	edgeProgram(t, home)
	covFile := filepath.Join(home, "run", "cq.json")
	t.Run("serve", func(t *testing.T) {
		env := serveAsUser(t, home, "rxe24", "--ip", "10.86.0.1/24", "--coverage", covFile)

		qpn, finish := waitingEdge(t, home, env, "rxe24", "cqwait", "qpn")
		faultAdd(t, home, "rxe24", "cq:overflow,qp="+qpn)
		got := finish()
		if got["cqwait event"] != "CQ_error" || got["cqwait completions"] == "2" {
			t.Errorf("cq:overflow: event %q, %s completions; want CQ_error and a lost completion (%v)",
				got["cqwait event"], got["cqwait completions"], got)
		}

		qpn, finish = waitingEdge(t, home, env, "rxe24", "cqwait", "qpn")
		faultAdd(t, home, "rxe24", "cq:delay,qp="+qpn+",by=300ms")
		got = finish()
		ms, err := strconv.Atoi(got["cqwait first_ms"])
		if got["cqwait completions"] != "2" || err != nil || ms < 300 || got["cqwait event"] != "" {
			t.Errorf("cq:delay,by=300ms: %s completions, the first after %q ms, event %q; want 2, >= 300, none",
				got["cqwait completions"], got["cqwait first_ms"], got["cqwait event"])
		}
	})
	p, err := coverage.ReadFiles(covFile)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]uint64{}
	for k, n := range p.Faults {
		actions[k.Action] += n
	}
	if actions["cq overflow"] != 1 || actions["cq delay 300ms"] != 2 {
		t.Errorf("coverage faults %v", p.Faults)
	}
	if p.Events[emu.EventCQErr] != 1 {
		t.Errorf("coverage events %v: want one IB_EVENT_CQ_ERR", p.Events)
	}
}

// TestRunOnAServingDaemonTakesFaultsAndCoverage: "softroce run --fault
// RULE --coverage FILE" that finds a daemon serving the name adds the rule
// to it for the program's lifetime (the program sees it; afterwards the
// daemon has no rule left) and writes the daemon's profile at the end.
func TestRunOnAServingDaemonTakesFaultsAndCoverage(t *testing.T) {
	home := userHome(t)
	exe := edgeProgram(t, home)
	serveAsUser(t, home, "rxe25", "--ip", "10.87.0.1/24")
	covFile := filepath.Join(home, "run", "shared.json")
	rule := "verbs:fail,verb=create_qp,errno=EAGAIN"
	out, _ := userCommand(t, home, nil, "softroce", "run", "-d", "rxe25", "--fault", rule, "--coverage", covFile,
		"--", exe, "flush").CombinedOutput()
	if !strings.Contains(string(out), "flush setup ibv_create_qp: EAGAIN") {
		t.Fatalf("the program did not see the fault:\n%s", out)
	}
	if f := faultsOf(t, covFile); f[rule+": fail EAGAIN"] != 1 {
		t.Errorf("coverage faults %v", f)
	}
	list, err := userCommand(t, home, nil, "softroce", "fault", "list", "-d", "rxe25").CombinedOutput()
	if err != nil || len(list) != 0 {
		t.Errorf("rules left on the daemon: %v %q", err, list)
	}
	out, err = userCommand(t, home, nil, "softroce", "run", "-d", "rxe25", "--", exe, "flush").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flush send Work_Request_Flushed_Error") {
		t.Errorf("the next program still saw a fault: %v\n%s", err, out)
	}
}
