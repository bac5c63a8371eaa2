//go:build !linux

package bench

import "context"

// runDaemon reports the daemon rows as skipped: the daemon needs Linux.
func runDaemon(ctx context.Context, o *Options) ([]Row, error) { return daemonRows("needs Linux"), nil }
