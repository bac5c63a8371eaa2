package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/wire"
)

// unprivileged returns the command line prefix that runs bin in ns as
// nobody:nogroup without supplementary groups, after making bin reachable
// for that user.
func unprivileged(t *testing.T, ns *testenv.NetNS, bin string) []string {
	t.Helper()
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"netns", "exec", ns.Name, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", bin}
}

// TestToolsOverUDPUnprivileged: two softroce processes, each in its own
// namespace joined by a veth and each running as nobody, run every
// "softroce pingpong" mode and the eight perftest tools against each
// other over --udp, with IPv4 and with IPv6 GIDs, and a WRITE, a READ and
// a pingpong of multi-packet messages with --udp-gso on both sides. The
// pingpongs check the data (-c); every run must exit 0 on both sides and
// print its result.
func TestToolsOverUDPUnprivileged(t *testing.T) {
	na, nb := testenv.NewNetNS(t), testenv.NewNetNS(t)
	bin := softrocePath(t)
	na.Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", "netns", nb.Name)
	na.Run(t, "ip", "addr", "add", "10.82.0.1/24", "dev", "ve0")
	na.Run(t, "ip", "addr", "add", "fd82::1/64", "dev", "ve0", "nodad")
	na.Run(t, "ip", "link", "set", "ve0", "up")
	nb.Run(t, "ip", "addr", "add", "10.82.0.2/24", "dev", "ve1")
	nb.Run(t, "ip", "addr", "add", "fd82::2/64", "dev", "ve1", "nodad")
	nb.Run(t, "ip", "link", "set", "ve1", "up")
	preA, preB := unprivileged(t, na, bin), unprivileged(t, nb, bin)
	start := func(ctx context.Context, pre, args []string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, "ip", append(append([]string{}, pre...), args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &o, &e
	}
	tools := [][]string{
		{"pingpong", "--mode", "rc", "-c", "-n", "200"},
		{"pingpong", "--mode", "uc", "-c", "-n", "200", "-s", "1024"},
		{"pingpong", "--mode", "ud", "-c", "-n", "200", "-s", "512"},
		{"pingpong", "--mode", "srq", "-c", "-n", "200", "-q", "4"},
		{"perf", "write_bw", "-n", "500"},
		{"perf", "read_bw", "-n", "500"},
		{"perf", "send_bw", "-n", "500"},
		{"perf", "atomic_bw", "-n", "500"},
		{"perf", "write_lat", "-n", "200"},
		{"perf", "read_lat", "-n", "200"},
		{"perf", "send_lat", "-n", "200"},
		{"perf", "atomic_lat", "-n", "200"},
		// With UDP GSO: the message trains go out as GSO sends.
		{"pingpong", "--mode", "rc", "-c", "-n", "200", "-s", "8192", "--udp-gso"},
		{"perf", "write_bw", "-n", "500", "--udp-gso"},
		{"perf", "read_bw", "-n", "500", "--udp-gso"},
	}
	for _, fam := range []struct{ name, a, b string }{{"IPv4", "10.82.0.1", "10.82.0.2"}, {"IPv6", "fd82::1", "fd82::2"}} {
		for _, tc := range tools {
			t.Run(fam.name+"_"+strings.Join(tc, "_"), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				args := append(append([]string{}, tc...), "-p", "18515", "--udp")
				srv, sout, serr := start(ctx, preB, append(append([]string{}, args...), "-d", "softroce_b", "--ip", fam.b))
				cli, cout, cerr := start(ctx, preA, append(append([]string{}, args...), "-d", "softroce_a", "--ip", fam.a, fam.b))
				cliErr, srvErr := cli.Wait(), srv.Wait()
				for _, r := range []struct {
					name      string
					err       error
					out, err2 *bytes.Buffer
				}{{"server", srvErr, sout, serr}, {"client", cliErr, cout, cerr}} {
					if r.err != nil {
						t.Fatalf("%s: %v\n%s\n%s", r.name, r.err, r.out, r.err2)
					}
					if strings.Contains(r.out.String(), "invalid data") {
						t.Errorf("%s: data check failed:\n%s", r.name, r.out)
					}
				}
				out := cout.String()
				if !ppLines.MatchString(out) && !bwRow.MatchString(out) && !latRow.MatchString(out) && !latDurRow.MatchString(out) {
					t.Errorf("client printed no result:\n%s", out)
				}
				if tc[0] == "pingpong" && !ppLines.MatchString(sout.String()) {
					t.Errorf("server printed no result:\n%s", sout)
				}
			})
		}
	}
}

