package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
)

// TestDeviceOps checks which optional ib_device_ops rxe has: the core
// answers EOPNOTSUPP exactly for the missing ones.
func TestDeviceOps(t *testing.T) {
	var ops any = newEnv(t).r
	for _, c := range []struct {
		name string
		has  bool
		want bool
	}{
		{"modify_srq", implements[emu.SRQModifier](ops), true},
		{"modify_ah", implements[emu.AHModifier](ops), true},
		{"attach_mcast", implements[emu.McastAttacher](ops), true},
		{"get_hw_stats", implements[emu.HWStatsProvider](ops), true},
		{"modify_cq", implements[emu.CQModerator](ops), false},
		{"check_mr_status", implements[emu.MRStatusChecker](ops), false},
		{"alloc_xrcd", implements[emu.XRCDAllocator](ops), false},
		{"add_gid", implements[emu.GIDAdder](ops), false},
		{"rdma_netdev_get_params", implements[emu.RDMANetdevAllocator](ops), false},
	} {
		if c.has != c.want {
			t.Errorf("%s: implemented %v, want %v", c.name, c.has, c.want)
		}
	}
}

func implements[T any](v any) bool { _, ok := v.(T); return ok }
