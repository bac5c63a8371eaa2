package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// rdmaReference returns the sections of testdata/rdma-rxe-7.3.txt: what
// iproute2's rdma prints for kernel rxe, by command.
func rdmaReference(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("testdata/rdma-rxe-7.3.txt")
	if err != nil {
		t.Fatal(err)
	}
	secs := map[string]string{}
	for _, s := range strings.Split(string(b), "===SEC ")[1:] {
		name, body, _ := strings.Cut(s, "===\n")
		secs[name] = body
	}
	return secs
}

// rdmaKeys returns the keys of a line of the rdma tool's "KEY VALUE ..."
// output after its first skip words (the "0: rxe0:" or "link rxe0/1"
// that names the object), leaving out the keys in unknown.
func rdmaKeys(line string, skip int, unknown ...string) []string {
	f := strings.Fields(line)
	var keys []string
	for i := skip; i+1 < len(f); i += 2 {
		if !slices.Contains(unknown, f[i]) {
			keys = append(keys, f[i])
		}
	}
	return keys
}

// rdmaValue returns the value of key in a line of the rdma tool.
func rdmaValue(line, key string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key {
			return f[i+1]
		}
	}
	return ""
}

// The keys the rdma tool of Debian 12 (iproute2 6.1) does not print while
// 7.2's does: the device's protocol, the comp_cntr resource, and the
// sys modes that kernels after 6.1 added.
var rdma61Unknown = []string{"protocol", "comp_cntr", "privileged-qkey", "monitor"}

