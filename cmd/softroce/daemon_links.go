package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

// daemonLinks creates and deletes a serving daemon's devices while it
// runs (uverbsd.Config.Links): each new device is a node on the daemon's
// in-memory fabric, which the first device's link joins when the first
// device is added (its default pipe's far end connected to a link.Hub).
// A daemon on a TAP, an interface or UDP adds none (EOPNOTSUPP).
type daemonLinks struct {
	e  *env
	lf *linkFlags // the first device's flags, which a new device's derive from

	mu sync.Mutex
	d  *daemon // set once the daemon runs
}

var _ uverbsd.Links = (*daemonLinks)(nil)

// NewLink implements uverbsd.Links: `rdma link add NAME type rxe netdev
// DEV`, DEV naming the device's port on the fabric.
func (l *daemonLinks) NewLink(name, netdev string) error { return l.add(name, netdev, nil) }

// DelLink implements uverbsd.Links: `rdma link delete NAME`, with the
// grace serve gives the programs at a removal (10 s).
func (l *daemonLinks) DelLink(name string) error { return l.remove(name, 10*time.Second) }

// add creates device name on the fabric, with the addresses ips, and
// serves it.
func (l *daemonLinks) add(name, netdev string, ips []netip.Prefix) error {
	if err := uverbsd.ValidName(name); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	if d == nil {
		return fmt.Errorf("%s: the daemon is not serving yet: %w", name, unix.EAGAIN)
	}
	if slices.Contains(d.srv.Devices(), name) {
		return fmt.Errorf("%s: served already: %w", name, unix.EEXIST)
	}
	if d.fabric == nil {
		peer := d.n.Peer()
		if peer == nil {
			return fmt.Errorf("%s: %s is on a link of its own (TAP, interface or UDP); devices are added to the in-memory fabric: %w",
				name, d.n.Name(), unix.EOPNOTSUPP)
		}
		h := link.NewHub(&link.PipeConfig{MTU: peer.MTU(), QueueLen: 1024})
		if err := h.Connect(peer); err != nil {
			return err
		}
		d.fabric = h
	}
	lf := *l.lf
	lf.dev, lf.ips, lf.mac, lf.netdev = name, ips, "", netdev
	lf.recorder, lf.deviceLink, lf.deviceLinkPasses = nil, nil, nil
	lf.seed = seedFor(l.lf.seed, name)
	lf.fabric, lf.mtu = d.fabric, 0
	n, err := l.e.openNode(&lf)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := d.srv.AddDevice(n.Device(), &uverbsd.DeviceConfig{Groups: n, Settle: n.Settle}); err != nil {
		n.Close()
		return err
	}
	d.extra = append(d.extra, n)
	return nil
}

// remove removes device name as RemoveDevice does (its programs get up to
// grace to close it), then deletes it.
func (l *daemonLinks) remove(name string, grace time.Duration) error {
	l.mu.Lock()
	d := l.d
	l.mu.Unlock()
	if d == nil {
		return fmt.Errorf("%s: not served: %w", name, unix.ENODEV)
	}
	if _, err := d.srv.RemoveDevice(name, grace, nil); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	d.extra = slices.DeleteFunc(d.extra, func(n *node.Node) bool {
		if n.Name() != name {
			return false
		}
		err = errors.Join(err, n.Close())
		return true
	})
	return err
}
