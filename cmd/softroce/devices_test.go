package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/uverbsd"
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

// TestDaemonAddsAndRemovesDevicesWhileServing: a daemon serving one
// device on the in-memory link creates devices on request (its
// uverbsd.Links, what RDMA netlink's NEWLINK and DELLINK call), each on
// the fabric its first device's link then joins, with the netdev name
// asked for: a new device resolves the first's address across it. The
// kernel's errnos for a name served, a name librxe ignores, the first
// device and a name not served; a deleted device leaves the tree and the
// others go on.
func TestDaemonAddsAndRemovesDevicesWhileServing(t *testing.T) {
	userDirs(t)
	var errb bytes.Buffer
	lf := &linkFlags{dev: "rxe0", ips: []netip.Prefix{netip.MustParsePrefix("10.80.0.1/24")}, nodad: true}
	dir, err := uverbsd.DeviceDir(lf.dev)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{stdout: &errb, stderr: &errb}
	d, err := startDaemon(e, lf, &daemonFlags{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	links := d.srv.Links()
	if err := links.NewLink("rxe1", "fab1"); err != nil {
		t.Fatal(err)
	}
	if err := d.links.add("rxe2", "fab2", []netip.Prefix{netip.MustParsePrefix("10.80.0.3/24")}); err != nil {
		t.Fatal(err)
	}
	if got := d.srv.Devices(); !slices.Equal(got, []string{"rxe0", "rxe1", "rxe2"}) {
		t.Fatalf("devices %v", got)
	}
	for node, dev := range map[string]string{"uverbs1": "rxe1", "uverbs2": "rxe2"} {
		if b, err := os.ReadFile(filepath.Join(d.srv.SysfsPath(), "class/infiniband_verbs", node, "ibdev")); err != nil || string(b) != dev+"\n" {
			t.Errorf("%s/ibdev %q (%v), want %s", node, b, err, dev)
		}
	}
	rxe2 := d.extra[1]
	if got := rxe2.Device().NetDev().Name; got != "fab2" {
		t.Errorf("rxe2's netdev %q, want fab2", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mac, err := rxe2.Resolve(ctx, netip.MustParseAddr("10.80.0.1"))
	if err != nil || net.HardwareAddr(mac[:]).String() != d.n.MAC().String() {
		t.Fatalf("rxe2 resolves rxe0's address to %v (%v), want %v", net.HardwareAddr(mac[:]), err, d.n.MAC())
	}
	for _, c := range []struct {
		name string
		err  error
		want unix.Errno
	}{
		{"NewLink of a name served", links.NewLink("rxe1", "fab9"), unix.EEXIST},
		{"NewLink of a name librxe ignores", links.NewLink("mlx5_9", "fab9"), unix.EINVAL},
		{"DelLink of the first device", links.DelLink("rxe0"), unix.EINVAL},
		{"DelLink of a name not served", links.DelLink("rxe9"), unix.ENODEV},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := links.DelLink("rxe1"); err != nil {
		t.Fatal(err)
	}
	if got := d.srv.Devices(); !slices.Equal(got, []string{"rxe0", "rxe2"}) {
		t.Fatalf("devices after DelLink %v", got)
	}
	if _, err := os.Stat(filepath.Join(d.srv.SysfsPath(), "class/infiniband/rxe1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rxe1's entries after DelLink: %v", err)
	}
	if _, err := rxe2.Resolve(ctx, netip.MustParseAddr("10.80.0.1")); err != nil {
		t.Errorf("rxe2 after rxe1's deletion: %v", err)
	}
}
