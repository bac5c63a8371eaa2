package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/host"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
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
	seed               uint64
	seedSet            bool // --seed given: replay
	printSeed          bool
	udp                bool
	udpGSO             bool
	vlan               uint16
	coalesceACKs       bool
	kernel             rxe.Kernel // --kernel; 0: rxe.DefaultKernel
	// recorder, if set, is the device's coverage recorder (not a flag:
	// serve and run set it).
	recorder emu.Recorder
	// deviceLink, if set, wraps the device's link (node.Config.DeviceLink;
	// serve and run set it for wire faults).
	deviceLink func(link.Link) link.Link
	// deviceLinkPasses reports whether deviceLink passes frames on
	// unchanged (node.Config.DeviceLinkPasses).
	deviceLinkPasses func() bool
	// fabric, if set, is the in-memory link the device sits on, shared
	// with the daemon's other devices (not a flag: serve and run set it
	// for several -d).
	fabric *link.Hub
	// netdev names the device's port on the fabric, its netdev ("": the
	// node's default).
	netdev string
	// hostname names the host for the MAC of --udp without --ip; nil
	// means os.Hostname (tests set it).
	hostname func() (string, error)
}

// linkFlag defines one link flag. It is the one definition of the link
// flags: addLinkFlags registers them, splitLinkArgs finds them in a tool's
// command line and linkSynopsis writes their synopsis from it.
type linkFlag struct {
	name string // without dashes
	arg  string // the argument's placeholder; "" for a flag with no value
	help string
	// tool is false for the flags the tool commands do not take from
	// softroce: -d, which is the tools' own option there.
	tool bool
	set  func(f *linkFlags, v string) error
}

var linkFlagDefs = []linkFlag{
	{"tap", "NAME", "create (or attach to) the TAP device NAME and put softroce on it", true,
		func(f *linkFlags, v string) error { f.tap = v; return nil }},
	{"iface", "NAME", "put softroce on the existing interface NAME (AF_PACKET)", true,
		func(f *linkFlags, v string) error { f.iface = v; return nil }},
	{"udp", "", "put softroce on UDP port 4791 of the --ip addresses (all of the host's without --ip): no privilege, the kernel routes", true,
		func(f *linkFlags, v string) error {
			b, err := strconv.ParseBool(v)
			f.udp = b
			return err
		}},
	{"udp-gso", "", "with --udp, send runs of equal-sized frames to one destination (WRITE and READ response trains) as UDP GSO sends: " +
		"fewer trips through the kernel; each datagram's ICRC stays exact, but a capture on a device that passes GSO packets whole (a veth, a bridge) shows one packet per send", true,
		func(f *linkFlags, v string) error {
			b, err := strconv.ParseBool(v)
			f.udpGSO = b
			return err
		}},
	{"bridge", "BR", "attach the TAP (or --iface) to the bridge BR", true,
		func(f *linkFlags, v string) error { f.bridge = v; return nil }},
	{"ip", "CIDR", "softroce's own address CIDR (IPv4 or IPv6, with or without the prefix length; repeatable); each is a RoCEv2 GID", true,
		func(f *linkFlags, v string) error {
			p, err := parsePrefix(v)
			if err != nil {
				return err
			}
			f.ips = append(f.ips, p)
			return nil
		}},
	{"mac", "MAC", "softroce's own MAC address (default: derived from -d, the link and the addresses)", true,
		func(f *linkFlags, v string) error { f.mac = v; return nil }},
	{"mtu", "N", "the link's MTU of N bytes (default: the interface's, 1500 in memory)", true,
		func(f *linkFlags, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("not a size: %q", v)
			}
			f.mtu = n
			return nil
		}},
	{"vlan", "ID", "put softroce on 802.1Q VLAN ID (1-4094) of the --tap or --iface link, as on a VLAN interface (ip link add ... type vlan id ID): its frames are tagged (priority 0, as rxe's), its GIDs and receive completions carry the VLAN", true,
		func(f *linkFlags, v string) error {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n < 1 || n > 4094 {
				return fmt.Errorf("not a VLAN ID (1-4094): %q", v)
			}
			f.vlan = uint16(n)
			return nil
		}},
	{"coalesce-acks", "", coalesceACKsHelp, true,
		func(f *linkFlags, v string) error {
			b, err := strconv.ParseBool(v)
			f.coalesceACKs = b
			return err
		}},
	{"kernel", "VERSION", kernelHelp, true,
		func(f *linkFlags, v string) error {
			k, err := rxe.ParseKernel(v)
			f.kernel = k
			return err
		}},
	{"pcap", "FILE", "write every frame softroce sends or receives to the pcap FILE", true,
		func(f *linkFlags, v string) error { f.pcap = v; return nil }},
	{"nodad", "", "skip IPv6 duplicate address detection of the --ip addresses (as ip addr add ... nodad)", true,
		func(f *linkFlags, v string) error {
			b, err := strconv.ParseBool(v)
			f.nodad = b
			return err
		}},
	{"seed", "N", "replay a run: N seeds the starting PSNs, the key bytes, the CM's IDs and the host's nonces " +
		"(default: a random seed, as the real stack draws these at random; --print-seed shows it)", true,
		func(f *linkFlags, v string) error {
			n, err := strconv.ParseUint(v, 0, 64)
			f.seed, f.seedSet = n, true
			return err
		}},
	{"print-seed", "", "print the run's seed on stderr (softroce: seed N), to replay it with --seed", true,
		func(f *linkFlags, v string) error {
			b, err := strconv.ParseBool(v)
			f.printSeed = b
			return err
		}},
	{"d", "NAME", "the device NAME (default " + node.DefaultName + ")", false,
		func(f *linkFlags, v string) error { f.dev = v; return nil }},
}