// TestUDPPortTakenMessage: with UDP 4791 held on the address, --udp fails
// with a message naming the likely holders.
func TestUDPPortTakenMessage(t *testing.T) {
	ns := testenv.NewNetNS(t)
	bin := softrocePath(t)
	ns.Run(t, "ip", "addr", "add", "10.83.0.1/24", "dev", "lo")
	pre := unprivileged(t, ns, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := exec.CommandContext(ctx, "ip", append(append([]string{}, pre...), "stats", "--udp", "--ip", "10.83.0.1", "--for", "20s")...)
	var hout bytes.Buffer
	holder.Stdout, holder.Stderr = &hout, &hout
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	time.Sleep(500 * time.Millisecond)
	out, err := exec.CommandContext(ctx, "ip", append(append([]string{}, pre...), "devinfo", "--udp", "--ip", "10.83.0.1")...).CombinedOutput()
	if err == nil {
		t.Fatalf("a second softroce on the same address started:\n%s", out)
	}
	for _, want := range []string{"address already in use", "kernel's rxe", "another softroce"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("message lacks %q:\n%s", want, out)
		}
	}
}

// TestStatsCountsUnverifiableICRC: "softroce stats --udp" counts an IPv4
// datagram whose ICRC does not match under the identification softroce
// assumes (0) in softroce_udp_unverifiable_icrc, and a good one not.
func TestStatsCountsUnverifiableICRC(t *testing.T) {
	na, nb := testenv.NewNetNS(t), testenv.NewNetNS(t)
	bin := softrocePath(t)
	na.Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", "netns", nb.Name)
	na.Run(t, "ip", "addr", "add", "10.84.0.1/24", "dev", "ve0")
	na.Run(t, "ip", "link", "set", "ve0", "up")
	nb.Run(t, "ip", "addr", "add", "10.84.0.2/24", "dev", "ve1")
	nb.Run(t, "ip", "link", "set", "ve1", "up")
	pre := unprivileged(t, nb, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append(append([]string{}, pre...), "stats", "--udp", "--ip", "10.84.0.2", "--for", "2s")...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // bound
	// A UD SEND whose ICRC is wrong under any identification: the
	// receiver cannot tell that from a sender's nonzero one.
	fb := make([]byte, 256)
	n, err := wire.Build(fb, &wire.Frame{Src: netip.MustParseAddr("10.84.0.1"), Dst: netip.MustParseAddr("10.84.0.2"),
		HopLimit: 64, BTH: wire.BTHFields{Opcode: wire.UDSendOnly, DestQP: 0x99, PKey: 0xffff},
		DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x42}, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	pay := append([]byte(nil), fb[wire.EthernetSize+wire.IPv4Size+wire.UDPSize:n]...)
	pay[len(pay)-1] ^= 1
	err = na.Do(func() error {
		c, err := net.Dial("udp4", "10.84.0.2:4791")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(pay)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stats: %v\n%s", err, errs.String())
	}
	_, vals := parseStatsLine(t, out.String(), "softroce0")
	if vals["softroce_udp_unverifiable_icrc"] != 1 || vals["softroce_udp_rx_frames"] != 1 {
		t.Errorf("after one datagram with a bad ICRC: %v\n%s", vals, out.String())
	}
}

// TestRpingOverUDPUnprivileged: rping's RDMA CM connection (REQ, REP, RTU
// on QP1, then the RC exchange) between two unprivileged softroce
// processes in two namespaces over --udp, the data checked by -v output
// on both sides.
func TestRpingOverUDPUnprivileged(t *testing.T) {
	na, nb := testenv.NewNetNS(t), testenv.NewNetNS(t)
	bin := softrocePath(t)
	na.Run(t, "ip", "link", "add", "ve0", "type", "veth", "peer", "name", "ve1", "netns", nb.Name)
	na.Run(t, "ip", "addr", "add", "10.86.0.1/24", "dev", "ve0")
	na.Run(t, "ip", "link", "set", "ve0", "up")
	nb.Run(t, "ip", "addr", "add", "10.86.0.2/24", "dev", "ve1")
	nb.Run(t, "ip", "link", "set", "ve1", "up")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", append(unprivileged(t, nb, bin), "rping", "-s", "-v", "-C", "3", "--udp", "--ip", "10.86.0.2")...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the server listens
	cout, err := exec.CommandContext(ctx, "ip", append(unprivileged(t, na, bin),
		"rping", "-c", "-a", "10.86.0.2", "-v", "-C", "3", "--udp", "--ip", "10.86.0.1")...).CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, cout)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	for i := range 3 {
		if !strings.Contains(string(cout), rpingData("", i)) || !strings.Contains(sout.String(), rpingData("server ", i)) {
			t.Errorf("ping %d missing:\nclient:\n%s\nserver:\n%s", i, cout, sout.String())
		}
	}
}
