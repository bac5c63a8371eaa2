package node

import "github.com/softroce/softroce/emu/rxe"

// SetDeviceLink changes the link state the rxe device sees (its netdev up
// or down), as `ip link set DEV down|up` does under the kernel's rxe: the
// device raises IB_EVENT_PORT_ERR or IB_EVENT_PORT_ACTIVE. The host and
// the link itself are unchanged.
func (n *Node) SetDeviceLink(up bool) {
	n.mu.Lock()
	dev := n.dev
	n.mu.Unlock()
	if dev != nil {
		dev.SetLink(up)
	}
}

// RxeDevice returns the node's rxe device (nil before it exists): what
// only the emulated driver offers beyond the verbs (Responder, QP by
// number, SetLink).
func (n *Node) RxeDevice() *rxe.Device {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dev
}
