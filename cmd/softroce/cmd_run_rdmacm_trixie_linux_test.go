package main

import (
	"context"
	"os/exec"
	"strconv"
	"testing"

	"github.com/softroce/softroce/internal/debroot"
)

// TestTrixieRDMACMToolsThroughDaemon: Debian 13's librdmacm (rdma-core 56)
// and its tools, as nobody in a chroot of trixie's packages, on one daemon
// of this host (its preload library, sysfs tree and socket bound in):
// rping, ucmatose, udaddy, rdma_server/rdma_client, rstream, riostream,
// ib_write_bw -R and mckey, each pair exiting 0 with its result; and
// ib_write_bw, ib_send_bw and ib_read_lat -R over IPv6 (--ipv6-addr,
// which Debian 12's perftest lacks: it resolves -R addresses as IPv4
// only).
func TestTrixieRDMACMToolsThroughDaemon(t *testing.T) {
	tree := debroot.ForTest(t, debroot.TrixieRDMA())
	needCC(t)
	const dev, ip, ip6 = "rxe14", "10.78.5.1", "fd00:78:5::1"
	home := userHome(t)
	served := serveAsUser(t, home, dev, "--ip", ip+"/24", "--ip", ip6+"/64", "--nodad")
	env, binds := debroot.HostPaths(append([]string{"PATH=/usr/bin:/bin"}, served...), "LD_PRELOAD", "SYSFS_PATH", "SOFTROCE_SOCK")
	run := func(tool string, args ...string) *exec.Cmd {
		cmd, err := tree.Command(context.Background(), binds, env, append([]string{"/usr/bin/" + tool}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return inHomeNet(t, home, cmd)
	}
	progs := cmDaemon(t, home, dev, run)
	port := 19600
	next := func() string { port++; return strconv.Itoa(port) }
	for _, c := range []struct {
		name, server, client   string
		serverArgs, clientArgs func(p string) []string
		serverWant, clientWant string
	}{
		{"rping -C 10 -v", "rping", "rping",
			func(p string) []string { return []string{"-s", "-a", ip, "-p", p, "-C", "10", "-v"} },
			func(p string) []string { return []string{"-c", "-a", ip, "-p", p, "-C", "10", "-v"} },
			"server ping data: rdma-ping-9", "ping data: rdma-ping-9"},
		{"ucmatose -c 4", "ucmatose", "ucmatose",
			func(p string) []string { return []string{"-p", p, "-c", "4"} },
			func(p string) []string { return []string{"-s", ip, "-p", p, "-c", "4"} },
			"return status 0", "return status 0"},
		{"udaddy -c 4", "udaddy", "udaddy", // its -p is the port space: port 7174
			func(string) []string { return []string{"-c", "4"} },
			func(string) []string { return []string{"-s", ip, "-c", "4"} },
			"return status 0", "return status 0"},
		{"rdma_server", "rdma_server", "rdma_client",
			func(p string) []string { return []string{"-p", p} },
			func(p string) []string { return []string{"-s", ip, "-p", p} },
			"rdma_server: end 0", "rdma_client: end 0"},
		{"rstream", "rstream", "rstream",
			func(p string) []string { return []string{"-p", p, "-S", "4096", "-C", "200"} },
			func(p string) []string { return []string{"-s", ip, "-p", p, "-S", "4096", "-C", "200"} },
			"Gb/sec", "Gb/sec"},
		{"riostream", "riostream", "riostream",
			func(p string) []string { return []string{"-p", p, "-S", "4096", "-C", "200"} },
			func(p string) []string { return []string{"-s", ip, "-p", p, "-S", "4096", "-C", "200"} },
			"Gb/sec", "Gb/sec"},
		{"ib_write_bw -R", "ib_write_bw", "ib_write_bw",
			func(p string) []string { return []string{"-R", "-F", "-d", dev, "-n", "200", "-p", p} },
			func(p string) []string { return []string{"-R", "-F", "-d", dev, "-n", "200", "-p", p, ip} },
			"#bytes", "#bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := next()
			cmPairWith(t, progs, c.server, c.client, c.serverArgs(p), c.clientArgs(p), serverPort(c.server, c.serverArgs(p)), c.serverWant, c.clientWant)
		})
	}
	// IPv6 needs --ipv6-addr, which Debian 12's perftest lacks.
	for _, tool := range []string{"ib_write_bw", "ib_send_bw", "ib_read_lat"} {
		t.Run(tool+" -R --ipv6-addr", func(t *testing.T) {
			p := next()
			args := []string{"-R", "--ipv6-addr", "-F", "-d", dev, "-n", "200", "-p", p}
			serverWant := "#bytes"
			if tool == "ib_read_lat" {
				serverWant = "" // the passive side of a READ latency test prints no result
			}
			cmPairWith(t, progs, tool, tool, args, append(args, ip6), p, serverWant, "#bytes")
		})
	}
	t.Run("mckey", func(t *testing.T) { mckeyGroup(t, run, "mckey", ip, "239.1.2.4") })
}
