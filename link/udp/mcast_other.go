//go:build !linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
)

// JoinGroup needs Linux.
func (l *Link) JoinGroup(g netip.Addr) error {
	return fmt.Errorf("udp: join %v: %w", g, errors.ErrUnsupported)
}

// LeaveGroup needs Linux.
func (l *Link) LeaveGroup(g netip.Addr) error {
	return fmt.Errorf("udp: leave %v: %w", g, errors.ErrUnsupported)
}
