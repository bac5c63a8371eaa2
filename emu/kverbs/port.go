package kverbs

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
)

// coreCap returns a valid port's core capability flags, 0 for another:
// what the kernel's inline port helpers read.
func coreCap(d *emu.Device, port uint32) emu.CoreCap {
	imm, err := d.PortImmutable(port)
	if err != nil {
		return 0
	}
	return imm.CoreCapFlags
}

// CapIBSwitch reports whether the device is a switch (rdma_cap_ib_switch).
func CapIBSwitch(d *emu.Device) bool { return d.Query().IsSwitch }

// ProtocolIB reports a native InfiniBand port (rdma_protocol_ib).
func ProtocolIB(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapProtIB != 0 }

// ProtocolRoCE reports a RoCE (v1 or v2) port (rdma_protocol_roce).
func ProtocolRoCE(d *emu.Device, port uint32) bool {
	return coreCap(d, port)&(emu.CoreCapProtRoCE|emu.CoreCapProtRoCEUDPEncap) != 0
}

// ProtocolRoCEUDPEncap reports a RoCEv2 port (rdma_protocol_roce_udp_encap).
func ProtocolRoCEUDPEncap(d *emu.Device, port uint32) bool {
	return coreCap(d, port)&emu.CoreCapProtRoCEUDPEncap != 0
}

// ProtocolIWARP reports an iWARP port (rdma_protocol_iwarp).
func ProtocolIWARP(d *emu.Device, port uint32) bool {
	return coreCap(d, port)&emu.CoreCapProtIWARP != 0
}

// CapIBMAD reports MAD support (rdma_cap_ib_mad).
func CapIBMAD(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapIBMAD != 0 }

// CapOPAMAD reports OPA MAD support (rdma_cap_opa_mad).
func CapOPAMAD(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapOPAMAD != 0 }

// CapIBSMI reports a QP0/SMI (rdma_cap_ib_smi).
func CapIBSMI(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapIBSMI != 0 }

// CapIBCM reports IB connection manager support (rdma_cap_ib_cm).
func CapIBCM(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapIBCM != 0 }

// CapIWCM reports iWARP connection manager support (rdma_cap_iw_cm).
func CapIWCM(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapIWCM != 0 }

// CapIBSA reports subnet administration support (rdma_cap_ib_sa).
func CapIBSA(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapIBSA != 0 }

// CapIBMcast reports IB multicast (SA-managed) support (rdma_cap_ib_mcast,
// the same as CapIBSA).
func CapIBMcast(d *emu.Device, port uint32) bool { return CapIBSA(d, port) }

// CapAFIB reports AF_IB addressing support (rdma_cap_af_ib).
func CapAFIB(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapAFIB != 0 }

// CapEthAH reports Ethernet address handles (rdma_cap_eth_ah).
func CapEthAH(d *emu.Device, port uint32) bool { return coreCap(d, port)&emu.CoreCapEthAH != 0 }

// CapOPAAH reports OPA address handles (rdma_cap_opa_ah: every OPA_AH bit).
func CapOPAAH(d *emu.Device, port uint32) bool {
	return coreCap(d, port)&emu.CoreCapOPAAH == emu.CoreCapOPAAH
}

// emu.CoreCapOPAPort reports an Intel OPA port (rdma_core_cap_opa_port: every
// RDMA_CORE_PORT_INTEL_OPA bit).
func CoreCapOPAPort(d *emu.Device, port uint32) bool {
	return coreCap(d, port)&emu.CorePortIntelOPA == emu.CorePortIntelOPA
}

// CapReadInv reports READ with invalidate support (rdma_cap_read_inv:
// iWARP only).
func CapReadInv(d *emu.Device, port uint32) bool { return ProtocolIWARP(d, port) }

// CapRoCEGIDTable reports a RoCE port whose driver programs GIDs into
// hardware (rdma_cap_roce_gid_table: RoCE and add_gid and del_gid). False
// for rxe, which has neither op.
func CapRoCEGIDTable(d *emu.Device, port uint32) bool {
	_, ok := driver.Ops(d).(emu.GIDAdder)
	return ProtocolRoCE(d, port) && ok
}

// MaxMADSize returns the largest MAD the port handles
// (rdma_max_mad_size): 2048 for OPA MADs, 256 otherwise, 0 without MADs.
func MaxMADSize(d *emu.Device, port uint32) int {
	imm, err := d.PortImmutable(port)
	if err != nil {
		return 0
	}
	return imm.MaxMADSize
}

// AHFindType returns the address handle type for port
// (rdma_ah_find_type): RoCE on a RoCE port, OPA on an OPA port with OPA
// AHs, IB otherwise.
func AHFindType(d *emu.Device, port uint32) ib.AHAttrType {
	switch {
	case ProtocolRoCE(d, port):
		return ib.AHAttrTypeRoCE
	case ProtocolIB(d, port) && CapOPAAH(d, port):
		return ib.AHAttrTypeOPA
	}
	return ib.AHAttrTypeIB
}

// MTUEnumToInt converts an MTU code to bytes for port
// (rdma_mtu_enum_to_int): OPA ports also know 8192 and 10240; -1 for an
// unknown code.
func MTUEnumToInt(d *emu.Device, port uint32, mtu ib.MTU) int {
	if CoreCapOPAPort(d, port) {
		switch mtu {
		case ib.OPAMTU8192:
			return 8192
		case ib.OPAMTU10240:
			return 10240
		}
	}
	return mtu.Bytes()
}

// MTUFromAttr returns the port's MTU in bytes (rdma_mtu_from_attr): the
// physical MTU on OPA, else the byte value of MaxMTU.
func MTUFromAttr(d *emu.Device, port uint32, a *emu.PortAttr) int {
	if CoreCapOPAPort(d, port) {
		return a.PhysMTU
	}
	return a.MaxMTU.Bytes()
}
