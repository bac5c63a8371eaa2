package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

// extraDevice is a device of serve or run after the first: its name and
// its own --ip and --mac.
type extraDevice struct {
	name string
	ips  []netip.Prefix
	mac  string
}

// deviceFlags makes serve's and run's -d repeatable: each -d after the
// first adds a device to the daemon, on the in-memory fabric the first
// sits on, and the --ip and --mac given after a -d are that device's
// (before the second -d they are the first's).
type deviceFlags struct {
	lf    *linkFlags
	n     int // -d given so far
	extra []*extraDevice
}

// addDeviceFlags turns fs's -d, --ip and --mac (addLinkFlags's) into the
// per-device flags of deviceFlags.
func addDeviceFlags(fs *flag.FlagSet, lf *linkFlags) *deviceFlags {
	df := &deviceFlags{lf: lf}
	d := fs.Lookup("d")
	d.Usage = "the device `NAME` (the rxe provider serves only names starting with rxe); repeat it to serve several devices from one daemon, " +
		"on one in-memory fabric, each taking the --ip and --mac given after it"
	d.Value = &perDevice{df: df, name: "d", inner: d.Value}
	for _, name := range []string{"ip", "mac"} {
		f := fs.Lookup(name)
		f.Value = &perDevice{df: df, name: name, inner: f.Value}
	}
	return df
}

// perDevice is the flag.Value of -d, --ip and --mac under deviceFlags.
type perDevice struct {
	df    *deviceFlags
	name  string
	inner flag.Value
}

func (v *perDevice) String() string {
	if v.inner == nil {
		return ""
	}
	return v.inner.String()
}

func (v *perDevice) Set(s string) error {
	df := v.df
	if v.name == "d" {
		df.n++
		if df.n == 1 {
			return v.inner.Set(s)
		}
		df.extra = append(df.extra, &extraDevice{name: s})
		return nil
	}
	if len(df.extra) == 0 {
		return v.inner.Set(s)
	}
	x := df.extra[len(df.extra)-1]
	if v.name == "mac" {
		x.mac = s
		return nil
	}
	p, err := parsePrefix(s)
	if err != nil {
		return err
	}
	x.ips = append(x.ips, p)
	return nil
}

// check refuses what several devices cannot share: a link other than the
// in-memory one (a TAP, an interface or UDP port 4791 is one device's), a
// capture, a VLAN, a name twice or one the rxe provider does not serve.
func (df *deviceFlags) check() error {
	if len(df.extra) == 0 {
		return nil
	}
	lf := df.lf
	if lf.tap != "" || lf.iface != "" || lf.udp || lf.pcap != "" || lf.vlan != 0 {
		return fmt.Errorf("several devices (-d %s): they share an in-memory fabric; --tap, --iface, --udp, --pcap and --vlan serve one device", strings.Join(df.names(), " -d "))
	}
	seen := map[string]bool{}
	for _, name := range df.names() {
		if err := uverbsd.ValidName(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("-d %s given twice", name)
		}
		seen[name] = true
	}
	return nil
}

// names returns the devices' names, the first first.
func (df *deviceFlags) names() []string {
	names := []string{df.lf.dev}
	for _, x := range df.extra {
		names = append(names, x.name)
	}
	return names
}

// linkFlagsOf returns the link flags of extra device x: the first's, with
// x's name, addresses and MAC, a seed of its own, and none of what only
// the first device has (the coverage recorder, the fault link).
func (df *deviceFlags) linkFlagsOf(x *extraDevice) *linkFlags {
	c := *df.lf
	c.dev, c.ips, c.mac = x.name, x.ips, x.mac
	c.recorder, c.deviceLink, c.deviceLinkPasses = nil, nil, nil
	c.seed = seedFor(df.lf.seed, x.name)
	return &c
}

// openFabric opens the nodes of the extra devices on the fabric the
// first device's flags name (lf.fabric), closing them again on failure.
func (e *env) openFabric(df *deviceFlags) ([]*node.Node, error) {
	var nodes []*node.Node
	for _, x := range df.extra {
		n, err := e.openNode(df.linkFlagsOf(x))
		if err != nil {
			for _, n := range nodes {
				n.Close()
			}
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// newFabric gives the first device's flags the in-memory fabric the
// devices share, when there are several.
func (df *deviceFlags) newFabric() *link.Hub {
	if len(df.extra) == 0 {
		return nil
	}
	if !df.lf.seedSet {
		df.lf.seed, df.lf.seedSet = randomSeed(), true
	}
	h := link.NewHub(&link.PipeConfig{MTU: df.lf.mtu, QueueLen: 1024})
	df.lf.fabric = h
	return h
}

// servedDaemons returns the names of the daemons that serve devices of
// the user now (each by its directory's name: its first device).
func servedDaemons() []string {
	base := uverbsd.BaseDir()
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var names []string
	for _, ent := range ents {
		if !ent.IsDir() || uverbsd.ValidName(ent.Name()) != nil {
			continue
		}
		if uverbsd.Ready(filepath.Join(base, ent.Name())) {
			names = append(names, ent.Name())
		}
	}
	slices.Sort(names)
	return names
}

// theServingDaemon returns the daemon that serves the user's devices, for
// env and run without -d: "" when none does; an error when several do,
// whose fabrics are separate (each daemon's in-memory fabric is in its
// own process) and whose rdma_cm are separate (one rdma_cm file is one
// daemon's).
func theServingDaemon(cmd string) (string, error) {
	names := servedDaemons()
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("softroce %s: separate daemons serve %s: each is a fabric of its own, which one environment cannot join; "+
		"name one with -d NAME, or serve the devices from one daemon (softroce serve -d %s)",
		cmd, strings.Join(names, ", "), strings.Join(names, " -d "))
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}
