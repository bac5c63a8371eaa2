package main

import (
	"bufio"
	"bytes"
	"strings"
	"syscall"
	"testing"

	"github.com/softroce/softroce/uverbsd"
)

// TestServePrintsCountersAtExit: "softroce serve", ended with SIGTERM
// after an ibv_rc_pingpong pair ran on it, prints its device's counters on
// stderr as `softroce stats` does, and they count the pair's packets.
func TestServePrintsCountersAtExit(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	serve := userCommand(t, home, nil, "softroce", "serve", "-d", "rxe12", "--ip", "10.78.0.1/24")
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var serveErr bytes.Buffer
	serve.Stderr = &serveErr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	br := bufio.NewReader(stdout)
	var env []string
	for len(env) < len(uverbsd.Env("", "")) { // its export lines
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("serve output ended after %q: %v\nstderr: %s", env, err, serveErr.String())
		}
		if kv, ok := strings.CutPrefix(strings.TrimSpace(line), "export "); ok {
			env = append(env, kv)
		}
	}
	pingpongs(t, home, env, tool, []string{"-d", "rxe12", "-g", "1", "-n", "20", "-c", "-p", "18841"},
		"163840 bytes in", "163840 bytes in")
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\nstderr: %s", err, serveErr.String())
	}
	head, line, ok := strings.Cut(serveErr.String(), "\nlink ")
	if !ok || !strings.HasSuffix(head, "softroce serve: rxe12's counters at exit:") {
		t.Fatalf("no counters at exit on stderr:\n%s", serveErr.String())
	}
	_, vals := parseStatsLine(t, "link "+line, "rxe12")
	// Both QPs are on this device: each of the 20 round trips is two
	// SENDs and two ACKs, each sent and received once.
	if vals["sent_pkts"] < 80 || vals["rcvd_pkts"] < 80 {
		t.Errorf("counters %v: want at least 80 packets sent and received", vals)
	}
}