// TestRdmaToolUnderRun: Debian 12's unmodified rdma (iproute2), run
// through "softroce run" by an unprivileged user, reaches the daemon's
// RDMA netlink and prints for the served device what it prints for kernel
// rxe (testdata/rdma-rxe-7.3.txt): the same fields in the same order, the
// kernel's own QP1, CQ and PD of ib_core, and, with an ibv_rc_pingpong
// pair and an rping pair running, their QPs, CQs, MRs, PDs and CM IDs,
// each with its process's pid and comm; the port's counters move with
// their traffic. libibverbs, which enumerates devices through netlink
// when it answers, still lists the device (ibv_devices, ibv_devinfo).
func TestRdmaToolUnderRun(t *testing.T) {
	rdmaTool, err := exec.LookPath("rdma")
	testenv.Require(t, err == nil, "rdma is not installed (Debian package iproute2)")
	pingpong := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	devices := distroTool(t, "ibv_devices", "ibverbs-utils")
	devinfo := distroTool(t, "ibv_devinfo", "ibverbs-utils")
	rping := distroTool(t, "rping", "rdmacm-utils")
	needCC(t)
	ref := rdmaReference(t)
	home := userHome(t)
	const dev = "rxe14"
	env := serveAsUser(t, home, dev, "--ip", "10.78.4.1/24", "--nodad")
	run := runThrough(t, home, dev)
	// Without a daemon behind SOFTROCE_SOCK the family is absent, as on
	// a kernel without ib_core.
	var noDaemon []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != "SOFTROCE_SOCK" {
			noDaemon = append(noDaemon, kv)
		}
	}
	out, err := userCommand(t, home, append(noDaemon, "SOFTROCE_SOCK="+home+"/none"), rdmaTool, "dev").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Failed to open NETLINK_RDMA socket") {
		t.Errorf("rdma dev without a daemon: %v\n%s", err, out)
	}
	rdma := func(args ...string) string {
		t.Helper()
		out, err := run(rdmaTool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rdma %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	lines := func(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

	// The device, as rdma and libibverbs see it.
	devLine := lines(rdma("dev"))
	if len(devLine) != 1 || !strings.HasPrefix(devLine[0], "0: "+dev+": ") {
		t.Fatalf("rdma dev:\n%s", strings.Join(devLine, "\n"))
	}
	refDev := lines(ref["rdma dev"])[0]
	if got, want := rdmaKeys(devLine[0], 2), rdmaKeys(refDev, 2, rdma61Unknown...); !reflect.DeepEqual(got, want) {
		t.Errorf("rdma dev prints %q, kernel rxe %q", got, want)
	}
	if rdmaValue(devLine[0], "node_type") != "ca" {
		t.Errorf("rdma dev: %s", devLine[0])
	}
	guid := strings.ReplaceAll(rdmaValue(devLine[0], "node_guid"), ":", "")
	out, err = run(devices).CombinedOutput()
	if err != nil || !strings.Contains(string(out), dev) || !strings.Contains(string(out), guid) {
		t.Errorf("ibv_devices does not list %s with node GUID %s (%v):\n%s", dev, guid, err, out)
	}
	out, err = run(devinfo, "-d", dev).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hca_id:\t"+dev) || !strings.Contains(string(out), "PORT_ACTIVE") {
		t.Errorf("ibv_devinfo -d %s (%v):\n%s", dev, err, out)
	}
	details := lines(rdma("-d", "dev", "show"))
	refDetails := lines(ref["rdma -d dev show"])
	if len(details) != 2 || details[1] != refDetails[1] {
		t.Errorf("rdma -d dev show:\n%s\nkernel rxe's caps:\n%s", strings.Join(details, "\n"), refDetails[1])
	}
	var devJSON []map[string]any
	if err := json.Unmarshal([]byte(rdma("-j", "dev", "show")), &devJSON); err != nil || len(devJSON) != 1 ||
		devJSON[0]["ifname"] != dev || devJSON[0]["ifindex"] != 0.0 {
		t.Errorf("rdma -j dev show: %v %v", devJSON, err)
	}

	// The port and its netdev.
	link := lines(rdma("link"))
	refLink := lines(ref["rdma link"])[0]
	if len(link) != 1 || !strings.HasPrefix(link[0], "link "+dev+"/1 ") ||
		!reflect.DeepEqual(rdmaKeys(link[0], 2), rdmaKeys(refLink, 2)) ||
		rdmaValue(link[0], "state") != "ACTIVE" || rdmaValue(link[0], "physical_state") != "LINK_UP" {
		t.Errorf("rdma link:\n%s\nkernel rxe:\n%s", strings.Join(link, "\n"), refLink)
	}
	var linkJSON, refLinkJSON []map[string]any
	if err := json.Unmarshal([]byte(rdma("-j", "link", "show")), &linkJSON); err != nil || len(linkJSON) != 1 {
		t.Fatalf("rdma -j link show: %v %v", linkJSON, err)
	}
	if err := json.Unmarshal([]byte(ref["rdma -j link show"]), &refLinkJSON); err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(linkJSON[0])), slices.Sorted(maps.Keys(refLinkJSON[0])); !reflect.DeepEqual(got, want) {
		t.Errorf("rdma -j link show has %q, kernel rxe %q", got, want)
	}
	if linkJSON[0]["ifname"] != dev || linkJSON[0]["port"] != 1.0 || linkJSON[0]["netdev"] != rdmaValue(link[0], "netdev") {
		t.Errorf("rdma -j link show: %v", linkJSON[0])
	}

	// The subsystem's modes.
	if got, want := strings.TrimSpace(rdma("sys")), strings.Join(rdmaKeysValues(ref["rdma sys"], rdma61Unknown), " "); got != want {
		t.Errorf("rdma sys prints %q, kernel rxe (less what iproute2 6.1 does not know) %q", got, want)
	}

	// At rest: ib_core's own resources only, as on kernel rxe.
	res := strings.TrimSpace(rdma("res"))
	refRes := strings.TrimSpace(ref["rdma res"])
	if got, want := rdmaKeysValues(strings.TrimPrefix(res, "0: "+dev+": "), nil),
		rdmaKeysValues(strings.TrimPrefix(refRes, "0: rxe0: "), rdma61Unknown); !reflect.DeepEqual(got, want) {
		t.Errorf("rdma res at rest prints %q, kernel rxe %q", got, want)
	}
	for _, r := range []struct {
		what    string
		unknown []string // what an unprivileged user is not shown
	}{{"qp", nil}, {"cq", nil}, {"pd", []string{"local_dma_lkey"}}} {
		got := lines(rdma("res", "show", r.what))
		want := lines(ref["rdma res show "+r.what])
		if len(got) != 1 || !reflect.DeepEqual(rdmaKeys(got[0], 2), rdmaKeys(want[0], 2, r.unknown...)) ||
			rdmaValue(got[0], "comm") != "[ib_core]" {
			t.Errorf("rdma res show %s:\n%s\nkernel rxe:\n%s", r.what, strings.Join(got, "\n"), want[0])
		}
	}
	if got := rdma("res", "show", "mr"); got != "" {
		t.Errorf("rdma res show mr at rest: %q", got)
	}
	stats := func() map[string]uint64 {
		t.Helper()
		out := rdma("statistic", "show")
		if !strings.HasPrefix(out, "link "+dev+"/1 ") {
			t.Fatalf("rdma statistic show:\n%s", out)
		}
		f := strings.Fields(out)
		m := map[string]uint64{}
		var order []string
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				t.Fatalf("rdma statistic show: %q", out)
			}
			m[f[i]] = v
			order = append(order, f[i])
		}
		var want []string
		for _, l := range lines(ref["rdma statistic show"])[1:] {
			want = append(want, strings.Fields(l)[0])
		}
		if got := slices.DeleteFunc(order, func(n string) bool { return strings.HasPrefix(n, "softroce_") }); !reflect.DeepEqual(got, want) {
			t.Errorf("rdma statistic show lists %q, kernel rxe %q", got, want)
		}
		return m
	}
	before := stats()

	// A pingpong pair and an rping pair, holding their objects while rdma
	// looks.
	start := func(cmd *exec.Cmd) (*bytes.Buffer, <-chan error) {
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		return &b, done
	}
	ppSrv, _ := start(run(pingpong, "-g", "0", "-p", "18610", "-n", "100000000"))
	time.Sleep(500 * time.Millisecond)
	ppCli, _ := start(run(pingpong, "-g", "0", "-p", "18610", "-n", "100000000", "localhost"))
	rpSrv, rpSrvDone := start(run(rping, "-s", "-a", "10.78.4.1", "-p", "19610", "-C", "100000000"))
	p := cmDaemon(t, home, dev, run)
	waitCMListening(t, p, rping, "19610", rpSrvDone, rpSrv)
	rpCli, _ := start(run(rping, "-c", "-a", "10.78.4.1", "-p", "19610", "-C", "100000000"))
	var qps []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		qps = lines(rdma("res", "show", "qp"))
		n := 0
		for _, l := range qps {
			if rdmaValue(l, "state") == "RTS" && rdmaValue(l, "type") == "RC" {
				n++
			}
		}
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two connected pairs after 20 s:\n%s\npingpong: %s\n%s\nrping: %s\n%s", strings.Join(qps, "\n"),
				ppSrv, ppCli, rpSrv, rpCli)
		}
	}
	byLQPN := map[string]string{}
	for _, l := range qps {
		byLQPN[rdmaValue(l, "lqpn")] = l
	}
	for _, l := range qps {
		if rdmaValue(l, "type") != "RC" {
			continue
		}
		comm := rdmaValue(l, "comm")
		if comm != "ibv_rc_pingpong" && comm != "rping" || rdmaValue(l, "pid") == "" {
			t.Errorf("QP of %q: %s", comm, l)
		}
		if peer := byLQPN[rdmaValue(l, "rqpn")]; rdmaValue(peer, "rqpn") != rdmaValue(l, "lqpn") {
			t.Errorf("QP %s's peer is not connected back: %s", l, peer)
		}
		if got, want := rdmaKeys(l, 2), []string{"lqpn", "rqpn", "type", "state", "rq-psn", "sq-psn", "path-mig-state", "pdn", "pid", "comm"}; !reflect.DeepEqual(got, want) {
			t.Errorf("RC QP prints %q, want %q", got, want)
		}
	}
	for _, r := range []struct {
		what string
		keys []string
	}{
		{"cq", []string{"cqn", "cqe", "users", "adaptive-moderation", "ctxn", "pid", "comm"}},
		{"mr", []string{"mrn", "mrlen", "pdn", "pid", "comm"}},
		{"pd", []string{"pdn", "users", "ctxn", "pid", "comm"}},
	} {
		n := 0
		for _, l := range lines(rdma("res", "show", r.what)) {
			if rdmaValue(l, "comm") == "[ib_core]" {
				continue
			}
			n++
			if got := rdmaKeys(l, 2); !reflect.DeepEqual(got, r.keys) {
				t.Errorf("rdma res show %s: %q, want %q", r.what, got, r.keys)
			}
		}
		if n < 4 {
			t.Errorf("rdma res show %s lists %d objects of the four programs", r.what, n)
		}
	}
	// The CM IDs as the daemon's own listing (softroce res, the kernel's
	// format) has them.
	words := func(s string) string {
		var ls []string
		for _, l := range lines(s) {
			ls = append(ls, strings.Join(strings.Fields(l), " "))
		}
		return strings.Join(ls, "\n")
	}
	cm := words(rdma("res", "show", "cm_id"))
	own, err := p.res().CombinedOutput()
	if err != nil || cm == "" || cm != words(string(own)) {
		t.Errorf("rdma res show cm_id:\n%s\nsoftroce res cm_id (%v):\n%s", cm, err, own)
	}
	after := stats()
	if after["sent_pkts"] <= before["sent_pkts"] || after["rcvd_pkts"] <= before["rcvd_pkts"] {
		t.Errorf("counters did not move: sent_pkts %d -> %d, rcvd_pkts %d -> %d", before["sent_pkts"], after["sent_pkts"],
			before["rcvd_pkts"], after["rcvd_pkts"])
	}

	// Creating and removing links is CAP_NET_ADMIN's, as on the kernel.
	for _, args := range [][]string{{"link", "add", "rxe15", "type", "rxe", "netdev", "lo"}, {"link", "delete", dev}} {
		out, err := run(rdmaTool, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Operation not permitted") {
			t.Errorf("rdma %s as a user: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// rdmaKeysValues returns the words of a "KEY VALUE ..." line without the
// pairs whose key is in unknown.
func rdmaKeysValues(line string, unknown []string) []string {
	f := strings.Fields(line)
	var out []string
	for i := 0; i+1 < len(f); i += 2 {
		if !slices.Contains(unknown, f[i]) {
			out = append(out, f[i], f[i+1])
		}
	}
	return out
}