// coalesceACKsHelp is the help of --coalesce-acks, a link flag that
// softroce loopback takes too.
const coalesceACKsHelp = "defer and merge the devices' ACKs as the kernel's hfi1 and qib drivers do (rxe.Config.CoalesceACKs): " +
	"fewer ACKs, later, each covering several messages; by default softroce answers as rxe, one ACK for every packet that asks for one"

// kernelHelp is the help of --kernel, a link flag that softroce loopback
// takes too.
const kernelHelp = "emulate the rxe of Linux VERSION: 7.3 (the default), 6.12 or 6.1 " +
	"(the device attributes, counters, events and fixes of that kernel's rxe; docs/kernels.md lists the differences)"

// linkValue is the flag.Value of a link flag: it sets the field through
// the definition.
type linkValue struct {
	f   *linkFlags
	def *linkFlag
	s   string
}

func (v *linkValue) String() string     { return v.s }
func (v *linkValue) Set(s string) error { v.s = s; return v.def.set(v.f, s) }
func (v *linkValue) IsBoolFlag() bool   { return v.def.arg == "" }

// addLinkFlags registers the link flags on fs and returns where they land.
// Go's flag package accepts both -tap and --tap.
func addLinkFlags(fs *flag.FlagSet) *linkFlags {
	f := &linkFlags{dev: node.DefaultName}
	for i := range linkFlagDefs {
		d := &linkFlagDefs[i]
		usage := d.help
		if d.arg != "" {
			// Every help text names its argument (a test checks).
			usage = strings.Replace(usage, d.arg, "`"+d.arg+"`", 1)
		}
		fs.Var(&linkValue{f: f, def: d}, d.name, usage)
	}
	return f
}

// linkSynopsis returns the synopsis of the link flags: those of the tool
// commands when tool is set (without -d), all of them otherwise. --tap and
// --iface, which exclude each other, share one bracket.
func linkSynopsis(tool bool) []string {
	var out []string
	for _, d := range linkFlagDefs {
		if tool && !d.tool {
			continue
		}
		s := "--" + d.name
		if len(d.name) == 1 {
			s = "-" + d.name
		}
		if d.arg != "" {
			s += " " + d.arg
		}
		if (d.name == "iface" || d.name == "udp") && len(out) > 0 && strings.HasPrefix(out[len(out)-1], "[--tap") {
			out[len(out)-1] = strings.TrimSuffix(out[len(out)-1], "]") + "|" + s + "]"
			continue
		}
		out = append(out, "["+s+"]")
	}
	return out
}

