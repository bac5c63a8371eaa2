package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
)

// The helper process of TestEightUnprivilegedUDPHosts: one host, run as
// nobody in its own namespace, talking to the test over its stdin and
// stdout in lines prefixed "UDPHOST ".
const udpHelperEnv = "SOFTROCE_UDP_HOST"

const procHosts, procRounds, procHalf = 8, 16, bufSize / 2

func procIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 88, 0, byte(i + 1)}) }

func procSeed(from, to, round int) byte { return byte(from*31 + to*7 + round) }

// procInfo is what a host tells of its end towards each peer.
type procInfo struct {
	QPN  map[int]uint32 `json:"qpn"`
	RKey map[int]uint32 `json:"rkey"`
	Addr map[int]uint64 `json:"addr"`
}

// procResult is a host's report.
type procResult struct {
	Err      string            `json:"err,omitempty"`
	Counters map[string]uint64 `json:"counters"`
	UDP      string            `json:"udp"`
}

func TestEightUDPHostsHelper(t *testing.T) {
	idx, err := strconv.Atoi(os.Getenv(udpHelperEnv))
	if err != nil {
		t.Skip("the helper process of TestEightUnprivilegedUDPHosts")
	}
	in := bufio.NewScanner(os.Stdin)
	say := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Printf("UDPHOST %s\n", b)
	}
	fail := func(err error) {
		say(procResult{Err: err.Error()})
		t.Fatal(err)
	}
	next := func(v any) {
		if !in.Scan() {
			fail(fmt.Errorf("stdin closed"))
		}
		if v != nil {
			if err := json.Unmarshal(in.Bytes(), v); err != nil {
				fail(err)
			}
		}
	}
	l, err := OpenUDP([]netip.Addr{procIP(idx)}, 0)
	if err != nil {
		fail(err)
	}
	n, err := New(context.Background(), Config{Name: fmt.Sprintf("softroce%d", idx), Link: l, Seed: uint64(idx + 1)})
	if err != nil {
		fail(err)
	}
	defer n.Close()
	ends := map[int]*end{}
	info := procInfo{QPN: map[int]uint32{}, RKey: map[int]uint32{}, Addr: map[int]uint64{}}
	for j := range procHosts {
		if j != idx {
			e := newEnd(t, n, procIP(idx))
			ends[j] = e
			info.QPN[j], info.RKey[j], info.Addr[j] = e.qp.QPNum(), e.mr.RKey(), e.addr
		}
	}
	say(info)
	var peers procInfo // peers' ends towards this host
	next(&peers)
	for j, e := range ends {
		peer := &end{n: n, ip: procIP(j), qpn: peers.QPN[j]}
		e.connect(t, peer)
	}
	say("ready")
	next(nil) // go
	for r := range procRounds {
		for j, e := range ends {
			fill(e.buf[:procHalf], procSeed(idx, j, r))
			if _, err := e.qp.PostSend([]emu.SendWR{{WRID: uint64(r), Opcode: emu.WRRDMAWrite,
				SGList:     []emu.SGE{{Addr: e.addr, Length: procHalf, LKey: e.mr.LKey()}},
				RemoteAddr: peers.Addr[j] + procHalf, RKey: peers.RKey[j]}}); err != nil {
				fail(err)
			}
		}
		for j, e := range ends {
			if err := pollOne(e.cq); err != nil {
				fail(fmt.Errorf("WRITE to host %d round %d: %w", j, r, err))
			}
		}
	}
	say("done")
	next(nil) // everyone is done: check what the peers wrote
	res := procResult{Counters: counters(t, n), UDP: fmt.Sprintf("%+v", n.Stats().UDP)}
	want := make([]byte, procHalf)
	for j, e := range ends {
		fill(want, procSeed(j, idx, procRounds-1))
		if !bytes.Equal(e.buf[procHalf:], want) {
			res.Err += fmt.Sprintf("data from host %d differs; ", j)
		}
	}
	say(res)
}

