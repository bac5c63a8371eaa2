package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/wire"
)

// udpHost is one softroce host of the serve --udp tests: a network
// namespace and the home of the unprivileged user whose "softroce serve
// --udp" serves rxe0 in it.
type udpHost struct {
	ns     *testenv.NetNS
	home   string
	ifname string
	v4, v6 netip.Addr
}

// command returns "PROG ARGS..." run by the host's user in its namespace.
func (h *udpHost) command(t *testing.T, prog string, args ...string) *exec.Cmd {
	t.Helper()
	return userCommandIn(t, h.ns, h.home, nil, prog, args...)
}

// run returns "softroce run -- TOOL ARGS..." on the host.
func (h *udpHost) run(t *testing.T, tool string, args ...string) *exec.Cmd {
	t.Helper()
	return h.command(t, "softroce", append([]string{"run", "--", tool}, args...)...)
}

// gidIndex returns the index of addr's RoCEv2 GID in the table that
// Debian's ibv_devinfo -v prints through softroce run, or -1.
func (h *udpHost) gidIndex(t *testing.T, addr netip.Addr) int {
	t.Helper()
	out, err := h.run(t, "ibv_devinfo", "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
	}
	return gidIndexIn(string(out), addr)
}

// gidLine is a GID line of ibv_devinfo -v.
var gidLine = regexp.MustCompile(`(?m)^\t+GID\[\s*(\d+)\]:\t+(\S+), RoCE v2$`)

// gidIndexIn finds addr's GID (IPv4-mapped for IPv4) in ibv_devinfo -v
// output, or returns -1.
func gidIndexIn(out string, addr netip.Addr) int {
	want := netip.AddrFrom16(addr.As16())
	for _, m := range gidLine.FindAllStringSubmatch(out, -1) {
		if a, err := netip.ParseAddr(m[2]); err == nil && a == want {
			i, _ := strconv.Atoi(m[1])
			return i
		}
	}
	return -1
}

// udpHostPair makes two namespaces joined by a veth, with an IPv4 and an
// IPv6 address each, and starts "softroce serve --udp" (bound to all of
// the namespace's addresses, as in a pod) as nobody in each.
func udpHostPair(t *testing.T, subnet byte) (a, b *udpHost) {
	t.Helper()
	a, b = udpNamespaces(t, subnet)
	for _, h := range []*udpHost{a, b} {
		serveAsUserIn(t, h.ns, h.home, defaultServeName, "--udp")
	}
	return a, b
}

// udpNamespaces is udpHostPair without the daemons.
func udpNamespaces(t *testing.T, subnet byte) (a, b *udpHost) {
	t.Helper()
	needCC(t)
	hosts := [2]*udpHost{}
	for i := range hosts {
		hosts[i] = &udpHost{ns: testenv.NewNetNS(t), home: userHome(t), ifname: fmt.Sprintf("ve%d", i),
			v4: netip.AddrFrom4([4]byte{10, 93, subnet, byte(i + 1)}),
			v6: netip.MustParseAddr(fmt.Sprintf("fd93:%x::%d", subnet, i+1))}
	}
	a, b = hosts[0], hosts[1]
	a.ns.Run(t, "ip", "link", "add", a.ifname, "type", "veth", "peer", "name", b.ifname, "netns", b.ns.Name)
	for _, h := range hosts {
		h.ns.Run(t, "ip", "addr", "add", h.v4.String()+"/24", "dev", h.ifname)
		h.ns.Run(t, "ip", "addr", "add", h.v6.String()+"/64", "dev", h.ifname, "nodad")
		h.ns.Run(t, "ip", "link", "set", h.ifname, "up")
	}
	return a, b
}

