package main

import "testing"

// TestOneWayDoorbellsKeepTheKernelsAnswers: with "softroce run
// --one-way-doorbells" the edge program's doorbells on QPs at RTS or in
// ERR may go one-way and it still sees the kernel's answers (a SEND to
// itself completes, a send posted in ERR is accepted and flushed), and a
// verbs rule on post_send still fails the doorbell it names: while one is
// there every reply asks for answered doorbells.
func TestOneWayDoorbellsKeepTheKernelsAnswers(t *testing.T) {
	home := userHome(t)
	args := []string{"-d", "rxe29", "--ip", "10.89.0.1/24", "--one-way-doorbells"}
	got, out := runEdge(t, home, args, "flush", "send")
	for k, w := range map[string]string{
		"flush post_send_in_ERR": "0",
		"flush send":             "Work_Request_Flushed_Error",
		"send status":            "success",
	} {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q\n%s", k, got[k], w, out)
		}
	}
	got, out = runEdge(t, home, append(args, "--fault", "verbs:fail,verb=post_send,errno=EIO"), "flush")
	if got["flush post_send_in_ERR"] != "EIO" {
		t.Errorf("flush post_send_in_ERR with a post_send rule: got %q, want EIO\n%s", got["flush post_send_in_ERR"], out)
	}
}

// TestOneWayDoorbellsCarryStreams: on "softroce serve --one-way-doorbells",
// Debian's ibv_rc_pingpong with its data check and ib_write_bw (2000 64
// KiB WRITEs, a doorbell each, most of them one-way) as server and client.
func TestOneWayDoorbellsCarryStreams(t *testing.T) {
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe30", "--ip", "10.78.0.1/24", "--mtu", "4200", "--one-way-doorbells")
	rc := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	pingpongs(t, home, env, rc, []string{"-d", "rxe30", "-g", "1", "-n", "2000", "-c", "-p", "18531"}, "16384000 bytes in", "16384000 bytes in")
	bw := distroTool(t, "ib_write_bw", "perftest")
	pingpongs(t, home, env, bw, []string{"-d", "rxe30", "-x", "1", "-s", "65536", "-n", "2000", "-p", "18532"}, "65536      2000", "65536      2000")
}
