package uverbsd

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/softroce/softroce/cma"
)

// The IB CM's per-port counters (drivers/infiniband/core/cm.c,
// cm_counter_groups and cm_counter_attr): a directory per group, in
// package cma's group order, and a file per message, in attribute order.
var (
	cmCounterGroups = [...]string{"cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs", "cm_rx_duplicates"}
	cmCounterNames  = [cma.NumCMAttrs]string{"req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep", "lap", "apr"}
)

// CounterRefresh is how often the daemon rewrites the counter files (the
// CM's and the device's): a reader sees counts at most that old (the
// kernel's are read at once, or from a cache younger than lifespan).
const CounterRefresh = time.Second

// refreshCMCounters writes ports/1/cm_*/MSG from c, as cm_show_counter
// prints them, rewriting only the files whose count changed.
func (s *sysfs) refreshCMCounters(c cma.CMCounters) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	pd := filepath.Join(s.ibdevDir(), "ports", "1")
	for g, dir := range cmCounterGroups {
		for i, name := range cmCounterNames {
			if err := s.writeGIDFile(filepath.Join(pd, dir, name), fmt.Sprintf("%d\n", c[g][i])); err != nil {
				return fmt.Errorf("sysfs: %w", err)
			}
		}
	}
	return nil
}

// refreshHWCounters writes ports/1/hw_counters/NAME from the driver's
// counters (rdma_hw_stats' sysfs group: one file a counter and lifespan,
// the milliseconds a read is served from the cache), rewriting only the
// files whose value changed. A device without counters has none.
func (s *sysfs) refreshHWCounters() error {
	hs, err := s.dev.AllocHWPortStats(1)
	if err != nil {
		return nil
	}
	s.dev.GetHWStats(hs, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	dir := filepath.Join(s.ibdevDir(), "ports", "1", "hw_counters")
	for i, d := range hs.Descs {
		if err := s.writeGIDFile(filepath.Join(dir, d.Name), fmt.Sprintf("%d\n", hs.Value[i])); err != nil {
			return fmt.Errorf("sysfs: %w", err)
		}
	}
	if err := s.writeGIDFile(filepath.Join(dir, "lifespan"), fmt.Sprintf("%d\n", hs.Lifespan.Milliseconds())); err != nil {
		return fmt.Errorf("sysfs: %w", err)
	}
	return nil
}
