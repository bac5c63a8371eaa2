// Package clock injects time. The emulator never calls time.Now or
// time.AfterFunc directly: it takes a Clock, so tests drive retry and RNR
// timers with a manual clock and every edge case replays exactly.
package clock

import "time"

// Clock tells the time and schedules callbacks.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (Real) or from Advance
	// (Manual) once d has elapsed, and returns a Timer that can stop it.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not run yet and reports whether it
	// did so.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
