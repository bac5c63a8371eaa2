package main

import (
	"flag"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestRepeatedDeviceFlagsGroupTheirAddresses: serve's and run's -d may be
// repeated; --ip and --mac after a -d are its device's, those before the
// second -d the first's (in either order around the first -d); the other
// link flags are shared. What several devices cannot share is refused.
func TestRepeatedDeviceFlagsGroupTheirAddresses(t *testing.T) {
	parse := func(args ...string) (*deviceFlags, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		lf := serveLinkFlags(fs)
		dv := addDeviceFlags(fs, lf)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return dv, dv.check()
	}
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, a := range s {
			out = append(out, netip.MustParsePrefix(a))
		}
		return out
	}
	dv, err := parse("--ip", "10.0.0.1/24", "-d", "rxe4", "--mtu", "4200", "-d", "rxe5", "--ip", "10.0.0.2/24", "--ip", "fd00::2/64",
		"--mac", "02:00:00:00:00:05", "-d", "rxe6")
	if err != nil {
		t.Fatal(err)
	}
	if got := dv.names(); !slices.Equal(got, []string{"rxe4", "rxe5", "rxe6"}) {
		t.Errorf("names %v", got)
	}
	if !slices.Equal(dv.lf.ips, pfx("10.0.0.1/24")) || dv.lf.mac != "" {
		t.Errorf("the first device's --ip %v --mac %q", dv.lf.ips, dv.lf.mac)
	}
	second := dv.linkFlagsOf(dv.extra[0])
	if second.dev != "rxe5" || !slices.Equal(second.ips, pfx("10.0.0.2/24", "fd00::2/64")) || second.mac != "02:00:00:00:00:05" || second.mtu != 4200 {
		t.Errorf("the second device's flags: -d %s --ip %v --mac %q --mtu %d", second.dev, second.ips, second.mac, second.mtu)
	}
	if third := dv.linkFlagsOf(dv.extra[1]); len(third.ips) != 0 || third.mac != "" || third.seed == second.seed {
		t.Errorf("the third device: --ip %v --mac %q, seed %#x like the second's", third.ips, third.mac, third.seed)
	}
	// One -d: every --ip is the device's, as before.
	if dv, err := parse("-d", "rxe4", "--ip", "10.0.0.1/24", "--ip", "10.0.1.1/24"); err != nil || !slices.Equal(dv.lf.ips, pfx("10.0.0.1/24", "10.0.1.1/24")) || len(dv.extra) != 0 {
		t.Errorf("one -d: %v, ips %v", err, dv.lf.ips)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-d", "rxe0", "-d", "rxe1", "--udp"}, "share an in-memory fabric"},
		{[]string{"-d", "rxe0", "-d", "rxe1", "--pcap", "x.pcap"}, "share an in-memory fabric"},
		{[]string{"-d", "rxe0", "-d", "rxe0"}, "given twice"},
		{[]string{"-d", "rxe0", "-d", "mlx5_0"}, "starting with \"rxe\""},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
