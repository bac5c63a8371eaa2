package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/qpstate"
)

// coverageReport runs "softroce coverage --json ARGS..." as the test's
// user in home and decodes the report.
func coverageReport(t *testing.T, home string, args ...string) *coverage.Report {
	t.Helper()
	cmd := userCommand(t, home, nil, "softroce", append([]string{"coverage", "--json"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("softroce coverage --json %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var r coverage.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("coverage --json: %v\n%s", err, out)
	}
	return &r
}

// rcReport returns the report's RC table.
func rcReport(t *testing.T, r *coverage.Report) *coverage.TypeReport {
	t.Helper()
	for i := range r.Types {
		if r.Types[i].Type == qpstate.TypeRC.String() {
			return &r.Types[i]
		}
	}
	t.Fatalf("no RC transitions in the report: %+v", r.Types)
	return nil
}

// takenCells returns the report's taken transitions as "CUR->NEXT" with
// their counts.
func takenCells(tr *coverage.TypeReport) map[string]uint64 {
	m := map[string]uint64{}
	for _, x := range tr.Transitions {
		if x.Count > 0 {
			m[x.Cur+"->"+x.Next] = x.Count
		}
	}
	return m
}

// invalidCells returns the report's attempts outside the table as
// "CUR->NEXT ERRNO" with their counts.
func invalidCells(tr *coverage.TypeReport) map[string]uint64 {
	m := map[string]uint64{}
	for _, a := range tr.Invalid {
		m[a.Cur+"->"+a.Next+" "+a.Errno] = a.Count
	}
	return m
}

// waitListening waits until a TCP socket listens on port (any address)
// in the network namespace of process pid (a program of userCommand runs
// in its home's namespace, not the test's).
func waitListening(t *testing.T, pid, port int) {
	t.Helper()
	want := fmt.Sprintf(":%04X ", port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, f := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			for _, l := range strings.Split(string(b), "\n") {
				// local_address is field 1, st (0A = LISTEN) field 3.
				if fs := strings.Fields(l); len(fs) > 3 && strings.HasSuffix(fs[1]+" ", want) && fs[3] == "0A" {
					return
				}
			}
		}
	}
	t.Fatalf("nothing listens on TCP port %d", port)
}

// TestDaemonCoverageOfPingpongAndEdgeProgram: the daemon records what its
// programs do, unprivileged, on the real tools:
//   - Debian's ibv_rc_pingpong, server and client on one "softroce serve
//     --coverage FILE": by hand, each side makes RESET->INIT in
//     pp_init_ctx and INIT->RTR, RTR->RTS in pp_connect_ctx, and destroys
//     its QP without another modify, so the profile holds exactly those
//     three transitions twice each, with the masks the tool passes and no
//     failure; "softroce coverage --live" sees the same while the daemon
//     serves, and the file is written when SIGTERM ends it;
//   - the C edge program's illegal case, through "softroce run --coverage
//     FILE": each transition outside the table it attempts, with EINVAL,
//     and the failed MODIFY_QP commands;
//   - the two files merge to the union: counts add, cells of both.
func TestDaemonCoverageOfPingpongAndEdgeProgram(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	ppFile := filepath.Join(home, "run", "pingpong.json")
	t.Run("pingpong", func(t *testing.T) {
		env := serveAsUser(t, home, "rxe11", "--ip", "10.78.0.1/24", "--coverage", ppFile)
		args := []string{"-d", "rxe11", "-g", "1", "-n", "5", "-p", strconv.Itoa(18830)}
		// The client starts once the server listens, so that it makes
		// one attempt (each attempt creates a QP and moves it to INIT).
		server := userCommand(t, home, env, tool, args...)
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		defer server.Process.Kill()
		waitListening(t, server.Process.Pid, 18830)
		if out, err := userCommand(t, home, env, tool, append(args, "127.0.0.1")...).CombinedOutput(); err != nil {
			t.Fatalf("client: %v\n%s", err, out)
		}
		if err := server.Wait(); err != nil {
			t.Fatalf("server: %v", err)
		}
		live := coverageReport(t, home, "--live", "-d", "rxe11")
		if got := takenCells(rcReport(t, live)); len(got) != 3 || got["RESET->INIT"] != 2 {
			t.Errorf("coverage --live: taken %v", got)
		}
	})
	p, err := coverage.ReadFiles(ppFile)
	if err != nil {
		t.Fatalf("serve --coverage: %v", err)
	}
	rc := qpstate.TypeRC
	want := map[coverage.ModifyKey]uint64{
		{Type: rc, Cur: qpstate.StateReset, Next: qpstate.StateInit,
			Mask: qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrAccessFlags}: 2,
		{Type: rc, Cur: qpstate.StateInit, Next: qpstate.StateRTR,
			Mask: qpstate.AttrState | qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
				qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer}: 2,
		{Type: rc, Cur: qpstate.StateRTR, Next: qpstate.StateRTS,
			Mask: qpstate.AttrState | qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry |
				qpstate.AttrSQPSN | qpstate.AttrMaxQPRdAtomic}: 2,
	}
	if len(p.Modify) != len(want) {
		t.Errorf("pingpong profile has %d modify cells, want %d: %v", len(p.Modify), len(want), p.Modify)
	}
	for k, n := range want {
		if p.Modify[k] != n {
			t.Errorf("pingpong profile: %v %v->%v %v: %d, want %d", k.Type, k.Cur, k.Next, k.Mask, p.Modify[k], n)
		}
	}
	if len(p.Verbs) != 0 {
		t.Errorf("pingpong profile has failed verbs: %v", p.Verbs)
	}

	edgeFile := filepath.Join(home, "run", "edge.json")
	runEdge(t, home, []string{"-d", "rxe12", "--ip", "10.81.0.1/24", "--coverage", edgeFile}, "illegal")
	er := coverageReport(t, home, edgeFile)
	inv := invalidCells(rcReport(t, er))
	for _, c := range []string{"RESET->RTR EINVAL", "RESET->RTS EINVAL", "INIT->RTS EINVAL", "INIT->SQD EINVAL",
		"RTS->INIT EINVAL", "ERR->RTS EINVAL", "ERR->INIT EINVAL"} {
		if inv[c] != 1 {
			t.Errorf("edge profile: invalid %s seen %d times, want 1 (all: %v)", c, inv[c], inv)
		}
	}
	var cmdFailed uint64
	for _, v := range er.Verbs {
		if v.Verb == "IB_USER_VERBS_CMD_MODIFY_QP" && v.Errno == "EINVAL" {
			cmdFailed = v.Count
		}
	}
	// 7 transitions outside the table and 4 valid ones with a missing or
	// forbidden attribute.
	if cmdFailed != 11 {
		t.Errorf("edge profile: %d failed MODIFY_QP commands, want 11: %+v", cmdFailed, er.Verbs)
	}

	merged := coverageReport(t, home, ppFile, edgeFile)
	if merged.Runs != 2 || len(merged.Devices) != 2 {
		t.Errorf("merged: %d runs on %v, want 2 runs on rxe11 and rxe12", merged.Runs, merged.Devices)
	}
	mt := rcReport(t, merged)
	if got := takenCells(mt); got["RESET->INIT"] != 3 || got["RTS->ERR"] != 1 || got["ERR->RESET"] != 1 {
		t.Errorf("merged taken cells %v: want the sum (RESET->INIT 2+1) and the union (RTS->ERR, ERR->RESET)", got)
	}
	if got := invalidCells(mt); len(got) != len(inv) {
		t.Errorf("merged invalid cells %v, want the edge program's %v", got, inv)
	}
}