// pairUDP runs tool (with args) as server on srv and as client of srv's
// IPv4 address on cli, both through softroce run, and returns their
// output. Both must exit 0.
func pairUDP(t *testing.T, srv, cli *udpHost, tool string, args []string) (sout, cout string) {
	t.Helper()
	server := srv.run(t, tool, args...)
	var sb bytes.Buffer
	server.Stdout, server.Stderr = &sb, &sb
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	serverDone := make(chan error, 1)
	go func() { serverDone <- server.Wait() }()
	defer server.Process.Kill()
	var out []byte
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = cli.run(t, tool, append(args, srv.v4.String())...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Couldn't connect") || time.Now().After(deadline) {
			break
		}
		// Until the server listens, the client cannot connect.
	}
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, sb.String())
	}
	select {
	case err := <-serverDone:
		if err != nil {
			t.Fatalf("server: %v\n%s", err, sb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not finish:\n%s", sb.String())
	}
	return sb.String(), string(out)
}

// TestDebianToolsOverServeUDP: Debian's unmodified ibv_*_pingpong and the
// eight perftest tools, each side started with "softroce run" by nobody
// against a "softroce serve --udp" of its own in its own namespace, the
// namespaces joined by a veth: RoCEv2 between the two daemons over
// ordinary UDP sockets, with the IPv4 GID and with the IPv6 GID. The
// pingpongs check the data (-c: "invalid data" on a mismatch); every run
// must exit 0 on both sides and print its result with the GIDs of the
// chosen family. One ib_send_bw run per family sets the GRH traffic class
// (--tclass): a capture on the veth shows it in every frame's IPv4 TOS or
// IPv6 traffic class, and every frame's ICRC verifies.
func TestDebianToolsOverServeUDP(t *testing.T) {
	for _, tool := range []string{"ibv_rc_pingpong", "ibv_devinfo"} {
		distroTool(t, tool, "ibverbs-utils")
	}
	distroTool(t, "ib_write_bw", "perftest")
	a, b := udpHostPair(t, 1)
	port := 18900
	for _, fam := range []struct {
		name string
		addr func(h *udpHost) netip.Addr
	}{{"IPv4", func(h *udpHost) netip.Addr { return h.v4 }}, {"IPv6", func(h *udpHost) netip.Addr { return h.v6 }}} {
		t.Run(fam.name, func(t *testing.T) {
			ia, ib := a.gidIndex(t, fam.addr(a)), b.gidIndex(t, fam.addr(b))
			if ia < 0 || ib < 0 {
				t.Fatalf("no GID of %v (%d) or %v (%d): the GID table does not follow the namespaces' addresses",
					fam.addr(a), ia, fam.addr(b), ib)
			}
			if ia != ib {
				t.Fatalf("GID indexes differ: %d and %d", ia, ib)
			}
			gid := strconv.Itoa(ia)
			// Both sides print both GIDs: the local one and the remote one.
			gids := []string{gidString(fam.addr(a)), gidString(fam.addr(b))}
			for _, tc := range []struct{ tool, want string }{
				{"ibv_rc_pingpong", "819200 bytes in"},
				{"ibv_uc_pingpong", "819200 bytes in"},
				{"ibv_ud_pingpong", "204800 bytes in"},
				{"ibv_srq_pingpong", "819200 bytes in"},
			} {
				t.Run(tc.tool, func(t *testing.T) {
					distroTool(t, tc.tool, "ibverbs-utils")
					port++
					sout, cout := pairUDP(t, b, a, tc.tool, []string{"-g", gid, "-n", "100", "-c", "-p", strconv.Itoa(port)})
					checkToolOutput(t, sout, cout, tc.want, tc.want, gids)
				})
			}
			for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
				"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
				t.Run(tool, func(t *testing.T) {
					distroTool(t, tool, "perftest")
					port++
					sout, cout := pairUDP(t, b, a, tool, []string{"-x", gid, "-n", "200", "-p", strconv.Itoa(port)})
					serverWant := "#bytes"
					if tool == "ib_read_lat" || tool == "ib_atomic_lat" {
						serverWant = "" // the passive side prints no result, as on the kernel's rxe
					}
					checkToolOutput(t, sout, cout, serverWant, "#bytes", nil)
				})
			}
			t.Run("ib_send_bw --tclass", func(t *testing.T) {
				const tclass = 0x68 // DSCP 26 (AF31), ECN 0
				stop := captureOn(t, b, "udp port 4791")
				port++
				pairUDP(t, b, a, "ib_send_bw", []string{"-x", gid, "-n", "50", "--tclass=" + strconv.Itoa(tclass), "-p", strconv.Itoa(port)})
				frames := stop()
				var n int
				for _, f := range frames {
					if _, err := wire.Parse(f); err != nil {
						t.Errorf("captured frame does not parse: %v", err)
						continue
					}
					n++
					var tc byte
					if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
						tc = f[wire.EthernetSize+1]
					} else {
						tc = f[wire.EthernetSize]<<4 | f[wire.EthernetSize+1]>>4
					}
					if tc != tclass {
						t.Errorf("frame %d: traffic class %#x, want %#x", n, tc, tclass)
					}
					if err := wire.VerifyICRC(f, wire.EthernetSize); err != nil {
						t.Errorf("frame %d: %v", n, err)
					}
				}
				if n < 50 {
					t.Errorf("captured %d RoCEv2 frames, want at least 50", n)
				}
			})
		})
	}
}

