package tap

import (
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// WatchCarrier calls f with the interface's link state whenever it
// changes: up when the interface is up and has carrier (IFF_UP and
// IFF_LOWER_UP), down otherwise, as rxe's netdev notifier (rxe_notify)
// calls rxe_port_up on NETDEV_UP and on a NETDEV_CHANGE that leaves the
// interface running with carrier, and rxe_port_down on NETDEV_DOWN and
// any other NETDEV_CHANGE. The first call reports the state at the start
// if it is down. It subscribes to the link notifications (RTNLGRP_LINK)
// of the network namespace of the calling thread, which must be the
// interface's. f runs on the watcher's goroutine, one call at a time.
// stop ends the watch and waits for a running call of f to return.
func (d *Device) WatchCarrier(f func(up bool)) (stop func(), err error) {
	l, err := netlink.LinkByName(d.name)
	if err != nil {
		return nil, fmt.Errorf("tap: watch carrier of %q: %w", d.name, err)
	}
	index := l.Attrs().Index
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{ListExisting: true}); err != nil {
		return nil, fmt.Errorf("tap: watch carrier of %q: %w", d.name, err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		up, known := true, false
		for u := range ch {
			if int(u.IfInfomsg.Index) != index {
				continue
			}
			now := u.Header.Type == unix.RTM_NEWLINK &&
				u.IfInfomsg.Flags&unix.IFF_UP != 0 && u.IfInfomsg.Flags&unix.IFF_LOWER_UP != 0
			if now != up || !known && !now {
				f(now)
			}
			up, known = now, true
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
