package rping

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
)

// TestParseFlags: rping's getopt string with clustered flags and glued
// arguments, operands ignored, its checks and messages.
func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"-cvV", "-a", "10.0.0.2", "-p7000", "-C", "3", "extra", "-S", "100", "--dev=rxe1"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Options{Client: true, Addr: netip.MustParseAddr("10.0.0.2"), Port: 7000, Count: 3, Size: 100,
		Verbose: true, Validate: true, Dev: "rxe1",
		echo: []string{"client", "verbose", "validate data", "port 7000", "count 3", "size 100"}}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("got %+v\nwant %+v", o, want)
	}
	for _, tc := range []struct {
		args  []string
		msg   string
		usage bool
	}{
		{[]string{"-v"}, "rping: -s or -c required", true},
		{[]string{"-c"}, "rping: the client needs -a addr", true},
		{[]string{"-s", "-x"}, "rping: invalid option -- 'x'", true},
		{[]string{"-s", "-S", "25"}, "Invalid size 25 (valid range is 26 to 65536)", false},
		{[]string{"-s", "-C", "-1"}, "Invalid count -1", false},
		{[]string{"-s", "-q"}, "softroce rping: -q is not supported: operation not supported", false},
	} {
		_, err := ParseFlags(tc.args)
		var ue *UsageError
		if err == nil || err.Error() != tc.msg || errors.As(err, &ue) != tc.usage {
			t.Errorf("%q: %v (usage error %v), want %q (usage %v)", tc.args, err, errors.As(err, &ue), tc.msg, tc.usage)
		}
	}
}

// pair returns two hosts on an in-memory link (10.9.0.1 and the
// server's 10.9.0.2), each device with its CM.
func pair(t *testing.T) (a, b Config, bIP netip.Addr) {
	t.Helper()
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 1500, QueueLen: 1024})
	t.Cleanup(func() { ea.Close(); eb.Close() })
	for i, l := range []link.Link{ea, eb} {
		n, err := node.New(context.Background(), node.Config{Link: l, MAC: net.HardwareAddr{2, 0, 0, 0, 9, byte(i + 1)},
			Addrs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}), 24)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		cm, err := cma.New(cma.Config{Dev: n.Device(), Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		c := Config{Dev: n.Device(), CM: cm}
		if i == 0 {
			a = c
		} else {
			b = c
		}
	}
	return a, b, netip.MustParseAddr("10.9.0.2")
}

// TestRun: rping's server and client connected through package cma: the
// pings (the server READs each and WRITEs it back, -V compares), both
// sides' output, the client's disconnection ending the server.
func TestRun(t *testing.T) {
	cc, sc, ip := pair(t)
	var sout, serr, cout, cerr bytes.Buffer
	ready := make(chan int, 1)
	sc.Stdout, sc.Stderr, sc.Ready = &sout, &serr, func(port int) { ready <- port }
	so, err := ParseFlags([]string{"-s", "-a", ip.String(), "-p", "0", "-v"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(sc, so) }()
	port := <-ready
	co, err := ParseFlags([]string{"-c", "-a", ip.String(), "-p", strconv.Itoa(port), "-C", "3", "-V"})
	if err != nil {
		t.Fatal(err)
	}
	cc.Stdout, cc.Stderr = &cout, &cerr
	if err := Run(cc, co); err != nil {
		t.Fatalf("client: %v\n%s", err, cerr.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v\n%s", err, serr.String())
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-"); n != 3 || cout.Len() != 0 ||
		cerr.String() != "client DISCONNECT EVENT...\n" || serr.String() != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
		t.Errorf("server:\n%s%s\nclient:\n%s%s", sout.String(), serr.String(), cout.String(), cerr.String())
	}
}

// TestChannelBacklog: the event channel takes CONNECT_REQUESTs up to
// rping's backlog of 3 not yet taken and refuses the next, so that the
// CM drops it; taking one makes room again. Other events always queue.
func TestChannelBacklog(t *testing.T) {
	ch := newChannel()
	req := &cma.Event{Type: cma.EventConnectRequest}
	for i := range backlog {
		if err := ch.handle(req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := ch.handle(req); !errors.Is(err, errBacklog) {
		t.Fatalf("request beyond the backlog: %v", err)
	}
	if err := ch.handle(&cma.Event{Type: cma.EventDisconnected}); err != nil {
		t.Fatal(err)
	}
	if ev, err := ch.next(context.Background()); err != nil || ev.Type != cma.EventConnectRequest {
		t.Fatalf("next: %v %v", ev.Type, err)
	}
	if err := ch.handle(req); err != nil {
		t.Fatalf("a request after one was taken: %v", err)
	}
	select {
	case <-ch.disconnected:
	default:
		t.Error("DISCONNECTED did not close disconnected")
	}
}
