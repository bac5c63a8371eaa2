//go:build !linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
)

// Link is the UDP link; it exists only on Linux.
type Link struct{}

// Open fails with an error wrapping errors.ErrUnsupported: the link needs
// Linux's recvmmsg, sendmmsg and packet-info control messages.
func Open(cfg *Config) (*Link, error) {
	return nil, fmt.Errorf("udp: %w on this system", errors.ErrUnsupported)
}

// ReadPackets implements link.Link.
func (l *Link) ReadPackets(bufs [][]byte, sizes []int) (int, error) { return 0, errors.ErrUnsupported }

// WritePackets implements link.Link.
func (l *Link) WritePackets(bufs [][]byte) (int, error) { return 0, errors.ErrUnsupported }

// BatchSize implements link.Link.
func (l *Link) BatchSize() int { return 1 }

// MTU implements link.Link.
func (l *Link) MTU() int { return DefaultMTU }

// Addrs returns the addresses the link is bound to.
func (l *Link) Addrs() []netip.Addr { return nil }

// Stats returns the link's counters.
func (l *Link) Stats() Stats { return Stats{} }

// Close implements link.Link.
func (l *Link) Close() error { return nil }
