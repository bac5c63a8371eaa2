package uverbsd

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
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

// pmaCounter is one file of the kernel's sysfs "counters" group
// (drivers/infiniband/core/sysfs.c, pma_attrs_ext: the group of a device
// whose PMA ClassPortInfo reports extended-width counters, as rxe's from
// Linux 7.2): the attribute its value is read from, and the value's bit
// offset and width in the attribute's data.
type pmaCounter struct {
	name          string
	attr          mad.AttrID
	offset, width int
}

var pmaCounterFiles = []pmaCounter{
	{"symbol_error", mad.AttrPortCounters, 32, 16},
	{"link_error_recovery", mad.AttrPortCounters, 48, 8},
	{"link_downed", mad.AttrPortCounters, 56, 8},
	{"port_rcv_errors", mad.AttrPortCounters, 64, 16},
	{"port_rcv_remote_physical_errors", mad.AttrPortCounters, 80, 16},
	{"port_rcv_switch_relay_errors", mad.AttrPortCounters, 96, 16},
	{"port_xmit_discards", mad.AttrPortCounters, 112, 16},
	{"port_xmit_constraint_errors", mad.AttrPortCounters, 128, 8},
	{"port_rcv_constraint_errors", mad.AttrPortCounters, 136, 8},
	{"local_link_integrity_errors", mad.AttrPortCounters, 152, 4},
	{"excessive_buffer_overrun_errors", mad.AttrPortCounters, 156, 4},
	{"VL15_dropped", mad.AttrPortCounters, 176, 16},
	{"port_xmit_data", mad.AttrPortCountersExtended, 64, 64},
	{"port_rcv_data", mad.AttrPortCountersExtended, 128, 64},
	{"port_xmit_packets", mad.AttrPortCountersExtended, 192, 64},
	{"port_xmit_wait", mad.AttrPortCounters, 320, 32},
	{"port_rcv_packets", mad.AttrPortCountersExtended, 256, 64},
	{"unicast_rcv_packets", mad.AttrPortCountersExtended, 384, 64},
	{"unicast_xmit_packets", mad.AttrPortCountersExtended, 320, 64},
	{"multicast_rcv_packets", mad.AttrPortCountersExtended, 512, 64},
	{"multicast_xmit_packets", mad.AttrPortCountersExtended, 448, 64},
}

// pmaValue is show_pma_counter: the counter c read from the answer of
// the device's process_mad to a Get of its attribute on port 1; false
// where the device does not answer (rxe before Linux 7.2: no counters
// group).
func pmaValue(c pmaCounter, dev *emu.Device) (uint64, bool) {
	req := make(mad.MAD, mad.Size)
	req.EncodeHeader(&mad.HeaderFields{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassPerfMgmt, ClassVersion: 1,
		Method: mad.MethodGet, AttributeID: c.attr})
	req[mad.HeaderSize+41] = 1 // PortSelect
	r, ok := dev.ProcessMAD(1, req)
	if !ok || r[3] != mad.MethodGetResp {
		return 0, false
	}
	d := r[mad.HeaderSize+40+c.offset/8:]
	switch c.width {
	case 4:
		return uint64(d[0]>>(4-c.offset%8)) & 0xf, true
	case 8:
		return uint64(d[0]), true
	case 16:
		return uint64(binary.BigEndian.Uint16(d)), true
	case 32:
		return uint64(binary.BigEndian.Uint32(d)), true
	}
	return binary.BigEndian.Uint64(d), true
}

// refreshPMACounters writes ports/1/counters/NAME as the kernel's sysfs
// shows a device's PMA counters, rewriting only the files whose value
// changed.
func (s *sysfs) refreshPMACounters() error {
	vals := make([]uint64, len(pmaCounterFiles))
	has := make([]bool, len(pmaCounterFiles))
	for i, pc := range pmaCounterFiles {
		vals[i], has[i] = pmaValue(pc, s.dev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	dir := filepath.Join(s.ibdevDir(), "ports", "1", "counters")
	for i, pc := range pmaCounterFiles {
		if !has[i] {
			continue
		}
		if err := s.writeGIDFile(filepath.Join(dir, pc.name), fmt.Sprintf("%d\n", vals[i])); err != nil {
			return fmt.Errorf("sysfs: %w", err)
		}
	}
	return nil
}
