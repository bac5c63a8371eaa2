package tap

import (
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// WatchCarrier calls f with the interface's state whenever it changes: up
// is its administrative state (IFF_UP), carrier whether it has carrier
// (IFF_LOWER_UP), the two rxe's netdev notifier (rxe_notify) looks at: it
// calls rxe_port_up on NETDEV_UP and on a NETDEV_CHANGE that leaves the
// interface running with carrier, and rxe_port_down on NETDEV_DOWN and any
// other NETDEV_CHANGE. The first call reports the state at the start
// unless it is up with carrier. It subscribes to the link notifications
// (RTNLGRP_LINK) of the network namespace of the calling thread, which
// must be the interface's. f runs on the watcher's goroutine, one call at
// a time. stop ends the watch and waits for a running call of f to
// return.
func (d *Device) WatchCarrier(f func(up, carrier bool)) (stop func(), err error) {
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	// No ListExisting: the library sends that dump to the socket's own
	// multicast group, which the kernel refuses (EPERM) to a process
	// without CAP_NET_ADMIN (netlink_sendmsg's NL_CFG_F_NONROOT_SEND).
	// The state at the start is read after subscribing instead, so no
	// change falls between the two.
	if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("tap: watch carrier of %q: %w", d.name, err)
	}
	l, err := netlink.LinkByName(d.name)
	if err != nil {
		close(done)
		return nil, fmt.Errorf("tap: watch carrier of %q: %w", d.name, err)
	}
	index := l.Attrs().Index
	up := l.Attrs().RawFlags&unix.IFF_UP != 0
	carrier := l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if !up || !carrier {
			f(up, carrier)
		}
		for u := range ch {
			if int(u.IfInfomsg.Index) != index {
				continue
			}
			exists := u.Header.Type == unix.RTM_NEWLINK
			nowUp := exists && u.IfInfomsg.Flags&unix.IFF_UP != 0
			nowCarrier := exists && u.IfInfomsg.Flags&unix.IFF_LOWER_UP != 0
			if nowUp != up || nowCarrier != carrier {
				f(nowUp, nowCarrier)
			}
			up, carrier = nowUp, nowCarrier
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			// The subscription closes ch once its socket is closed;
			// drain until then.
			<-finished
		})
	}, nil
}
