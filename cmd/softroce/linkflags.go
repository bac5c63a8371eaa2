package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/node"
)

// linkFlags are the flags of every command that builds a device: which link
// the softroce host sits on and its own addresses. Without --tap or
// --iface the device sits on one end of an in-memory link with nobody on
// the other end, which is enough for devinfo and stats.
type linkFlags struct {
	tap, bridge, iface string
	ips                []netip.Prefix
	mac                string
	mtu                int
	dev                string
	pcap               string
	nodad              bool
	udp                bool
}

// addLinkFlags registers the link flags on fs and returns where they land.
// Go's flag package accepts both -tap and --tap.
func addLinkFlags(fs *flag.FlagSet) *linkFlags {
	f := &linkFlags{}
	fs.StringVar(&f.tap, "tap", "", "create (or attach to) the TAP device `NAME` and put softroce on it")
	fs.StringVar(&f.bridge, "bridge", "", "attach the TAP (or --iface) to the bridge `NAME`")
	fs.StringVar(&f.iface, "iface", "", "put softroce on the existing interface `NAME` (AF_PACKET)")
	fs.BoolVar(&f.udp, "udp", false, "put softroce on UDP port 4791 of the --ip addresses (all of the host's without --ip): no privilege, the kernel routes")
	fs.Func("ip", "softroce's own address `CIDR` (IPv4 or IPv6; repeatable); each is a RoCEv2 GID", func(s string) error {
		p, err := parsePrefix(s)
		if err != nil {
			return err
		}
		f.ips = append(f.ips, p)
		return nil
	})
	fs.StringVar(&f.mac, "mac", "", "softroce's own `MAC` address (default: derived from -d, the link and the addresses)")
	fs.IntVar(&f.mtu, "mtu", 0, "the link's `MTU` (default: the interface's, 1500 in memory)")
	fs.StringVar(&f.dev, "d", node.DefaultName, "the device `NAME`")
	fs.BoolVar(&f.nodad, "nodad", false, "skip IPv6 duplicate address detection of the --ip addresses (as `ip addr add ... nodad`)")
	fs.StringVar(&f.pcap, "pcap", "", "write every frame softroce sends or receives to the pcap `FILE`")
	return f
}

// parsePrefix accepts an address with a prefix length, or a bare address
// as a host route (/32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// config turns the flags into a node.Config. Without --mac the MAC is
// derived from the device name, the link and the addresses, so that one
// command line always gives the same MAC (and GUID) and two softroce
// processes on one bridge with different addresses get different ones.
func (f *linkFlags) config() (node.Config, error) {
	if f.tap != "" && f.iface != "" {
		return node.Config{}, fmt.Errorf("--tap and --iface are exclusive")
	}
	if f.udp && (f.tap != "" || f.iface != "" || f.bridge != "") {
		return node.Config{}, fmt.Errorf("--udp excludes --tap, --iface and --bridge")
	}
	if f.bridge != "" && f.tap == "" && f.iface == "" {
		return node.Config{}, fmt.Errorf("--bridge needs --tap or --iface")
	}
	cfg := node.Config{Name: f.dev, TAP: f.tap, Iface: f.iface, Bridge: f.bridge, Addrs: f.ips,
		MTU: f.mtu, PcapPath: f.pcap, NoDAD: f.nodad}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|%v", f.dev, f.tap, f.iface, f.ips)
	if f.udp {
		fmt.Fprint(h, "|udp")
	}
	cfg.Seed = h.Sum64()
	if f.mac != "" {
		mac, err := net.ParseMAC(f.mac)
		if err != nil || len(mac) != 6 {
			return node.Config{}, fmt.Errorf("--mac %q: not an Ethernet address", f.mac)
		}
		cfg.MAC = mac
	}
	return cfg, nil
}

// open builds the node the flags describe: the device, the host on its
// link, the capture. The caller closes it. This is what every command that
// needs a device (devinfo, stats, pingpong, perf) calls after parsing:
//
//	lf := addLinkFlags(fs)
//	... parseFlags(fs, args) ...
//	n, err := lf.open(stderr)
//	defer n.Close()
//	dev := n.Device()
//
// Before moving a connected QP to RTR, call n.Resolve(ctx, peerIP) and
// put the MAC in the AV (or modify with udata, which resolves).
//
// A flag combination that makes no sense is reported on stderr and returns
// errUsage (exit status 2).
func (f *linkFlags) open(stderr io.Writer) (*node.Node, error) {
	cfg, err := f.config()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, errUsage
	}
	if f.udp {
		var addrs []netip.Addr
		for _, p := range f.ips {
			addrs = append(addrs, p.Addr())
		}
		l, err := node.OpenUDP(addrs, f.mtu)
		if err != nil {
			fmt.Fprintln(stderr, "softroce:", err)
			return nil, err
		}
		cfg.Link, cfg.MTU = l, 0
	}
	n, err := node.New(cfg)
	if errors.Is(err, unix.EADDRINUSE) && !f.udp {
		// The address is someone else's: say so plainly, as the kernel
		// logs "IPv6 duplicate address ... detected!".
		fmt.Fprintln(stderr, "softroce: duplicate address detection failed: another node on the link holds the address; pick another --ip (or --nodad to skip the check)")
	}
	return n, err
}
