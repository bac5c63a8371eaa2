package emu

import (
	"time"

	"golang.org/x/sys/unix"
)

// StatFlagOptional is IB_STAT_FLAG_OPTIONAL: a counter that may be
// disabled.
const StatFlagOptional = 1

// StatDesc is struct rdma_stat_desc: a counter's name and flags.
type StatDesc struct {
	Name  string // counter name, the file under hw_counters (name)
	Flags uint32 // IB_STAT_FLAG_* (flags)
}

// DefaultStatsLifespan is RDMA_HW_STATS_DEFAULT_LIFESPAN: counters read
// within 10 ms of the last read come from the cache.
const DefaultStatsLifespan = 10 * time.Millisecond

// HWStats is struct rdma_hw_stats: a port's counter descriptors, values,
// disabled bitmap and cache timestamp.
type HWStats struct {
	Descs     []StatDesc    // one descriptor per counter (descs)
	Value     []uint64      // counter values, indexed like Descs (value)
	Disabled  []bool        // counters disabled, indexed like Descs (is_disabled)
	Timestamp time.Time     // when Value was last refreshed (timestamp)
	Lifespan  time.Duration // how long Value is served from the cache (lifespan)
}

// AllocHWPortStats returns a port's counters (alloc_hw_port_stats); a
// driver without counters gives EOPNOTSUPP.
func (d *Device) AllocHWPortStats(port uint32) (*HWStats, error) {
	p, ok := d.ops.(HWStatsProvider)
	if !ok {
		return nil, errorf(unix.EOPNOTSUPP, "hw stats: driver has no counters")
	}
	if !d.IsPortValid(port) {
		return nil, errorf(unix.EINVAL, "hw stats: port %d does not exist", port)
	}
	descs := p.StatDescs(port)
	return &HWStats{Descs: descs, Value: make([]uint64, len(descs)), Disabled: make([]bool, len(descs)),
		Lifespan: DefaultStatsLifespan}, nil
}

// GetHWStats refreshes s from the driver unless the cached values are
// younger than s.Lifespan (the sysfs hw_counters read path), and returns
// the number of counters.
func (d *Device) GetHWStats(s *HWStats, port uint32) int {
	now := d.clock.Now()
	if !s.Timestamp.IsZero() && now.Sub(s.Timestamp) < s.Lifespan {
		return len(s.Value)
	}
	p := d.ops.(HWStatsProvider)
	n := p.HWStats(port, s.Value)
	s.Timestamp = now
	return n
}

// Counter returns the value of the counter called name, false if none.
func (s *HWStats) Counter(name string) (uint64, bool) {
	for i, d := range s.Descs {
		if d.Name == name {
			return s.Value[i], true
		}
	}
	return 0, false
}
