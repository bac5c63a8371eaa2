package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/node"
	"golang.org/x/sys/unix"
)

// The link flags of "softroce pingpong", "perf" and "rping" are taken out
// of the command line before the rest goes to the real tool's getopt_long
// parser. They are long options only (--tap NAME or --tap=NAME), so that no
// short-option cluster of the tools is mistaken for one. --mtu is the
// link's MTU, as in every softroce command; the path MTU is the tools' -m.
// The tool's -d (rping: --dev) names the device.

// splitLinkArgs separates the link flags (returned in Go flag syntax) from
// the tool's arguments. Everything after "--" belongs to the tool.
func splitLinkArgs(args []string) (linkArgs, rest []string, err error) {
	return splitLongFlags(args, toolLinkFlag)
}

// splitLongFlags separates the long flags that find knows (returned as
// --name=value) from the other arguments; everything after "--" is left
// to the tool.
func splitLongFlags(args []string, find func(name string) *linkFlag) (flags, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		d := find(name)
		if !strings.HasPrefix(a, "--") || d == nil {
			rest = append(rest, a)
			continue
		}
		switch {
		case d.arg == "" && !hasVal:
			val = "true"
		case d.arg != "" && !hasVal:
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("option --%s requires an argument: %w", name, unix.EINVAL)
			}
			i++
			val = args[i]
		}
		flags = append(flags, "--"+name+"="+val)
	}
	return flags, rest, nil
}

// toolLinkFlag returns the definition of the tool commands' link flag
// name, or nil.
func toolLinkFlag(name string) *linkFlag {
	for i, d := range linkFlagDefs {
		if d.tool && d.name == name {
			return &linkFlagDefs[i]
		}
	}
	return nil
}

// openNode builds the softroce host from the parsed link flags, through
// the test hook when one is set.
func (e *env) openNode(lf *linkFlags) (*node.Node, error) {
	if e.hooks.openNode != nil {
		return e.hooks.openNode(lf, e.stderr)
	}
	return lf.open(e.context(), e.stderr)
}

// toolNode parses the link flags for tool command c and opens the node;
// dev (the tool's -d) names the device when set. It returns the run's
// seed (--seed, or a random one), printed on stderr with --print-seed.
func (e *env) toolNode(c string, linkArgs []string, dev string) (*node.Node, uint64, error) {
	fs := newFlagSet(e, c)
	lf := addLinkFlags(fs)
	if _, err := parseFlags(fs, linkArgs); err != nil {
		return nil, 0, err
	}
	if dev != "" {
		lf.dev = dev
	}
	if !lf.seedSet {
		lf.seed, lf.seedSet = randomSeed(), true
	}
	if lf.printSeed {
		fmt.Fprintf(e.stderr, "softroce: seed %#x\n", lf.seed)
	}
	n, err := e.openNode(lf)
	return n, lf.seed, err
}

// gidIndex returns the GID index a tool uses: the one given (-g, -x), or,
// when none is (-1), the GID of the node's first --ip address (not link-local). (The real
// pingpong tools send no GRH without -g, which RoCE refuses; perftest picks
// a RoCEv2 GID by itself. softroce does the useful thing in both.)
func gidIndex(n *node.Node, idx int) (int, error) {
	if idx >= 0 {
		return idx, nil
	}
	for _, a := range n.Addrs() {
		if !a.IsLinkLocalUnicast() {
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

// oobConn opens the out-of-band TCP connection: a client dials server:port
// (retrying for e.dialTimeout, as the C tools do not: a script may start
// both sides at once), a server listens on port and accepts one
// connection, calling the serverReady hook once it listens.
func (e *env) oobConn(server string, port int) (net.Conn, error) {
	if server != "" {
		addr := net.JoinHostPort(server, strconv.Itoa(port))
		timeout := e.dialTimeout
		if timeout == 0 {
			timeout = 5 * time.Second
		}
		deadline := time.Now().Add(timeout)
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
	if e.serverReady != nil {
		e.serverReady(l.Addr())
	}
	if e.giveUp != nil {
		accepted := make(chan struct{})
		defer close(accepted)
		go func() {
			select {
			case <-e.giveUp:
				l.Close()
			case <-accepted:
			}
		}()
	}
	c, err := l.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return c, nil
}
