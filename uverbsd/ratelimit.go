package uverbsd

import (
	"sync"
	"time"
)

// The daemon's warnings about its clients are rate-limited as the
// kernel's pr_warn_ratelimited: at most warnBurst in each warnInterval,
// and the first one allowed after a suppression says how many were
// suppressed (___ratelimit's "%s: %d callbacks suppressed").
const (
	warnBurst    = 10
	warnInterval = 5 * time.Second
)

// ratelimit is the kernel's struct ratelimit_state: at most burst events
// pass in each interval, which begins with the first event after the
// previous one ended.
type ratelimit struct {
	mu       sync.Mutex
	interval time.Duration
	burst    int
	now      func() time.Time // nil: time.Now

	begin           time.Time
	printed, missed int
}

// allow reports whether an event passes (___ratelimit), and how many were
// suppressed in the interval that ended before it (to be said first).
func (r *ratelimit) allow() (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	t := now()
	if r.begin.IsZero() {
		r.begin = t
	}
	if t.Sub(r.begin) >= r.interval {
		suppressed = r.missed
		r.begin, r.printed, r.missed = t, 0, 0
	}
	if r.printed < r.burst {
		r.printed++
		return true, suppressed
	}
	r.missed++
	return false, suppressed
}