// gidString is addr as the pingpongs print a GID.
func gidString(addr netip.Addr) string {
	return "GID " + netip.AddrFrom16(addr.As16()).String()
}

// checkToolOutput checks that the server's and the client's output hold
// their result (serverWant, clientWant) and every string of gids, and no
// data mismatch.
func checkToolOutput(t *testing.T, sout, cout, serverWant, clientWant string, gids []string) {
	t.Helper()
	for _, c := range []struct{ who, out, want string }{{"server", sout, serverWant}, {"client", cout, clientWant}} {
		if !strings.Contains(c.out, c.want) || strings.Contains(c.out, "invalid data") {
			t.Errorf("%s output lacks %q or reports invalid data:\n%s", c.who, c.want, c.out)
		}
		for _, g := range gids {
			if !strings.Contains(c.out, g) {
				t.Errorf("%s output lacks %q:\n%s", c.who, g, c.out)
			}
		}
	}
}

// captureOn starts tcpdump on h's interface with filter and returns a
// function that stops it and returns the captured frames.
func captureOn(t *testing.T, h *udpHost, filter string) func() [][]byte {
	t.Helper()
	_, err := exec.LookPath("tcpdump")
	testenv.Require(t, err == nil, "tcpdump is not installed")
	dir := t.TempDir()
	os.Chmod(dir, 0o777) // tcpdump drops to its own user to write
	file := filepath.Join(dir, "cap.pcap")
	cmd := h.ns.Command("tcpdump", "-i", h.ifname, "-U", "-w", file, filter)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "listening on") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return func() [][]byte {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		return testutil.ReadPcapFile(t, file)
	}
}

