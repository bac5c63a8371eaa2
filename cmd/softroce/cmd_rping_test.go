package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
)

// rpingData is what rping -v prints for ping i of the default 64 bytes.
func rpingData(prefix string, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sping data: rdma-ping-%d: ", prefix, i)
	c := 65 + i
	for n := len(fmt.Sprintf("rdma-ping-%d: ", i)); n < 63; n++ {
		b.WriteByte(byte(c))
		if c++; c > 122 {
			c = 65
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// TestRpingCommand runs "softroce rping -s" and "softroce rping -c" on
// the two ends of an in-memory link: the CM connection, the rping
// protocol (the server READs the client's ping and WRITEs it back, -V
// compares), and the tool's output on both streams.
func TestRpingCommand(t *testing.T) {
	cases := []struct {
		name           string
		srv, cli       []string
		srvOut, cliOut string // exact stdout; "" with -d (checked by contains)
		contains       []string
	}{
		{"-v -C 3", []string{"-v", "-C", "3"}, []string{"-v", "-V", "-C", "3"},
			rpingData("server ", 0) + rpingData("server ", 1) + rpingData("server ", 2),
			rpingData("", 0) + rpingData("", 1) + rpingData("", 2), nil},
		{"quiet -C 5", nil, []string{"-C", "5", "-V"}, "", "", nil},
		{"-d -S 100 -C 2", []string{"-d", "-S", "100"}, []string{"-d", "-V", "-S", "100", "-C", "2"}, "-", "-",
			[]string{"size 100", "count 2", "validate data", "rdma_connect successful", "recv completion", "send completion"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := pipeNodes(t)
			sv, cl := runPair(t, h,
				append([]string{"rping", "-s", "-a", "0.0.0.0", "-p", port, "--dev", "b", "--ip", "10.9.0.2/24"}, c.srv...),
				append([]string{"rping", "-c", "-a", "10.9.0.2", "-p", port, "--dev=a", "--ip=10.9.0.1/24"}, c.cli...))
			if sv.code != 0 || cl.code != 0 {
				t.Fatalf("exit %d %d\nserver:\n%s%s\nclient:\n%s%s", sv.code, cl.code, sv.out, sv.errout, cl.out, cl.errout)
			}
			if sv.errout != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" || cl.errout != "client DISCONNECT EVENT...\n" {
				t.Errorf("stderr:\nserver: %q\nclient: %q", sv.errout, cl.errout)
			}
			if c.srvOut != "-" && (sv.out != c.srvOut || cl.out != c.cliOut) {
				t.Errorf("stdout:\nserver:\n%s\nclient:\n%s", sv.out, cl.out)
			}
			for _, want := range c.contains {
				if !strings.Contains(cl.out, want+"\n") {
					t.Errorf("client -d output lacks %q:\n%s", want, cl.out)
				}
			}
			if c.srvOut == "-" && strings.Count(sv.out, "server rdma write complete \n") != 2 {
				t.Errorf("server -d output:\n%s", sv.out)
			}
		})
	}
}

// TestRpingAddresses: the server binds to the address -a names (IPv4 or
// IPv6, as rping's rdma_bind_addr), and the client reaches it over the
// same family: the RoCEv2 GIDs of IPv6 addresses carry the CM MADs and
// the pings.
func TestRpingAddresses(t *testing.T) {
	for _, c := range []struct {
		name           string
		srvIP, cliIP   string // --ip of each side
		srvAddr, dstIP string // the server's -a and the client's -a
	}{
		{"IPv4 address", "10.9.0.2/24", "10.9.0.1/24", "10.9.0.2", "10.9.0.2"},
		{"IPv6 address", "fd00:9::2/64", "fd00:9::1/64", "fd00:9::2", "fd00:9::2"},
		{"IPv6 wildcard", "fd00:9::2/64", "fd00:9::1/64", "::", "fd00:9::2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pipeNodes(t)
			sv, cl := runPair(t, h,
				[]string{"rping", "-s", "-a", c.srvAddr, "-p", port, "-v", "--dev", "b", "--ip", c.srvIP, "--nodad"},
				[]string{"rping", "-c", "-a", c.dstIP, "-p", port, "-v", "-V", "-C", "2", "--dev", "a", "--ip", c.cliIP, "--nodad"})
			if sv.code != 0 || cl.code != 0 || sv.out != rpingData("server ", 0)+rpingData("server ", 1) ||
				cl.out != rpingData("", 0)+rpingData("", 1) || cl.errout != "client DISCONNECT EVENT...\n" {
				t.Errorf("exit %d %d\nserver:\n%s%s\nclient:\n%s%s", sv.code, cl.code, sv.out, sv.errout, cl.out, cl.errout)
			}
		})
	}
}

// TestRpingAddrError: a client whose server address no neighbour answers
// gets ADDR_ERROR with -ETIMEDOUT once rping's 2000 ms resolution
// timeout is over, and fails as rping does.
func TestRpingAddrError(t *testing.T) {
	var o, e strings.Builder
	code := runWith(pipeNodes(t), []string{"rping", "-c", "-a", "10.9.0.77", "-p", "9999", "--dev", "a", "--ip", "10.9.0.1/24"}, &o, &e)
	want := "cma event RDMA_CM_EVENT_ADDR_ERROR, error -110\nwaiting for addr/route resolution state 11\n"
	if code != 255 || e.String() != want {
		t.Errorf("exit %d, stderr %q, want 255 %q", code, e.String(), want)
	}
}

// TestRpingBindError: a server -a that is not the node's address fails
// as rping's rdma_bind_addr does (EADDRNOTAVAIL, perror's words).
func TestRpingBindError(t *testing.T) {
	var o, e strings.Builder
	code := runWith(pipeNodes(t), []string{"rping", "-s", "-a", "10.9.0.99", "--dev", "b", "--ip", "10.9.0.2/24"}, &o, &e)
	if want := "rdma_bind_addr: Cannot assign requested address\n"; code != 255 || e.String() != want {
		t.Errorf("exit %d, stderr %q, want 255 %q", code, e.String(), want)
	}
}

// TestRpingReject: a client whose REQ finds no listener gets the kernel's
// REJ (invalid service ID) and fails as rping does.
func TestRpingReject(t *testing.T) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 1500, QueueLen: 1024})
	defer ea.Close()
	h := hooks{openNode: func(lf *linkFlags, stderr io.Writer) (*node.Node, error) {
		cfg, err := lf.config()
		if err != nil {
			return nil, err
		}
		cfg.Link, cfg.MTU = ea, 0
		return node.New(context.Background(), cfg)
	}}
	peer, err := node.New(context.Background(), node.Config{Link: eb, MAC: net.HardwareAddr{2, 0, 0, 0, 0x99, 0x99}, Addrs: []netip.Prefix{netip.MustParsePrefix("10.9.0.2/24")}})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	cm, err := cma.New(cma.Config{Dev: peer.Device()})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	var o, e strings.Builder
	code := runWith(h, []string{"rping", "-c", "-a", "10.9.0.2", "-p", "9999", "--ip", "10.9.0.1/24"}, &o, &e)
	want := "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n"
	if code != 255 || e.String() != want {
		t.Errorf("exit %d, stderr %q, want 255 %q", code, e.String(), want)
	}
}

func TestRpingFlags(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
		usage  bool
	}{
		{"no side", []string{"-v"}, 22, "rping: -s or -c required\n", true},
		{"size too small", []string{"-s", "-S", "10"}, 22, "Invalid size 10 (valid range is 26 to 65536)\n", false},
		{"size too large", []string{"-c", "-a", "1.2.3.4", "-S65536"}, 22, "Invalid size 65536 (valid range is 26 to 65536)\n", false},
		{"negative count", []string{"-s", "-C", "-1"}, 22, "Invalid count -1\n", false},
		{"client without address", []string{"-c"}, 22, "rping: the client needs -a addr\n", true},
		{"unknown", []string{"-s", "-x"}, 22, "rping: invalid option -- 'x'\n", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o, e strings.Builder
			code := run(append([]string{"rping"}, c.args...), &o, &e)
			if code != c.code || e.String() != c.stderr || strings.HasPrefix(o.String(), "rping -s") != c.usage {
				t.Errorf("exit %d stderr %q stdout %q", code, e.String(), o.String())
			}
		})
	}
}
