//go:build !linux

package udp

import (
	"errors"
	"net/netip"
)

// JoinGroup needs Linux.
func (l *Link) JoinGroup(g netip.Addr) error { return errors.ErrUnsupported }

// LeaveGroup needs Linux.
func (l *Link) LeaveGroup(g netip.Addr) error { return errors.ErrUnsupported }
