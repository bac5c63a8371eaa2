package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/node"
	"golang.org/x/sys/unix"
)

// The link flags of "softroce pingpong" and "softroce perf" are taken out of
// the command line before the rest goes to the real tool's getopt_long
// parser (package oob). They are long options only (--tap NAME or
// --tap=NAME), so that no short-option cluster of the tools is mistaken for
// one. --mtu is the link's MTU, as in every softroce command; the path MTU
// is the tools' -m. -d names the device for both.
var toolLinkFlags = []string{"tap", "bridge", "iface", "ip", "mac", "mtu", "pcap", "nodad"}

// toolLinkBools are the link flags that take no value.
var toolLinkBools = []string{"nodad"}

// splitLinkArgs separates the link flags (returned in Go flag syntax) from
// the tool's arguments. Everything after "--" belongs to the tool.
func splitLinkArgs(args []string) (linkArgs, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !isToolLinkFlag(name) {
			rest = append(rest, a)
			continue
		}
		if slices.Contains(toolLinkBools, name) {
			if !hasVal {
				val = "true"
			}
			linkArgs = append(linkArgs, "--"+name+"="+val)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("option --%s requires an argument: %w", name, unix.EINVAL)
			}
			i++
			val = args[i]
		}
		linkArgs = append(linkArgs, "--"+name+"="+val)
	}
	return linkArgs, rest, nil
}

func isToolLinkFlag(name string) bool {
	for _, f := range toolLinkFlags {
		if f == name {
			return true
		}
	}
	return false
}

// openNode builds the softroce host of a pingpong or perf command. Tests
// replace it to put two in-process commands on the two ends of a
// link.Pipe.
var openNode = func(lf *linkFlags, stderr io.Writer) (*node.Node, error) { return lf.open(stderr) }

// toolNode parses the link flags for tool command c and opens the node;
// dev (the tool's -d) names the device when set.
func toolNode(c string, linkArgs []string, dev string, stderr io.Writer) (*node.Node, error) {
	fs := newFlagSet(c, stderr)
	lf := addLinkFlags(fs)
	if err := parseFlags(fs, linkArgs); err != nil {
		return nil, err
	}
	if dev != "" {
		lf.dev = dev
	}
	return openNode(lf, stderr)
}

// gidIndex returns the GID index a tool uses: the one given (-g, -x), or,
// when none is (-1), the GID of the node's first --ip address (not link-local). (The real
// pingpong tools send no GRH without -g, which RoCE refuses; perftest picks
// a RoCEv2 GID by itself. softroce does the useful thing in both.)
func gidIndex(n *node.Node, idx int) (int, error) {
	if idx >= 0 {
		return idx, nil
	}
	for _, p := range n.Host().Addrs() {
		if a := p.Addr(); !a.IsLinkLocalUnicast() {
			return n.GID(a)
		}
	}
	return 0, fmt.Errorf("no GID to use: give softroce an address with --ip (or a GID index): %w", unix.EINVAL)
}

// resolver returns an emu.Resolver asking the node's neighbour layer, as
// the kernel does for a connected QP's AV before RTR, waiting up to three
// times node.ResolveTimeout.
func resolver(n *node.Node) emu.Resolver {
	return emu.ResolverFunc(func(ctx context.Context, ip netip.Addr) ([6]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*node.ResolveTimeout)
		defer cancel()
		return n.Resolve(ctx, ip)
	})
}

// dialTimeout bounds how long a client keeps trying to reach a server that
// is not listening yet (the C tools try once; retrying for a moment lets a
// script start both sides at once).
var dialTimeout = 5 * time.Second

// oobConn opens the out-of-band TCP connection: a client dials server:port,
// a server listens on port and accepts one connection. ready, if not nil,
// is called once the server listens.
func oobConn(server string, port int, ready func(addr net.Addr)) (net.Conn, error) {
	if server != "" {
		addr := net.JoinHostPort(server, strconv.Itoa(port))
		deadline := time.Now().Add(dialTimeout)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				return c, nil
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	defer l.Close()
	if ready != nil {
		ready(l.Addr())
	}
	c, err := l.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return c, nil
}

// serverReady is a test hook called when a pingpong or perf server
// listens.
var serverReady func(addr net.Addr)
