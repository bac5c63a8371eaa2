package tap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Open creates the TAP device name, or attaches to an existing persistent
// one, and configures it: MTU, kernel-side MAC, bridge master, up. It is
// equivalent to `ip tuntap add dev NAME mode tap [multi_queue]` plus `ip
// link set NAME mtu M address A master BR up`, except that the device is
// not persistent: it goes away when the Device is closed. An empty name,
// or one with "%d", lets the kernel choose (Device.Name). The calling
// goroutine's network namespace is the device's: callers that switch
// namespaces must lock their OS thread (testenv.NetNS.Do does).
//
// It needs CAP_NET_ADMIN, except for a persistent TAP made for the caller
// (`ip tuntap add dev NAME mode tap user U`) that already has cfg's MTU,
// bridge and state; errors wrap the kernel's errno (EPERM without it,
// EBUSY if name exists with other flags, ENODEV for a missing bridge).
func Open(name string, cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	queues := max(c.Queues, 1)
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	d := &Device{kind: "tap"}
	for i := range queues {
		f, ifname, err := openTAP(name, flags)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("tap: open %q queue %d: %w", name, i, err)
		}
		name, d.name = ifname, ifname // later queues attach by the chosen name
		d.queues = append(d.queues, &Queue{f: f, kind: "tap"})
	}
	if err := d.configure(&c); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openTAP opens /dev/net/tun non-blocking and binds it with TUNSETIFF.
func openTAP(name string, flags uint16) (*os.File, string, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, "", err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("TUNSETIFF: %w", err)
	}
	// A non-blocking descriptor goes to the runtime poller, so Close
	// unblocks Read.
	return os.NewFile(uintptr(fd), "/dev/net/tun"), ifr.Name(), nil
}

// configure applies c to the interface through netlink and records its MTU.
func (d *Device) configure(c *Config) error {
	l, err := netlink.LinkByName(d.name)
	if err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	// Each setting the interface already has is left alone: changing a
	// link needs CAP_NET_ADMIN, and a persistent TAP made for the user
	// (`ip tuntap add ... user U`) and configured beforehand then opens
	// without it.
	a := l.Attrs()
	if c.MTU != 0 && c.MTU != a.MTU {
		if err := netlink.LinkSetMTU(l, c.MTU); err != nil {
			return fmt.Errorf("tap: %s: set MTU %d: %w", d.name, c.MTU, err)
		}
	}
	if c.MAC != nil && !bytes.Equal(c.MAC, a.HardwareAddr) {
		if err := netlink.LinkSetHardwareAddr(l, c.MAC); err != nil {
			return fmt.Errorf("tap: %s: set address %v: %w", d.name, c.MAC, err)
		}
	}
	if c.Bridge != "" {
		br, err := netlink.LinkByName(c.Bridge)
		if err != nil {
			return fmt.Errorf("tap: %s: bridge %q: %w", d.name, c.Bridge, errors.Join(err, unix.ENODEV))
		}
		if a.MasterIndex != br.Attrs().Index {
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return fmt.Errorf("tap: %s: set master %s: %w", d.name, c.Bridge, err)
			}
		}
	}
	if !c.NoUp && a.Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("tap: %s: set up: %w", d.name, err)
		}
	}
	if l, err = netlink.LinkByIndex(l.Attrs().Index); err != nil {
		return fmt.Errorf("tap: %s: %w", d.name, err)
	}
	d.mtu = l.Attrs().MTU
	for _, q := range d.queues {
		q.mtu = d.mtu
	}
	return nil
}

// OpenPacket opens an AF_PACKET socket (SOCK_RAW, ETH_P_ALL) bound to the
// existing interface iface, as a Device with one queue: frames written go
// out of iface, frames arriving on iface are read (its own transmissions
// are not, PACKET_IGNORE_OUTGOING). By default it brings iface up and
// puts it in promiscuous mode for the socket's lifetime (see
// Config.NoPromisc); MTU and MAC, if set, are applied to iface, Bridge
// attaches it. Queues is ignored. It needs CAP_NET_RAW (and CAP_NET_ADMIN
// to configure iface).
func OpenPacket(iface string, cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("tap: packet socket on %q: %w", iface, errors.Join(err, unix.ENODEV))
	}
	// Configure (and bring up) the interface first: binding to a down
	// interface leaves ENETDOWN pending on the socket (packet_do_bind).
	d := &Device{name: iface, kind: "packet"}
	if v, ok := l.(*netlink.Vlan); ok {
		d.vlan = uint16(v.VlanId)
	}
	c.Queues = 0
	if err := d.configure(&c); err != nil {
		return nil, err
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("tap: packet socket on %q: socket: %w", iface, err)
	}
	fail := func(what string, err error) (*Device, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("tap: packet socket on %q: %s: %w", iface, what, err)
	}
	index := l.Attrs().Index
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: index}); err != nil {
		return fail("bind", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	if !c.NoPromisc {
		mreq := &unix.PacketMreq{Ifindex: int32(index), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
			return fail("PACKET_ADD_MEMBERSHIP", err)
		}
	}
	// Clear an error left pending by a state change during setup, so the
	// first read does not fail with it.
	if _, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
		return fail("SO_ERROR", err)
	}
	f := os.NewFile(uintptr(fd), "packet:"+iface)
	d.queues = []*Queue{{f: f, kind: "packet", mtu: d.mtu}}
	return d, nil
}

// ReadReady reports whether a frame is waiting to be read on queue 0
// (emu/rxe.ReadReadier).
func (d *Device) ReadReady() bool { return d.queues[0].ReadReady() }

// ReadReady reports whether a frame is waiting to be read: poll(2) for
// POLLIN with no timeout, without reading it. emu/rxe asks it when a
// retransmission timeout fires, to let a response already received be
// processed before it resends (rxe.ReadReadier).
func (q *Queue) ReadReady() bool {
	rc, err := q.f.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return ready
}

// htons converts a 16-bit value to network byte order for the socket
// calls that want it so.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