// printLinkFlags writes the tool commands' link flags, one entry each.
func printLinkFlags(w io.Writer) {
	for _, d := range linkFlagDefs {
		if !d.tool {
			continue
		}
		s := "  --" + d.name
		if d.arg != "" {
			s += " " + d.arg
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", s, d.help)
	}
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

// config turns the flags into a node.Config, without the link (open opens
// it). Without --mac the MAC is
// derived from the device name, the link and the addresses (and, for
// --udp without --ip, the host's name), so that one command line always
// gives the same MAC (and GUID) on one host and two softroce processes on
// one bridge with different addresses, or in two pods, get different ones.
// The seed of everything a peer should not predict (PSNs, keys, IDs,
// nonces) is --seed, or else drawn at random (and kept in f.seed).
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
	if f.udpGSO && !f.udp {
		return node.Config{}, fmt.Errorf("--udp-gso needs --udp")
	}
	if f.vlan != 0 && f.tap == "" && f.iface == "" {
		return node.Config{}, fmt.Errorf("--vlan needs --tap or --iface")
	}
	cfg := node.Config{Name: f.dev, Addrs: f.ips, PcapPath: f.pcap, NoDAD: f.nodad}
	cfg.DeviceLink, cfg.DeviceLinkPasses = f.deviceLink, f.deviceLinkPasses
	if rec, coalesce, kernel := f.recorder, f.coalesceACKs, f.kernel; rec != nil || coalesce || kernel != 0 {
		cfg.Rxe = func(rc *rxe.Config) {
			if rec != nil {
				rc.Device.Recorder = rec
			}
			rc.CoalesceACKs = coalesce
			rc.Kernel = kernel
		}
	}
	if f.tap == "" && f.iface == "" && !f.udp && f.fabric == nil {
		cfg.MTU = f.mtu // the in-memory link's; a TAP's is set when open opens it
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|%v", f.dev, f.tap, f.iface, f.ips)
	if f.udp {
		fmt.Fprint(h, "|udp")
	}
	if f.udp && len(f.ips) == 0 {
		// Bound to all of the host's addresses, every host (every pod
		// of one manifest) has the same command line: its name tells
		// them apart, as each rxe takes its MAC from its own netdev.
		hostname := f.hostname
		if hostname == nil {
			hostname = os.Hostname
		}
		if name, err := hostname(); err == nil {
			fmt.Fprintf(h, "|%s", name)
		}
	}
	cfg.MAC = host.RandomMAC(rand.New(rand.NewPCG(h.Sum64(), 0x736f6674726f6365)))
	if !f.seedSet {
		f.seed, f.seedSet = randomSeed(), true
	}
	cfg.Seed = f.seed
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
//	n, err := lf.open(ctx, stderr)
//	defer n.Close()
//	dev := n.Device()
//
// Before moving a connected QP to RTR, call n.Resolve(ctx, peerIP) and
// put the MAC in the AV (or modify with udata, which resolves).
//
// A flag combination that makes no sense is reported on stderr and returns
// errUsage (exit status 2).
func (f *linkFlags) open(ctx context.Context, stderr io.Writer) (*node.Node, error) {
	cfg, err := f.config()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, errUsage
	}
	switch {
	case f.fabric != nil:
		cfg.Link, err = f.fabric.AttachAs(f.netdev)
	case f.tap != "":
		cfg.Link, err = node.OpenTAP(f.tap, f.bridge, f.mtu)
	case f.iface != "":
		cfg.Link, err = node.OpenPacket(f.iface, f.bridge, f.mtu)
	case f.udp:
		var addrs []netip.Addr
		for _, p := range f.ips {
			addrs = append(addrs, p.Addr())
		}
		cfg.Link, err = node.OpenUDPLink(&udp.Config{Addrs: addrs, MTU: f.mtu, GSO: f.udpGSO})
	}
	if err != nil {
		return nil, err
	}
	if f.vlan != 0 {
		if cfg.Link, err = link.NewVLAN(cfg.Link, f.vlan); err != nil {
			return nil, err
		}
	}
	n, err := node.New(ctx, cfg)
	if errors.Is(err, unix.EADDRINUSE) && !f.udp {
		// The address is someone else's: say so plainly, as the kernel
		// logs "IPv6 duplicate address ... detected!".
		fmt.Fprintln(stderr, "softroce: duplicate address detection failed: another node on the link holds the address; pick another --ip (or --nodad to skip the check)")
	}
	return n, err
}

// randomSeed returns a seed no peer can predict, as the tools seed lrand48
// from the pid and the time and rxe draws its key bytes at random.
func randomSeed() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) ^ uint64(os.Getpid())<<32
	}
	return binary.LittleEndian.Uint64(b[:])
}

// seedFor derives the seed of one use (PSNs of a workload, the CM) from
// the run's seed, so that the uses draw different streams.
func seedFor(seed uint64, use string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s", seed, use)
	return h.Sum64()
}
