package main

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitLinkArgs(t *testing.T) {
	for _, tc := range []struct {
		in         string
		link, rest string
		err        bool
	}{
		{in: "-s 64 --tap sr0 -n 5 10.0.0.1", link: "--tap=sr0", rest: "-s 64 -n 5 10.0.0.1"},
		{in: "--ip=10.0.0.5/24 --ip fd00::5/64 --mtu 9000 -m 4096", link: "--ip=10.0.0.5/24 --ip=fd00::5/64 --mtu=9000", rest: "-m 4096"},
		{in: "--bridge br0 --iface eth1 --mac 02:00:00:00:00:01 --pcap x.pcap -d rxe1", link: "--bridge=br0 --iface=eth1 --mac=02:00:00:00:00:01 --pcap=x.pcap", rest: "-d rxe1"},
		{in: "--size 64 --iters=5 -- --tap x", rest: "--size 64 --iters=5 -- --tap x"},
		{in: "-tap sr0", rest: "-tap sr0"}, // short forms belong to the tool's getopt
		{in: "-s 64 --pcap", err: true},
		{in: "--nodad -n 5 --tap sr0 10.0.0.1", link: "--nodad=true --tap=sr0", rest: "-n 5 10.0.0.1"}, // no value
		{in: "--nodad=false -c", link: "--nodad=false", rest: "-c"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			link, rest, err := splitLinkArgs(strings.Fields(tc.in))
			if tc.err {
				if !errors.Is(err, unix.EINVAL) {
					t.Fatalf("err = %v, want EINVAL", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(link, " ") != tc.link || strings.Join(rest, " ") != tc.rest {
				t.Errorf("link %q rest %q, want %q %q", link, rest, tc.link, tc.rest)
			}
		})
	}
}
