//go:build !linux

package bench

import "context"

// runUDP reports the UDP rows as skipped: the UDP link needs Linux.
func runUDP(ctx context.Context, o *Options) ([]Row, error) { return udpRows("needs Linux"), nil }
