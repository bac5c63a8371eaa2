package node

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// watchAddrs fills u with the host's addresses and follows their changes
// (RTM_NEWADDR, RTM_DELADDR), calling changed after each change, until
// the returned stop is called.
func watchAddrs(u *udpNode, changed func()) (stop func(), err error) {
	ch := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	if err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{}); err != nil {
		return nil, err
	}
	as, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		close(done)
		return nil, err
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			u.update(ip, true)
		}
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for up := range ch {
			ip, ok := netip.AddrFromSlice(up.LinkAddress.IP)
			if ok && u.update(ip, up.NewAddr) {
				changed()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}, nil
}

// routeTo fails with ENETUNREACH when the host has no route to ip.
func routeTo(ip netip.Addr) error {
	if _, err := netlink.RouteGet(net.IP(ip.AsSlice())); err != nil {
		return fmt.Errorf("no route to %v: %w", ip, unix.ENETUNREACH)
	}
	return nil
}