// TestEightUnprivilegedUDPHosts: eight softroce hosts, each a process of
// its own running as nobody in its own namespace with a veth to one
// bridge, each on a UDP link bound to its address. Every host
// RDMA-WRITEs to every other at once, round after round; each checks what
// its seven peers wrote last. The test logs the aggregate bandwidth and
// each host's counters.
func TestEightUnprivilegedUDPHosts(t *testing.T) {
	br := testenv.NewNetNS(t)
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "softroce-udp-hosts-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "node.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	br.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	br.Run(t, "ip", "link", "set", "br0", "up")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type proc struct {
		cmd  *exec.Cmd
		in   io.WriteCloser
		out  *bufio.Scanner
		errs bytes.Buffer
		info procInfo
		res  procResult
	}
	procs := make([]*proc, procHosts)
	for i := range procHosts {
		ns := testenv.NewNetNS(t)
		port := fmt.Sprintf("h%d", i)
		br.Run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
		br.Run(t, "ip", "link", "set", port, "master", "br0", "up")
		ns.Run(t, "ip", "addr", "add", procIP(i).String()+"/24", "dev", "eth0")
		ns.Run(t, "ip", "link", "set", "eth0", "up")
		p := &proc{}
		p.cmd = exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, "setpriv", "--reuid=nobody", "--regid=nogroup",
			"--clear-groups", bin, "-test.run=^TestEightUDPHostsHelper$", "-test.count=1")
		p.cmd.Env = append(os.Environ(), udpHelperEnv+"="+strconv.Itoa(i))
		p.cmd.Dir = dir
		p.cmd.Stderr = &p.errs
		if p.in, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.out = bufio.NewScanner(stdout)
		p.out.Buffer(make([]byte, 1<<20), 1<<20)
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		defer p.cmd.Wait()
		defer p.in.Close()
	}
	recv := func(i int, v any) {
		t.Helper()
		p := procs[i]
		for p.out.Scan() {
			line, ok := strings.CutPrefix(p.out.Text(), "UDPHOST ")
			if !ok {
				continue
			}
			var r procResult
			if json.Unmarshal([]byte(line), &r) == nil && r.Err != "" {
				t.Fatalf("host %d: %s\n%s", i, r.Err, p.errs.String())
			}
			if v != nil {
				if err := json.Unmarshal([]byte(line), v); err != nil {
					t.Fatalf("host %d: %v: %s", i, err, line)
				}
			}
			return
		}
		t.Fatalf("host %d: exited early: %v\n%s", i, p.out.Err(), p.errs.String())
	}
	send := func(i int, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(procs[i].in, "%s\n", b)
	}
	for i := range procHosts {
		recv(i, &procs[i].info)
	}
	for i := range procHosts {
		peers := procInfo{QPN: map[int]uint32{}, RKey: map[int]uint32{}, Addr: map[int]uint64{}}
		for j := range procHosts {
			if j != i {
				peers.QPN[j], peers.RKey[j], peers.Addr[j] = procs[j].info.QPN[i], procs[j].info.RKey[i], procs[j].info.Addr[i]
			}
		}
		send(i, peers)
	}
	for i := range procHosts {
		recv(i, nil) // ready
	}
	start := time.Now()
	for i := range procHosts {
		send(i, "go")
	}
	for i := range procHosts {
		recv(i, nil) // done
	}
	elapsed := time.Since(start)
	for i := range procHosts {
		send(i, "check")
	}
	for i := range procHosts {
		recv(i, &procs[i].res)
	}
	total := procHosts * (procHosts - 1) * procRounds * procHalf
	t.Logf("%d unprivileged hosts, all-to-all RC WRITE over UDP: %d MiB in %v, aggregate %.1f Mbit/s",
		procHosts, total>>20, elapsed.Round(time.Millisecond), float64(total)*8/elapsed.Seconds()/1e6)
	for i, p := range procs {
		c := p.res.Counters
		t.Logf("host %d (%v): %s; sent_pkts %d rcvd_pkts %d duplicate_request %d rcvd_seq_err %d",
			i, procIP(i), p.res.UDP, c["sent_pkts"], c["rcvd_pkts"], c["duplicate_request"], c["rcvd_seq_err"])
	}
}

// pollOne waits up to 10 s for one successful completion on cq.
func pollOne(cq *emu.CQ) error {
	wc := make([]emu.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for cq.Poll(wc) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no completion after 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if wc[0].Status != emu.WCSuccess {
		return fmt.Errorf("completion: %v", wc[0].Status)
	}
	return nil
}
