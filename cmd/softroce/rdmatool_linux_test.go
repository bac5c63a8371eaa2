package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// TestToolsOnABridge: as root, in a fresh namespace, two "softroce
// pingpong" (and "softroce perf") commands on two TAPs of one bridge run
// against each other — the out-of-band exchange over the namespace's
// kernel TCP, the RoCE traffic between the two softroce hosts, which find
// each other by ARP. Every pingpong mode runs with -c (the server checks
// the data) and every run must exit 0.
func TestToolsOnABridge(t *testing.T) {
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "addr", "add", "10.81.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	run2 := func(t *testing.T, server, client []string) (sv, cl cmdResult) {
		t.Helper()
		listening := make(chan struct{})
		var once sync.Once
		var lport string
		serverReady = func(a net.Addr) {
			once.Do(func() { lport = strconv.Itoa(a.(*net.TCPAddr).Port); close(listening) })
		}
		defer func() { serverReady = nil }()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer once.Do(func() { close(listening) })
			ns.Do(func() error {
				var o, e bytes.Buffer
				sv.code = run(withPort(server, "0"), &o, &e)
				sv.out, sv.errout = o.String(), e.String()
				return nil
			})
		}()
		<-listening
		ns.Do(func() error {
			var o, e bytes.Buffer
			cl.code = run(withPort(client, lport), &o, &e)
			cl.out, cl.errout = o.String(), e.String()
			return nil
		})
		wg.Wait()
		return sv, cl
	}
	linkA := []string{"-d", "softroce_a", "--tap", "srpa", "--bridge", "br0", "--ip", "10.81.0.10/24", "--mac", "02:81:00:00:00:0a"}
	linkB := []string{"-d", "softroce_b", "--tap", "srpb", "--bridge", "br0", "--ip", "10.81.0.11/24", "--mac", "02:81:00:00:00:0b"}
	for _, tc := range [][]string{
		{"pingpong", "--mode", "rc", "-c", "-n", "200"},
		{"pingpong", "--mode", "uc", "-c", "-n", "200", "-s", "1024"},
		{"pingpong", "--mode", "ud", "-c", "-n", "200", "-s", "512"},
		{"pingpong", "--mode", "srq", "-c", "-n", "200", "-q", "4"},
		{"perf", "write_bw", "-n", "500"},
		{"perf", "read_bw", "-n", "500"},
		{"perf", "send_bw", "-n", "500"},
		{"perf", "atomic_bw", "-n", "500"},
		{"perf", "write_lat", "-n", "500"},
		{"perf", "send_lat", "-n", "200"},
	} {
		t.Run(strings.Join(tc, "_"), func(t *testing.T) {
			if tc[1] == "write_lat" && raceEnabled {
				t.Skip("write_lat polls memory the device writes")
			}
			args := append(append([]string{}, tc...), "-p", port)
			sv, cl := run2(t, append(append([]string{}, args...), linkB...), append(append(append([]string{}, args...), linkA...), "10.81.0.1"))
			for _, r := range []struct {
				name string
				res  cmdResult
			}{{"server", sv}, {"client", cl}} {
				if r.res.code != 0 {
					t.Fatalf("%s: exit %d\n%s\n%s", r.name, r.res.code, r.res.out, r.res.errout)
				}
				ok := ppLines.MatchString(r.res.out) || bwRow.MatchString(r.res.out) || latRow.MatchString(r.res.out)
				if !ok || strings.Contains(r.res.out, "invalid data") {
					t.Errorf("%s: output:\n%s", r.name, r.res.out)
				}
			}
		})
	}
}
