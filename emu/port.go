package emu

import (
	"net/netip"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// CoreCap is the RDMA_CORE_CAP_* / RDMA_CORE_PORT_* bit set of a port's
// immutable core_cap_flags.
type CoreCap uint32

// Core capability bits (include/rdma/ib_verbs.h).
const (
	CoreCapIBMAD            CoreCap = 0x00000001 // RDMA_CORE_CAP_IB_MAD
	CoreCapIBSMI            CoreCap = 0x00000002 // RDMA_CORE_CAP_IB_SMI
	CoreCapIBCM             CoreCap = 0x00000004 // RDMA_CORE_CAP_IB_CM
	CoreCapIWCM             CoreCap = 0x00000008 // RDMA_CORE_CAP_IW_CM
	CoreCapIBSA             CoreCap = 0x00000010 // RDMA_CORE_CAP_IB_SA
	CoreCapOPAMAD           CoreCap = 0x00000020 // RDMA_CORE_CAP_OPA_MAD
	CoreCapAFIB             CoreCap = 0x00001000 // RDMA_CORE_CAP_AF_IB
	CoreCapEthAH            CoreCap = 0x00002000 // RDMA_CORE_CAP_ETH_AH
	CoreCapOPAAH            CoreCap = 0x00004000 // RDMA_CORE_CAP_OPA_AH
	CoreCapIBGRHRequired    CoreCap = 0x00008000 // RDMA_CORE_CAP_IB_GRH_REQUIRED
	CoreCapProtIB           CoreCap = 0x00100000 // RDMA_CORE_CAP_PROT_IB
	CoreCapProtRoCE         CoreCap = 0x00200000 // RDMA_CORE_CAP_PROT_ROCE
	CoreCapProtIWARP        CoreCap = 0x00400000 // RDMA_CORE_CAP_PROT_IWARP
	CoreCapProtRoCEUDPEncap CoreCap = 0x00800000 // RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP
	CoreCapProtRawPacket    CoreCap = 0x01000000 // RDMA_CORE_CAP_PROT_RAW_PACKET
	CoreCapProtUSNIC        CoreCap = 0x02000000 // RDMA_CORE_CAP_PROT_USNIC

	// CorePortIBAIB is RDMA_CORE_PORT_IBA_IB, a native InfiniBand port.
	CorePortIBAIB = CoreCapProtIB | CoreCapIBMAD | CoreCapIBSMI | CoreCapIBCM | CoreCapIBSA | CoreCapAFIB
	// CorePortIBARoCEUDPEncap is RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP, what
	// rxe's port reports (0x00803005).
	CorePortIBARoCEUDPEncap = CoreCapProtRoCEUDPEncap | CoreCapIBMAD | CoreCapIBCM | CoreCapAFIB | CoreCapEthAH
	// CorePortIntelOPA is RDMA_CORE_PORT_INTEL_OPA.
	CorePortIntelOPA = CorePortIBAIB | CoreCapOPAMAD
)

// PortImmutable is struct ib_port_immutable: what a port reports once at
// registration (get_port_immutable).
type PortImmutable struct {
	PKeyTblLen   int     // P_Key table entries (pkey_tbl_len)
	GIDTblLen    int     // GID table entries (gid_tbl_len)
	CoreCapFlags CoreCap // RDMA_CORE_CAP_* bits (core_cap_flags)
	MaxMADSize   int     // largest MAD in bytes (max_mad_size)
}

// PortAttr is struct ib_port_attr (ib_query_port).
type PortAttr struct {
	SubnetPrefix  uint64    // GID prefix (subnet_prefix); the core fills it from GID 0 on IB ports only
	State         PortState // IB_PORT_* logical state (state)
	MaxMTU        ib.MTU    // largest path MTU the port supports (max_mtu)
	ActiveMTU     ib.MTU    // current path MTU; rxe derives it from the netdev MTU (active_mtu)
	PhysMTU       int       // physical MTU in bytes (phys_mtu); used on OPA ports
	GIDTblLen     int       // GID table entries (gid_tbl_len)
	IPGids        bool      // GIDs derived from IP addresses (ip_gids)
	PortCapFlags  uint32    // IB_PORT_* bits of PortInfo CapabilityMask (port_cap_flags)
	MaxMsgSz      uint32    // largest message in bytes (max_msg_sz)
	BadPKeyCntr   uint32    // P_Key violations counted (bad_pkey_cntr)
	QKeyViolCntr  uint32    // Q_Key violations counted (qkey_viol_cntr)
	PKeyTblLen    uint16    // P_Key table entries (pkey_tbl_len)
	SMLID         uint32    // subnet manager's LID (sm_lid); IB only
	LID           uint32    // port's base LID (lid); IB only
	LMC           uint8     // LID mask control (lmc); IB only
	MaxVLNum      uint8     // data VLs, PortInfo VLCap encoding (max_vl_num)
	SMSL          uint8     // subnet manager's service level (sm_sl)
	SubnetTimeout uint8     // subnet timeout exponent: 4.096 µs × 2^n (subnet_timeout)
	InitTypeReply uint8     // PortInfo InitTypeReply (init_type_reply)
	ActiveWidth   Width     // IB_WIDTH_* link width (active_width)
	ActiveSpeed   Speed     // IB_SPEED_* per-lane speed (active_speed)
	PhysState     PhysState // IB_PORT_PHYS_STATE_* (phys_state)
	PortCapFlags2 uint16    // IB_PORT_*2 bits of PortInfo CapabilityMask2 (port_cap_flags2)
}

// DeviceAttr is struct ib_device_attr (ib_query_device) plus the node
// facts of struct ib_device.
type DeviceAttr struct {
	FWVer                 uint64 // firmware version (fw_ver); 0 for rxe
	SysImageGUID          uint64 // system image GUID (sys_image_guid); rxe: EUI-64 of the netdev MAC
	NodeGUID              uint64 // node GUID (ib_device.node_guid); rxe: EUI-64 of the netdev MAC
	MaxMRSize             uint64 // largest MR in bytes (max_mr_size)
	PageSizeCap           uint64 // supported page sizes, bit n = 2^n bytes (page_size_cap)
	VendorID              uint32 // IEEE vendor OUI (vendor_id); 0xFFFFFF for rxe
	VendorPartID          uint32 // vendor part ID (vendor_part_id)
	HWVer                 uint32 // hardware version (hw_ver)
	MaxQP                 int    // QPs the device supports (max_qp)
	MaxQPWR               int    // WRs per send or receive queue (max_qp_wr)
	DeviceCapFlags        uint64 // IB_DEVICE_* capability bits (device_cap_flags)
	KernelCapFlags        uint64 // IBK_* kernel-only capability bits (kernel_cap_flags)
	MaxSendSGE            int    // gather entries per send WR (max_send_sge)
	MaxRecvSGE            int    // scatter entries per receive WR (max_recv_sge)
	MaxSGERd              int    // scatter entries per RDMA Read WR (max_sge_rd)
	MaxCQ                 int    // CQs the device supports (max_cq)
	MaxCQE                int    // entries per CQ (max_cqe)
	MaxMR                 int    // MRs the device supports (max_mr)
	MaxPD                 int    // PDs the device supports (max_pd)
	MaxQPRdAtom           int    // responder resources per QP: bound on max_dest_rd_atomic (max_qp_rd_atom)
	MaxEERdAtom           int    // responder resources per EE context (max_ee_rd_atom); RD only, 0 on rxe
	MaxResRdAtom          int    // responder resources for RDMA Read/atomic on the whole device (max_res_rd_atom)
	MaxQPInitRdAtom       int    // initiator depth per QP: bound on max_rd_atomic (max_qp_init_rd_atom)
	MaxEEInitRdAtom       int    // initiator depth per EE context (max_ee_init_rd_atom); RD only, 0 on rxe
	AtomicCap             int    // enum ib_atomic_cap: 0 NONE, 1 HCA, 2 GLOB (atomic_cap)
	MaskedAtomicCap       int    // enum ib_atomic_cap for masked atomics (masked_atomic_cap)
	MaxEE                 int    // EE contexts (max_ee); RD only, 0 on rxe
	MaxRDD                int    // RD domains (max_rdd); RD only, 0 on rxe
	MaxMW                 int    // MWs the device supports (max_mw)
	MaxRawIPv6QP          int    // raw IPv6 QPs (max_raw_ipv6_qp)
	MaxRawEthyQP          int    // raw Ethertype QPs (max_raw_ethy_qp)
	MaxMcastGrp           int    // multicast groups (max_mcast_grp)
	MaxMcastQPAttach      int    // QPs per multicast group (max_mcast_qp_attach)
	MaxTotalMcastQPAttach int    // QP attachments over all groups (max_total_mcast_qp_attach)
	MaxAH                 int    // AHs the device supports (max_ah)
	MaxSRQ                int    // SRQs the device supports (max_srq)
	MaxSRQWR              int    // WRs per SRQ (max_srq_wr)
	MaxSRQSGE             int    // scatter entries per SRQ WR (max_srq_sge)
	MaxFastRegPageListLen int    // pages one fast-registration MR can map (max_fast_reg_page_list_len)
	MaxPKeys              uint16 // P_Key table entries (max_pkeys)
	LocalCAAckDelay       uint8  // local ACK delay exponent: 4.096 µs × 2^n (local_ca_ack_delay)
	MaxInlineData         int    // the QP cap limit (not in ib_device_attr; rxe's RXE_MAX_INLINE_DATA)
	PhysPortCnt           int    // number of ports (ib_device.phys_port_cnt)
	NodeDesc              string // node description, up to 64 bytes (ib_device.node_desc)
	NodeType              int    // RDMA_NODE_IB_CA = 1
	NumCompVectors        int    // completion vectors (ib_device.num_comp_vectors)
	UverbsABIVer          int    // uverbs ABI version of the driver (ib_device.uverbs_abi_ver)
	IsSwitch              bool   // a switch numbers its ports from 0

	// ODPCaps is what on-demand paging MRs (IB_ACCESS_ON_DEMAND) serve
	// (odp_caps, xrc_odp_caps); zero: no ODP.
	ODPCaps ODPCaps
}

// ODPCaps is struct ib_odp_caps with the XRC caps beside it: what the
// device's on-demand paging MRs (IB_ACCESS_ON_DEMAND) serve.
type ODPCaps struct {
	General uint64 // IB_ODP_SUPPORT* (general_caps)
	RC      uint32 // IB_ODP_SUPPORT_* per transport (per_transport_caps)
	UC      uint32
	UD      uint32
	XRC     uint32 // xrc_odp_caps
}

// ODP capability bits (enum ib_odp_general_cap_bits and
// ib_odp_transport_cap_bits, the same values as libibverbs').
const (
	ODPSupport         uint64 = 1 << 0 // IB_ODP_SUPPORT
	ODPSupportImplicit uint64 = 1 << 1 // IB_ODP_SUPPORT_IMPLICIT

	ODPSupportSend        uint32 = 1 << 0 // IB_ODP_SUPPORT_SEND
	ODPSupportRecv        uint32 = 1 << 1 // IB_ODP_SUPPORT_RECV
	ODPSupportWrite       uint32 = 1 << 2 // IB_ODP_SUPPORT_WRITE
	ODPSupportRead        uint32 = 1 << 3 // IB_ODP_SUPPORT_READ
	ODPSupportAtomic      uint32 = 1 << 4 // IB_ODP_SUPPORT_ATOMIC
	ODPSupportSRQRecv     uint32 = 1 << 5 // IB_ODP_SUPPORT_SRQ_RECV
	ODPSupportFlush       uint32 = 1 << 6 // IB_ODP_SUPPORT_FLUSH
	ODPSupportAtomicWrite uint32 = 1 << 7 // IB_ODP_SUPPORT_ATOMIC_WRITE
)

// PortImmutable returns a port's fixed properties (the port's
// ib_port_immutable: table lengths, core capability flags, MAD size), what
// the kernel's rdma_cap_* and rdma_protocol_* helpers read; package
// emu/kverbs has those helpers under their kernel names. An invalid port
// is EINVAL.
func (d *Device) PortImmutable(port uint32) (PortImmutable, error) {
	if !d.IsPortValid(port) {
		return PortImmutable{}, errorf(unix.EINVAL, "port immutable: port %d of %s: no such port", port, d.name)
	}
	return d.immutable(port), nil
}

// coreCap returns a valid port's core capability flags, 0 for another.
func (d *Device) coreCap(port uint32) CoreCap {
	if !d.IsPortValid(port) {
		return 0
	}
	return d.immutable(port).CoreCapFlags
}

// protocolRoCE reports a RoCE (v1 or v2) port (rdma_protocol_roce).
func (d *Device) protocolRoCE(port uint32) bool {
	return d.coreCap(port)&(CoreCapProtRoCE|CoreCapProtRoCEUDPEncap) != 0
}

// ahFindType returns the address handle type for port
// (rdma_ah_find_type): RoCE on a RoCE port, OPA on an OPA port with OPA
// AHs, IB otherwise.
func (d *Device) ahFindType(port uint32) ib.AHAttrType {
	switch {
	case d.protocolRoCE(port):
		return ib.AHAttrTypeRoCE
	case d.coreCap(port)&CoreCapProtIB != 0 && d.coreCap(port)&CoreCapOPAAH == CoreCapOPAAH:
		return ib.AHAttrTypeOPA
	}
	return ib.AHAttrTypeIB
}

// IsGRHRequired reports whether every address on port needs a GRH
// (rdma_is_grh_required): true for every RoCE port.
func (d *Device) IsGRHRequired(port uint32) bool {
	return d.coreCap(port)&(CoreCapIBGRHRequired|CoreCapProtRoCE|CoreCapProtRoCEUDPEncap) != 0
}

// GIDAdder is the optional driver op pair add_gid/del_gid: a device whose
// hardware holds a GID table implements it.
type GIDAdder interface {
	// AddGID writes a GID table entry into the hardware (add_gid).
	AddGID(e GIDEntry) error
	// DelGID removes a GID table entry from the hardware (del_gid).
	DelGID(e GIDEntry) error
}

// LinkLayer returns the port's link layer (rdma_port_get_link_layer).
func (d *Device) LinkLayer(port uint32) LinkLayer {
	switch {
	case d.coreCap(port)&CoreCapProtIB != 0:
		return LinkLayerInfiniBand
	case d.protocolRoCE(port):
		return LinkLayerEthernet
	}
	return LinkLayerUnspecified
}

// RxeMTU converts a netdev MTU to the IB MTU rxe reports as active_mtu:
// subtract the 80 bytes of RoCE headers, then floor to an IB MTU; below
// 256 gives MTU256 (rxe_mtu_int_to_enum).
func RxeMTU(netdevMTU int) ib.MTU {
	n := netdevMTU - 80
	switch {
	case n < 512:
		return ib.MTU256
	case n < 1024:
		return ib.MTU512
	case n < 2048:
		return ib.MTU1024
	case n < 4096:
		return ib.MTU2048
	}
	return ib.MTU4096
}

// GID is union ib_gid: 16 bytes, an IPv6 address or IPv4-mapped IPv4
// address for RoCEv2.
type GID [16]byte

// Addr returns g as an IP address, unmapping IPv4-mapped GIDs.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// GIDFromAddr returns the GID of an IP address (IPv4 as ::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// IsV4Mapped reports ::ffff:a.b.c.d.
func (g GID) IsV4Mapped() bool { return netip.AddrFrom16(g).Is4In6() }

// IsMulticast reports a multicast GID: first byte 0xFF, or an IPv4-mapped
// 224.0.0.0/4 address (rdma_is_multicast_addr).
func (g GID) IsMulticast() bool { return g[0] == 0xFF || (g.IsV4Mapped() && g[12]&0xF0 == 0xE0) }

// IsZero reports the all-zero GID (an empty table slot).
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// GIDEntry is struct ib_gid_attr: one slot of a port's GID table.
type GIDEntry struct {
	GID    GID        // the GID (ib_gid_attr.gid)
	Type   ib.GIDType // IB, RoCE v1 or RoCE v2 (gid_type)
	Index  int        // index in the port's GID table (index)
	Port   uint32     // port number (port_num)
	NetDev string     // name of the netdev the GID belongs to (ndev), "" for none
	VLANID uint16     // VLAN of that netdev (rdma_read_gid_l2_fields' vlan_id), 0 for none
}

// eui64GID returns the default GID fe80::EUI-64(MAC).
func eui64GID(mac []byte) GID {
	var g GID
	g[0], g[1] = 0xfe, 0x80
	copy(g[8:], EUI64(mac))
	return g
}

// EUI64 returns the modified EUI-64 of a MAC: the U/L bit of the first
// byte flipped and FF:FE inserted in the middle (addrconf_addr_eui48), which
// rxe also uses as node GUID.
func EUI64(mac []byte) []byte {
	return []byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// wantGIDs computes the table the core's RoCE GID management derives from
// the netdev: slot 0 the default link-local GID, then each address in
// order (IPv4-mapped or IPv6), all RoCEv2; duplicates are skipped.
func (d *Device) wantGIDs() []GID {
	want := []GID{eui64GID(d.netdev.MAC)}
	seen := map[GID]bool{want[0]: true}
	for _, a := range d.netdev.Addrs {
		g := GIDFromAddr(a)
		if seen[g] || !a.IsValid() {
			continue
		}
		seen[g] = true
		want = append(want, g)
	}
	return want
}

// fillGIDs rebuilds the table and returns the indexes that changed; d.mu
// held (or not yet shared).
func (d *Device) fillGIDs() []int {
	want := d.wantGIDs()
	var changed []int
	// Keep entries still wanted in their slots, as the GID cache does.
	keep := map[GID]bool{}
	for i := range d.gids {
		e := d.gids[i]
		if e.GID.IsZero() {
			continue
		}
		found := false
		for _, w := range want {
			if w == e.GID {
				found = true
			}
		}
		if !found {
			d.gids[i] = GIDEntry{}
			changed = append(changed, i)
		} else {
			keep[e.GID] = true
		}
	}
	for _, w := range want {
		if keep[w] {
			continue
		}
		for i := range d.gids {
			if d.gids[i].GID.IsZero() {
				d.gids[i] = GIDEntry{GID: w, Type: ib.GIDTypeRoCEv2, Index: i, Port: 1, NetDev: d.netdev.Name, VLANID: d.netdev.VLANID}
				changed = append(changed, i)
				break
			}
		}
	}
	return changed
}

// QueryGID returns the GID table entry at index of port
// (rdma_get_gid_attr / rdma_query_gid): an index beyond the table is
// EINVAL, an empty slot ENODATA.
func (d *Device) QueryGID(port uint32, index int) (GIDEntry, error) {
	if !d.IsPortValid(port) {
		return GIDEntry{}, errorf(unix.EINVAL, "query GID: port %d of %s: no such port", port, d.name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if index < 0 || index >= len(d.gids) {
		return GIDEntry{}, errorf(unix.EINVAL, "query GID %d of %s port %d: table has %d slots", index, d.name, port, len(d.gids))
	}
	e := d.gids[index]
	if e.GID.IsZero() {
		return GIDEntry{}, errorf(unix.ENODATA, "query GID %d of %s port %d: empty slot", index, d.name, port)
	}
	return e, nil
}

// FindGID returns the entry holding gid with type t on port
// (rdma_find_gid_by_port); none is ENOENT.
func (d *Device) FindGID(gid GID, t ib.GIDType, port uint32) (GIDEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.gids {
		if !e.GID.IsZero() && e.GID == gid && e.Type == t && e.Port == port {
			return e, nil
		}
	}
	return GIDEntry{}, errorf(unix.ENOENT, "find GID %v (%v) on %s port %d", gid, t, d.name, port)
}

// SetNetDevAddrs replaces the bound interface's addresses (an address
// added or removed on the netdev) and rescans the GID table, raising
// IB_EVENT_GID_CHANGE if it changed, as the core's netdev notifier does.
func (d *Device) SetNetDevAddrs(addrs []netip.Addr) {
	d.mu.Lock()
	d.netdev.Addrs = append([]netip.Addr(nil), addrs...)
	d.mu.Unlock()
	d.RoCERescanDevice()
}

// RoCERescanDevice rebuilds the GID table from the netdev's current
// addresses (rdma_roce_rescan_device) and dispatches IB_EVENT_GID_CHANGE
// for port 1 if any slot changed. Unchanged entries keep their slots.
func (d *Device) RoCERescanDevice() {
	d.mu.Lock()
	changed := d.fillGIDs()
	d.mu.Unlock()
	if len(changed) > 0 {
		d.dispatch(Event{Type: EventGIDChange, Port: 1})
	}
}
