package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/softroce/softroce/conformance/edge"
	"github.com/softroce/softroce/internal/testenv"
)

// edgeProgram builds the C edge-case program (conformance/edge) against
// the distribution's libibverbs into home, where userCommand's user can
// run it.
func edgeProgram(t *testing.T, home string) string {
	t.Helper()
	needCC(t)
	distroTool(t, "ibv_devices", "ibverbs-utils") // the libibverbs it links is Debian's
	exe, err := edge.Build(home, "")
	testenv.Require(t, err == nil, "the edge program does not build (libibverbs-dev?): "+errString(err))
	return exe
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runEdge runs the edge program's cases through "softroce run" as the
// test's user, with ARGS before "--" given to softroce run, and returns
// its results by "CASE CHECK".
func runEdge(t *testing.T, home string, runArgs []string, cases ...string) (map[string]string, string) {
	t.Helper()
	exe := edgeProgram(t, home)
	args := append(append([]string{"run"}, runArgs...), "--", exe)
	cmd := userCommand(t, home, nil, "softroce", append(args, cases...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	m, _, perr := edge.Parse(out.Bytes())
	if err != nil || perr != nil {
		t.Fatalf("softroce %s: %v %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, perr, out.String(), errb.String())
	}
	return m, out.String()
}

// TestEdgeProgramSeesTheKernelsAnswers: the C edge-case program, built
// against Debian's libibverbs and run unprivileged through "softroce run",
// gets the kernel's answer to each case:
//   - modify QP outside ib_modify_qp_is_ok's table, or with a required
//     attribute missing or a forbidden one given: EINVAL, and the QP stays
//     where it was (the legal steps between succeed);
//   - a QP moved to ERR flushes its posted receives, and a send posted in
//     ERR, with IBV_WC_WR_FLUSH_ERR (rxe_comp.c / rxe_resp.c flush);
//   - an RDMA WRITE with a wrong rkey: IBV_WC_REM_ACCESS_ERR (the responder's
//     check_rkey NAKs with a remote access error);
//   - a SEND to a peer with no receive posted and rnr_retry 1:
//     IBV_WC_RNR_RETRY_EXC_ERR;
//   - a SEND to a QP that no longer exists (nothing answers, as rxe_rcv
//     drops a packet for an unknown QPN): IBV_WC_RETRY_EXC_ERR after
//     retry_cnt retries;
//   - RDMA WRITEs to a peer process killed mid-transfer (its QPs torn down
//     as ib_uverbs_close does): IBV_WC_RETRY_EXC_ERR. A WRITE that arrives
//     after the process's address space is gone but before the daemon has
//     seen its end is acknowledged, as the kernel's pinned pages take it.
func TestEdgeProgramSeesTheKernelsAnswers(t *testing.T) {
	home := userHome(t)
	got, out := runEdge(t, home, []string{"-d", "rxe10", "--ip", "10.79.0.1/24"}, edge.Cases...)
	want := map[string]string{
		"illegal RESET->RTR":               "EINVAL",
		"illegal RESET->RTS":               "EINVAL",
		"illegal RESET->INIT_without_PORT": "EINVAL",
		"illegal RESET->INIT_with_SQ_PSN":  "EINVAL",
		"illegal RESET->INIT":              "0",
		"illegal INIT->RTS":                "EINVAL",
		"illegal INIT->SQD":                "EINVAL",
		"illegal INIT->RTR_without_AV":     "EINVAL",
		"illegal INIT->RTR":                "0",
		"illegal RTR->RTS_without_TIMEOUT": "EINVAL",
		"illegal RTR->RTS":                 "0",
		"illegal RTS->INIT":                "EINVAL",
		"illegal RTS->ERR":                 "0",
		"illegal ERR->RTS":                 "EINVAL",
		"illegal ERR->INIT":                "EINVAL",
		"illegal ERR->RESET":               "0",
		"flush INIT->ERR":                  "0",
		"flush recv_100":                   "Work_Request_Flushed_Error",
		"flush recv_101":                   "Work_Request_Flushed_Error",
		"flush recv_102":                   "Work_Request_Flushed_Error",
		"flush recv_completions":           "3",
		"flush post_send_in_ERR":           "0",
		"flush send":                       "Work_Request_Flushed_Error",
		"send status":                      "success",
		"badrkey good_rkey":                "success",
		"badrkey status":                   "remote_access_error",
		"rnr status":                       "RNR_retry_counter_exceeded",
		"silent status":                    "transport_retry_counter_exceeded",
		"killed writes_before_kill":        "200+",
		"killed first_error":               "transport_retry_counter_exceeded",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d results, want %d", len(got), len(want))
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
