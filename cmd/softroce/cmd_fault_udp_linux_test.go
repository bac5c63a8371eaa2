package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softroce/softroce/conformance/edge"
	"github.com/softroce/softroce/internal/testenv"
)

// TestDaemonOnUDPRecordsAndInjects: on a --udp link (the kernel's UDP
// sockets, no privilege) the daemon records the program's transitions and
// its wire and verbs faults act as on the in-memory link: the program, as
// nobody in a namespace of its own, sees an ibv_create_cq EAGAIN and a
// SEND whose every packet is dropped ends in retries exceeded.
func TestDaemonOnUDPRecordsAndInjects(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1")
	ns.Run(t, "ip", "addr", "add", "10.88.0.1/24", "dev", "ve0")
	ns.Run(t, "ip", "link", "set", "ve0", "up")
	ns.Run(t, "ip", "link", "set", "ve1", "up")
	home := userHome(t)
	exe := edgeProgram(t, home)
	covFile := filepath.Join(home, "run", "udp.json")
	cmd := userCommandIn(t, ns, home, nil, "softroce", "run", "-d", "rxe26", "--udp", "--ip", "10.88.0.1",
		"--coverage", covFile, "--fault", "wire:drop,opcode=SEND_ONLY", "--fault", "verbs:fail,verb=create_cq,errno=EAGAIN",
		"--", exe, "flush", "send")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "flush setup ibv_create_cq: EAGAIN") {
		t.Errorf("the program did not see EAGAIN from ibv_create_cq:\n%s", out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "send ") {
			lines = append(lines, l)
		}
	}
	m, _, perr := edge.Parse([]byte(strings.Join(lines, "\n")))
	if perr != nil || m["send status"] != "transport_retry_counter_exceeded" {
		t.Errorf("send over --udp with every SEND_ONLY dropped: %q %v\n%s", m["send status"], perr, out)
	}
	f := faultsOf(t, covFile)
	if f["verbs:fail,verb=create_cq,errno=EAGAIN: fail EAGAIN"] != 1 || f["wire:drop,opcode=SEND_ONLY: drop RC_SEND_ONLY"] != 2 {
		t.Errorf("coverage faults %v", f)
	}
	r := coverageReport(t, home, covFile)
	if got := takenCells(rcReport(t, r)); got["RTR->RTS"] != 2 {
		t.Errorf("coverage on --udp: taken %v, want the send case's two QPs brought up", got)
	}
}
