package cma

import "sort"

// RemoveDevice is the rdma_cm's part of the device's removal
// (cma_process_remove): each ID attached to the device (bound to one of
// its addresses, resolved through it, or a connection it carries) that is
// not already being destroyed or removed goes to DEVICE_REMOVAL and gets
// one RDMA_CM_EVENT_DEVICE_REMOVAL (cma_send_device_removal_put); a
// handler that returns an error has its ID destroyed, as the kernel's
// does. Then what the ID had in flight is cancelled (an address query;
// a connection stays until the consumer destroys the ID). IDs without a
// device (IDLE, bound or listening on a wildcard) get nothing: the
// kernel's wildcard listeners lose only their per-device listens, which
// the consumer never sees (a later request finds no listener: a REJ, as
// for a service nobody listens on). Later calls meet the DEVICE_REMOVAL state
// (EINVAL where a state is required). It returns how many IDs got the
// event; calling it again sends no more.
func (c *CM) RemoveDevice() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	c.removed = true
	ids := make([]*ID, 0, len(c.ids))
	for id := range c.ids {
		if id.hasDev {
			ids = append(ids, id)
		}
	}
	// The kernel walks the device's IDs in the order they attached;
	// creation order is the nearest the CM keeps.
	sort.Slice(ids, func(i, j int) bool { return ids[i].serial < ids[j].serial })
	n := 0
	for _, id := range ids {
		if id.destroyed || id.state == StateDestroying || id.state == StateDeviceRemoval {
			continue
		}
		old := id.state
		id.state = StateDeviceRemoval
		n++
		if err := id.event(Event{Type: EventDeviceRemoval}); err != nil {
			id.destroyLocked()
			continue
		}
		// cma_cancel_operation of the state the ID left.
		if old == StateAddrQuery && id.resolving != nil {
			id.resolving()
			id.resolving = nil
		}
	}
	return n
}

// Removed reports whether RemoveDevice has run.
func (c *CM) Removed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed
}
