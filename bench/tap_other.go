//go:build !linux

package bench

import "context"

// runTAP reports the TAP rows as skipped: TAP devices need Linux.
func runTAP(ctx context.Context, o *Options) ([]Row, error) { return tapRows("needs Linux"), nil }