// TestServeUDPGIDsFollowTheNamespacesAddresses: a "softroce serve --udp"
// bound to all addresses, run by nobody, gives a GID to an address added
// in its namespace (`ip addr add`) and takes it away when the address is
// removed, and Debian's unmodified ibv_asyncwatch, run through softroce
// run, receives IBV_EVENT_GID_CHANGE for each change, as with the kernel's
// rxe on a netdev. A second "softroce serve --udp" in the namespace fails
// with the port-taken message.
func TestServeUDPGIDsFollowTheNamespacesAddresses(t *testing.T) {
	distroTool(t, "ibv_asyncwatch", "ibverbs-utils")
	distroTool(t, "ibv_devinfo", "ibverbs-utils")
	_, err := exec.LookPath("stdbuf")
	testenv.Require(t, err == nil, "stdbuf is not installed (coreutils)")
	needCC(t)
	h := &udpHost{ns: testenv.NewNetNS(t), home: userHome(t), ifname: "d0", v4: netip.MustParseAddr("10.94.0.1")}
	h.ns.Run(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	h.ns.Run(t, "ip", "addr", "add", "10.94.0.1/24", "dev", "d0")
	h.ns.Run(t, "ip", "link", "set", "d0", "up")
	h.ns.Run(t, "ip", "link", "set", "d1", "up")
	serveAsUserIn(t, h.ns, h.home, defaultServeName, "--udp")
	if i := h.gidIndex(t, h.v4); i < 0 {
		t.Fatalf("no GID of %v before any change", h.v4)
	}
	// A second daemon (another device name) cannot have the port.
	second, err := h.command(t, "softroce", "serve", "--udp", "-d", "rxe1").CombinedOutput()
	if err == nil || !strings.Contains(string(second), "address already in use") || !strings.Contains(string(second), "another softroce") {
		t.Errorf("a second serve --udp in the namespace: %v\n%s", err, second)
	}
	// ibv_asyncwatch's stdout is a pipe: stdbuf makes it line-buffered.
	watch := h.run(t, "stdbuf", "-oL", "ibv_asyncwatch", "-d", defaultServeName)
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var werr bytes.Buffer
	watch.Stderr = &werr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		watch.Process.Signal(syscall.SIGTERM)
		watch.Wait()
	}()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	expect := func(what string, match func(string) bool) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("ibv_asyncwatch ended before %s\n%s", what, werr.String())
				}
				if match(l) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %s from ibv_asyncwatch\n%s", what, werr.String())
			}
		}
	}
	expect("async event FD line", func(l string) bool { return strings.Contains(l, "async event FD") })
	waitGID := func(addr netip.Addr, present bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); (h.gidIndex(t, addr) >= 0) != present; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("GID of %v present=%v after 10s, want %v", addr, !present, present)
			}
		}
	}
	isGIDChange := func(l string) bool {
		return strings.Contains(l, "IBV_EVENT_GID_CHANGE") && strings.Contains(l, "port 1")
	}
	for _, extra := range []netip.Addr{netip.MustParseAddr("10.94.0.22"), netip.MustParseAddr("fd94::22")} {
		add := []string{"addr", "add", extra.String() + "/" + strconv.Itoa(extra.BitLen()), "dev", "d0"}
		if extra.Is6() {
			add = append(add, "nodad")
		}
		h.ns.Run(t, "ip", add...)
		expect("GID change after ip addr add "+extra.String(), isGIDChange)
		waitGID(extra, true)
		h.ns.Run(t, "ip", "addr", "del", extra.String()+"/"+strconv.Itoa(extra.BitLen()), "dev", "d0")
		expect("GID change after ip addr del "+extra.String(), isGIDChange)
		waitGID(extra, false)
	}
	if i := h.gidIndex(t, h.v4); i < 0 {
		t.Errorf("the GID of %v, which stayed, is gone", h.v4)
	}
}

// TestRunUDPServesItsOwnDaemon: without a "softroce serve", "softroce run
// --udp -- PROGRAM" serves the device on UDP for the program's lifetime:
// Debian's ibv_rc_pingpong, server and client in two namespaces, each
// under its own "softroce run --udp" as nobody, completes with the data
// checked and both runs exit 0 with the program's status.
func TestRunUDPServesItsOwnDaemon(t *testing.T) {
	distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	a, b := udpNamespaces(t, 2)
	args := []string{"-g", "1", "-n", "100", "-c", "-p", "18960"}
	runUDP := func(h *udpHost, extra ...string) *exec.Cmd {
		return h.command(t, "softroce", append(append([]string{"run", "--udp", "--", "ibv_rc_pingpong"}, args...), extra...)...)
	}
	server := runUDP(b)
	var sb bytes.Buffer
	server.Stdout, server.Stderr = &sb, &sb
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var out []byte
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = runUDP(a, b.v4.String()).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Couldn't connect") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, sb.String())
	}
	if err := server.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, sb.String())
	}
	checkToolOutput(t, sb.String(), string(out), "819200 bytes in", "819200 bytes in",
		[]string{gidString(a.v4), gidString(b.v4)})
}
