package uverbsd

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
)

// served is one device of the Server: its uverbs node and entries in the
// sysfs tree, and its CM (nil: rdma_cm not served).
type served struct {
	dev *emu.Device
	sys *sysfs
	cm  *cma.CM
	// settle is the device's Config.Settle (DeviceConfig.Settle).
	settle func(cmd func())
	// removing: RemoveDevice has begun; the node opens no more (Server.mu).
	removing bool
}

// served returns the devices served, Config.Device first.
func (s *Server) served() []*served {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*served(nil), s.devs...)
}

// Devices returns the names of the devices served, in the order of their
// uverbs nodes' numbers.
func (s *Server) Devices() []string {
	var names []string
	for _, d := range s.served() {
		names = append(names, d.dev.Name())
	}
	return names
}

// openable returns the device whose node is name, or the errno of an open
// of it: ENODEV for a node no device has (a name the daemon never served),
// ENXIO for one being removed (ib_uverbs_remove_one's cdev_device_del).
func (s *Server) openable(name string) (*served, unix.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devs {
		if d.sys.node == name {
			if d.removing {
				return nil, unix.ENXIO
			}
			return d, 0
		}
	}
	return nil, unix.ENODEV
}

// openableMAD is openable for a MAD device node (umadN).
func (s *Server) openableMAD(name string) (*served, unix.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devs {
		if d.sys.umadNode() == name {
			if d.removing {
				return nil, unix.ENXIO
			}
			return d, 0
		}
	}
	return nil, unix.ENODEV
}

// watchEvents refreshes the sysfs tree on dev's GID and port events.
func (s *Server) watchEvents(dev *emu.Device) {
	dev.RegisterEventHandler(func(ev emu.Event) {
		var ch chan struct{}
		switch ev.Type {
		case emu.EventGIDChange:
			ch = s.gids
		case emu.EventPortActive, emu.EventPortErr:
			ch = s.ports
		default:
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	})
}

// removeTree removes the whole sysfs tree: no device is listed.
func (s *Server) removeTree() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeTreeLocked()
}

func (s *Server) removeTreeLocked() error {
	err := s.sys.remove()
	for _, d := range s.devs[1:] {
		d.sys.markGone()
	}
	return err
}

// Links creates and deletes a Server's devices (Config.Links).
type Links interface {
	// NewLink creates the rxe device name on the netdev netdev and
	// serves it (`rdma link add NAME type rxe netdev DEV`): EEXIST for a
	// name served, EINVAL for a name the rxe provider does not serve.
	NewLink(name, netdev string) error
	// DelLink removes the device name and deletes it (`rdma link delete
	// NAME`): ENODEV for a name not served, EINVAL for the Server's
	// first device.
	DelLink(name string) error
}

// Links returns Config.Links (nil: devices are not created on request).
func (s *Server) Links() Links { return s.cfg.Links }

// DeviceConfig configures AddDevice.
type DeviceConfig struct {
	// Groups, if set, is the host's IP multicast membership on the
	// device's link (Config.Groups).
	Groups cma.GroupMembership
	// Settle, if set, is the device's Config.Settle: its commands return
	// once the device has done their work.
	Settle func(cmd func())
}

// settle is the Settle of the connection's device (the first device's
// for a connection that opened none).
func (cn *conn) settle() func(cmd func()) {
	if cn.dev != nil {
		return cn.dev.settle
	}
	return cn.s.cfg.Settle
}

