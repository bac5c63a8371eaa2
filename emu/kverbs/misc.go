package kverbs

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
)

// NUMANoNode is NUMA_NO_NODE.
const NUMANoNode = -1

// IBDevToNode returns the NUMA node of the device's parent device
// (ibdev_to_node). A software device has no parent bus device, so it is
// NUMANoNode.
func IBDevToNode(d *emu.Device) int { return NUMANoNode }

// UpdateFastRegKey replaces the low byte of the MR's lkey and rkey with
// newKey (ib_update_fast_reg_key), before posting a REG_MR with the new key.
func UpdateFastRegKey(mr *emu.MR, newKey uint8) {
	driver.SetKeys(mr, mr.LKey()&0xFFFFFF00|uint32(newKey), mr.RKey()&0xFFFFFF00|uint32(newKey))
}

// IncRKey returns rkey with its low byte incremented, wrapping 0xFF to 0
// without carry (ib_inc_rkey).
func IncRKey(rkey uint32) uint32 { return rkey&0xFFFFFF00 | (rkey+1)&0xFF }
