//go:build linux

package peer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

func TestLabAddresses(t *testing.T) {
	l := &Lab{cfg: LabConfig{Addr: netip.MustParsePrefix("10.77.0.1/24"), Addr6: netip.MustParsePrefix("fd77::1/64")}}
	cases := []struct {
		name     string
		want4    string
		want6    string
		function func() (netip.Prefix, netip.Prefix)
	}{
		{name: "peer 1", function: func() (netip.Prefix, netip.Prefix) { return l.PeerAddr(1) }, want4: "10.77.0.11/24", want6: "fd77::11/64"},
		{name: "peer 2", function: func() (netip.Prefix, netip.Prefix) { return l.PeerAddr(2) }, want4: "10.77.0.12/24", want6: "fd77::12/64"},
		{name: "softroce", function: l.SoftroceAddr, want4: "10.77.0.2/24", want6: "fd77::2/64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a4, a6 := c.function()
			if a4.String() != c.want4 || a6.String() != c.want6 {
				t.Errorf("got %v %v, want %s %s", a4, a6, c.want4, c.want6)
			}
		})
	}
}

func TestCheckTcpdumpStats(t *testing.T) {
	cases := []struct {
		name string
		log  string
		ok   bool
	}{
		{"complete", "tcpdump: listening on br0\n1198 packets captured\n1198 packets received by filter\n0 packets dropped by kernel\n", true},
		{"singular", "1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n", true},
		{"not drained", "157 packets captured\n172 packets received by filter\n0 packets dropped by kernel\n", false},
		{"dropped", "1049 packets captured\n1049 packets received by filter\n158 packets dropped by kernel\n", false},
		{"no statistics", "tcpdump: listening on br0\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := checkTcpdumpStats(c.log); (err == nil) != c.ok {
				t.Errorf("error %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// TestLab checks the namespace plumbing without VMs: the bridge and a
// TAP with jumbo MTU and the kernel addresses, Do switching in and back,
// and Close removing the namespace.
func TestLab(t *testing.T) {
	testenv.RequireRoot(t)
	lab := newTestLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := lab.AddTAP(ctx, "taptest"); err != nil {
		t.Fatal(err)
	}
	out, err := lab.Exec(ctx, "ip", "-j", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	var links []struct {
		Name   string `json:"ifname"`
		MTU    int    `json:"mtu"`
		Master string `json:"master"`
		Addrs  []struct {
			Local  string `json:"local"`
			Prefix int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		t.Fatalf("ip -j addr: %v: %s", err, out)
	}
	byName := make(map[string]int)
	for i, l := range links {
		byName[l.Name] = i
	}
	br, okBr := byName[lab.Bridge()]
	tap, okTap := byName["taptest"]
	if !okBr || !okTap {
		t.Fatalf("links %s, want %s and taptest", out, lab.Bridge())
	}
	if links[br].MTU != 9000 || links[tap].MTU != 9000 || links[tap].Master != lab.Bridge() {
		t.Errorf("bridge MTU %d, TAP MTU %d master %q; want 9000, 9000, %s", links[br].MTU, links[tap].MTU, links[tap].Master, lab.Bridge())
	}
	var addrs []string
	for _, a := range links[br].Addrs {
		addrs = append(addrs, a.Local)
	}
	for _, want := range []string{"10.77.0.1", "fd77::1"} {
		if !strings.Contains(" "+strings.Join(addrs, " ")+" ", " "+want+" ") {
			t.Errorf("bridge addresses %v lack %s", addrs, want)
		}
	}

	// Do: a listener opened inside stays in the namespace; the TAP is
	// visible inside only.
	var ln net.Listener
	err = lab.Do(func() error {
		if _, err := net.InterfaceByName("taptest"); err != nil {
			return err
		}
		var err error
		ln, err = net.Listen("tcp", "10.77.0.1:0")
		return err
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	defer ln.Close()
	if _, err := net.InterfaceByName("taptest"); err == nil {
		t.Error("taptest visible outside the lab after Do")
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	if err := lab.Do(func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		b := make([]byte, 2)
		if _, err := c.Read(b); err != nil || string(b) != "hi" {
			return errors.Join(err, errors.New("read "+string(b)))
		}
		return nil
	}); err != nil {
		t.Errorf("connect inside the lab: %v", err)
	}
	if err := lab.Do(func() error { return os.ErrInvalid }); !errors.Is(err, os.ErrInvalid) {
		t.Errorf("Do returned %v, want f's error", err)
	}

	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/netns/" + lab.Name()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace file after Close: %v", err)
	}
}