// AddDevice serves dev beside the Server's other devices, as the kernel's
// ib_register_device registers an rxe device (`rdma link add NAME type
// rxe netdev DEV`): it takes the lowest free uverbsN, its entries appear
// in the sysfs tree (its node last, once it can be opened), and the
// rdma_cm routes its addresses to it. The Server does not own dev: the
// caller closes it after RemoveDevice or after the Server. A name already
// served is EEXIST; a closed Server ENODEV.
func (s *Server) AddDevice(dev *emu.Device, cfg *DeviceConfig) error {
	if dev == nil {
		return fmt.Errorf("uverbsd: AddDevice: no device: %w", unix.EINVAL)
	}
	if cfg == nil {
		cfg = &DeviceConfig{}
	}
	s.mu.Lock()
	if s.closed || s.removing {
		s.mu.Unlock()
		return fmt.Errorf("uverbsd: AddDevice %s: the server is closed: %w", dev.Name(), unix.ENODEV)
	}
	used := map[int]bool{}
	for _, d := range s.devs {
		if d.dev.Name() == dev.Name() {
			s.mu.Unlock()
			return fmt.Errorf("uverbsd: AddDevice %s: a device of that name is served: %w", dev.Name(), unix.EEXIST)
		}
		used[d.sys.num] = true
	}
	num := 0
	for used[num] {
		num++
	}
	d := &served{dev: dev, settle: cfg.Settle, sys: &sysfs{root: s.sys.currentRoot(), dev: dev, node: "uverbs" + strconv.Itoa(num), num: num}}
	// Reserved, not yet openable: a concurrent AddDevice takes
	// another number, an open of the node waits for its entries.
	d.removing = true
	s.devs = append(s.devs, d)
	s.mu.Unlock()
	fail := func(err error) error {
		d.sys.removeDevice()
		s.mu.Lock()
		s.dropLocked(d)
		s.mu.Unlock()
		return fmt.Errorf("uverbsd: AddDevice %s: %w", dev.Name(), err)
	}
	if s.ucma != nil {
		cm, err := cma.New(cma.Config{Dev: dev, Seed: dev.Query().NodeGUID, Groups: cfg.Groups})
		if err != nil {
			return fail(err)
		}
		d.cm = cm
	}
	// Written under the Server's lock: Publish does not move the tree
	// meanwhile.
	s.mu.Lock()
	root := s.sys.currentRoot()
	d.sys.mu.Lock()
	d.sys.root = root
	d.sys.mu.Unlock()
	err := d.sys.write()
	if err == nil {
		// The counters exist from the start, as the kernel's
		// hw_counters group from ib_register_device.
		err = errors.Join(d.sys.refreshCMCounters(cma.CMCounters{}), d.sys.refreshHWCounters())
	}
	if err == nil {
		d.removing = false
	}
	s.mu.Unlock()
	if err != nil {
		if d.cm != nil {
			d.cm.Close()
		}
		return fail(err)
	}
	s.watchEvents(dev)
	if d.cm != nil {
		s.ucma.AddCM(d.cm)
	}
	return nil
}

// dropLocked takes d out of the served devices (s.mu held).
func (s *Server) dropLocked(d *served) {
	for i, e := range s.devs {
		if e == d {
			s.devs = append(s.devs[:i], s.devs[i+1:]...)
			return
		}
	}
}

// RemoveDevice removes the device name that AddDevice added, as Remove
// removes the Server's devices (ib_unregister_device): its node and
// entries leave the sysfs tree and it opens no more (ENXIO), its rdma_cm
// IDs get RDMA_CM_EVENT_DEVICE_REMOVAL, and the programs that have it
// open get up to grace (or until now is closed) to close it; then each
// file still open of it gets IB_EVENT_DEVICE_FATAL and EIO for every later
// call. The Server's other devices go on. It returns whether the programs
// had closed the device in time. Config.Device is not removed this way
// (EINVAL: Remove ends the Server); a name not served is ENODEV.
func (s *Server) RemoveDevice(name string, grace time.Duration, now <-chan struct{}) (inTime bool, err error) {
	s.mu.Lock()
	var d *served
	for i, e := range s.devs {
		if e.dev.Name() == name {
			if i == 0 {
				s.mu.Unlock()
				return true, fmt.Errorf("uverbsd: RemoveDevice %s: the server's first device goes with the server (Remove): %w", name, unix.EINVAL)
			}
			d = e
		}
	}
	if d == nil || d.removing {
		s.mu.Unlock()
		return true, fmt.Errorf("uverbsd: RemoveDevice %s: not served: %w", name, unix.ENODEV)
	}
	d.removing = true
	s.mu.Unlock()
	err = d.sys.removeDevice()
	if d.cm != nil {
		s.ucma.RemoveCM(d.cm)
		if n := d.cm.RemoveDevice(); n > 0 {
			s.logf("device removal of %s: %d rdma_cm IDs told", name, n)
		}
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	inTime = true
wait:
	for len(s.filesOf(d)) > 0 {
		select {
		case <-tick.C:
		case <-timer.C:
			inTime = false
			break wait
		case <-now:
			inTime = false
			break wait
		}
	}
	if !inTime {
		for _, f := range s.filesOf(d) {
			if da, ok := f.(Disassociater); ok {
				if derr := da.Disassociate(); derr != nil {
					s.logf("disassociate: %v", derr)
				}
			}
		}
	}
	if d.cm != nil {
		err = errors.Join(err, d.cm.Close())
	}
	s.mu.Lock()
	s.dropLocked(d)
	s.mu.Unlock()
	return inTime, err
}

// filesOf returns the open Files of d.
func (s *Server) filesOf(d *served) []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fs []File
	for cn, f := range s.files {
		if cn.dev == d {
			fs = append(fs, f)
		}
	}
	return fs
}

// currentRoot is where the tree is now (its temporary or final name).
func (s *sysfs) currentRoot() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.root
}
