package emu

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// AH is struct ib_ah, an address handle for UD sends.
type AH struct {
	Device *Device       // the device the AH was created on (ib_ah.device)
	PD     *PD           // the protection domain the AH belongs to (ib_ah.pd)
	Type   ib.AHAttrType // address type, RDMA_AH_ATTR_TYPE_* (ib_ah.type)
	// SGID is the source GID entry the AH was validated against.
	SGID GIDEntry

	priv any // the driver's state
}

// unwrapErrno returns the errno err wraps, EINVAL if none.
func unwrapErrno(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EINVAL
}

// checkAHAttr applies rdma_check_ah_attr and the SGID lookup: the port
// must exist, a RoCE-type AH or a GRH-required port needs IB_AH_GRH, and
// the SGID slot must exist (EINVAL) and be filled (ENODATA).
func (d *Device) checkAHAttr(a *ib.AHAttr) error {
	if !d.IsPortValid(a.PortNum) {
		return errorf(unix.EINVAL, "address: port %d does not exist", a.PortNum)
	}
	if (a.Type == ib.AHAttrTypeRoCE || d.IsGRHRequired(a.PortNum)) && a.AHFlags&ib.AHGRH == 0 {
		return errorf(unix.EINVAL, "address on port %d: IB_AH_GRH is required", a.PortNum)
	}
	if a.AHFlags&ib.AHGRH != 0 {
		if _, err := d.QueryGID(a.PortNum, int(a.GRH.SGIDIndex)); err != nil {
			return err
		}
	}
	return nil
}

// resolveDMAC fills a.DMAC for a RoCE address like a userspace AH
// (ib_resolve_eth_dmac): multicast DGIDs map arithmetically, unicast ones
// go through the Resolver, whose hop limit replaces the GRH's.
func (d *Device) resolveDMAC(a *ib.AHAttr) error {
	dgid := GID(a.GRH.DGID)
	if dgid.IsMulticast() {
		a.DMAC = MulticastMAC(dgid)
		return nil
	}
	if d.cfg.Resolver == nil {
		return errorf(unix.EHOSTUNREACH, "resolve %v: no address resolver configured", dgid)
	}
	if _, err := d.QueryGID(a.PortNum, int(a.GRH.SGIDIndex)); err != nil {
		return err
	}
	mac, err := d.cfg.Resolver.Resolve(context.Background(), dgid.Addr())
	if err != nil {
		return errorf(unwrapErrno(err), "resolve %v: %v", dgid, err)
	}
	a.DMAC, a.GRH.HopLimit = mac, routeHopLimit
	return nil
}

// MulticastMAC returns the Ethernet multicast address of a multicast GID:
// 01:00:5e plus the low 23 bits for an IPv4-mapped group, 33:33 plus the
// last four bytes otherwise (ip_eth_mc_map / ipv6_eth_mc_map).
func MulticastMAC(g GID) [6]byte {
	if g.IsV4Mapped() {
		return [6]byte{0x01, 0x00, 0x5e, g[13] & 0x7f, g[14], g[15]}
	}
	return [6]byte{0x33, 0x33, g[12], g[13], g[14], g[15]}
}

// CreateAH creates an address handle for a kernel caller (rdma_create_ah):
// the attribute is validated; the destination MAC must already be
// resolved.
func (pd *PD) CreateAH(attr *ib.AHAttr) (*AH, error) {
	return pd.createAH(attr, nil)
}

// CreateUserAH creates an address handle for a userspace caller
// (rdma_create_user_ah): like CreateAH, and for RoCE the destination MAC
// is resolved (multicast arithmetically, unicast through the Resolver,
// whose route hop limit replaces attr's).
func (pd *PD) CreateUserAH(attr *ib.AHAttr, udata *UData) (*AH, error) {
	if udata == nil {
		udata = &UData{}
	}
	return pd.createAH(attr, udata)
}

func (pd *PD) createAH(attr *ib.AHAttr, udata *UData) (*AH, error) {
	d := pd.Device
	if err := d.checkAHAttr(attr); err != nil {
		return nil, errorf(unwrapErrno(err), "create AH: %v", err)
	}
	if udata != nil && d.protocolRoCE(attr.PortNum) {
		if err := d.resolveDMAC(attr); err != nil {
			return nil, err
		}
	}
	ah := &AH{Device: d, PD: pd, Type: attr.Type}
	if attr.AHFlags&ib.AHGRH != 0 {
		ah.SGID, _ = d.QueryGID(attr.PortNum, int(attr.GRH.SGIDIndex))
	}
	if err := d.ops.CreateAH(ah, attr, udata); err != nil {
		return nil, err
	}
	pd.use.inc()
	return ah, nil
}

// Modify changes the AH's address (rdma_modify_ah): the type must not
// change (EINVAL); a driver without modify_ah gives EOPNOTSUPP.
func (ah *AH) Modify(attr *ib.AHAttr) error {
	if attr.Type != ah.Type {
		return errorf(unix.EINVAL, "modify AH: type %v cannot become %v", ah.Type, attr.Type)
	}
	if err := ah.Device.checkAHAttr(attr); err != nil {
		return errorf(unwrapErrno(err), "modify AH: %v", err)
	}
	m, ok := ah.Device.ops.(AHModifier)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "modify AH: driver has no modify_ah")
	}
	return m.ModifyAH(ah, attr)
}

// Query returns the AH's address (rdma_query_ah).
func (ah *AH) Query() (ib.AHAttr, error) {
	m, ok := ah.Device.ops.(AHModifier)
	if !ok {
		return ib.AHAttr{}, errorf(unix.EOPNOTSUPP, "query AH: driver has no query_ah")
	}
	return m.QueryAH(ah)
}

// Destroy destroys the AH (rdma_destroy_ah); it is never refused.
func (ah *AH) Destroy() error { return ah.DestroyUser(nil) }

// DestroyUser destroys the AH for a caller with udata
// (rdma_destroy_ah_user).
func (ah *AH) DestroyUser(udata *UData) error {
	if err := ah.Device.ops.DestroyAH(ah); err != nil {
		return err
	}
	ah.PD.use.dec()
	return nil
}

// GRHSize is the size of the network-header area at the start of a UD
// receive buffer (struct ib_grh; for IPv4, 20 zero bytes and the IPv4
// header).
const GRHSize = 40

// GetRDMAHeaderVersion tells which IP version the 40-byte header area of a
// UD receive holds (ib_get_rdma_header_version): if byte 0's high nibble is
// not 6 it is 4 when bytes 20..39 hold an IPv4 header, else 0; if it is 6,
// an IPv4 header at 20 with IHL 5 and a correct checksum still wins (4),
// otherwise 6.
func GetRDMAHeaderVersion(hdr *[GRHSize]byte) int {
	ip4 := hdr[20:40]
	if hdr[0]>>4 != 6 {
		if ip4[0]>>4 == 4 {
			return 4
		}
		return 0
	}
	if ip4[0]&0x0F != 5 {
		return 6
	}
	if binary.BigEndian.Uint16(ip4[10:12]) == ipv4Checksum(ip4) {
		return 4
	}
	return 6
}

// ipv4Checksum computes the header checksum of a 20-byte IPv4 header,
// treating the checksum field as zero (ip_fast_csum).
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < 20; i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// GetGIDsFromRDMAHdr extracts the source and destination GIDs from a
// receive's header area (ib_get_gids_from_rdma_hdr): IPv4 addresses from
// bytes 20..39 as IPv4-mapped GIDs, or the GRH's sgid and dgid for IPv6,
// IB and RoCEv1. Another network type is EINVAL.
func GetGIDsFromRDMAHdr(hdr *[GRHSize]byte, nt NetworkType) (sgid, dgid GID, err error) {
	switch nt {
	case NetworkIPv4:
		sgid = GID{10: 0xff, 11: 0xff}
		dgid = sgid
		copy(sgid[12:], hdr[20+12:20+16])
		copy(dgid[12:], hdr[20+16:20+20])
	case NetworkIPv6, NetworkIB, NetworkRoCEv1:
		copy(sgid[:], hdr[8:24])
		copy(dgid[:], hdr[24:40])
	default:
		return GID{}, GID{}, errorf(unix.EINVAL, "GIDs from header: network type %v", nt)
	}
	return sgid, dgid, nil
}

// netTypeOf detects a RoCE receive's network type without
// IB_WC_WITH_NETWORK_HDR_TYPE: IPv4 by header version, else IPv6 when the
// GRH's next header is UDP, else RoCEv1 (ib_get_net_type_by_grh).
func netTypeOf(hdr *[GRHSize]byte) NetworkType {
	if GetRDMAHeaderVersion(hdr) == 4 {
		return NetworkIPv4
	}
	if hdr[6] == 17 {
		return NetworkIPv6
	}
	return NetworkRoCEv1
}

// InitAHAttrFromWC builds the address of the sender of a received UD
// message, for a reply (ib_init_ah_attr_from_wc). On a RoCE port the
// completion must carry IB_WC_GRH (else EPROTOTYPE); the local GID the
// packet was sent to must be in the table; the reply GRH takes the
// received source GID, flow label and traffic class, hop limit 0xFF, and
// the MAC is resolved as for a user AH.
func (d *Device) InitAHAttrFromWC(port uint32, wc *WC, grh *[GRHSize]byte) (ib.AHAttr, error) {
	var a ib.AHAttr
	if !d.IsPortValid(port) {
		return a, errorf(unix.EINVAL, "AH from WC: port %d does not exist", port)
	}
	a.Type = d.ahFindType(port)
	a.SL = wc.SL
	a.PortNum = port
	if !d.protocolRoCE(port) {
		a.AHFlags = 0
		if wc.WCFlags&WCGRH != 0 {
			return a, errorf(unix.EOPNOTSUPP, "AH from WC: InfiniBand ports are not emulated")
		}
		return a, nil
	}
	if wc.WCFlags&WCGRH == 0 {
		return a, errorf(unix.EPROTOTYPE, "AH from WC: RoCE completion without IB_WC_GRH")
	}
	nt := wc.NetworkHdrType
	if wc.WCFlags&WCWithNetworkHdrType == 0 {
		nt = netTypeOf(grh)
	}
	sgid, dgid, err := GetGIDsFromRDMAHdr(grh, nt)
	if err != nil {
		return a, err
	}
	gt := ib.GIDTypeRoCEv2
	if nt == NetworkRoCEv1 {
		gt = ib.GIDTypeRoCE
	}
	local, err := d.FindGID(dgid, gt, port)
	if err != nil {
		return a, err
	}
	flow := binary.BigEndian.Uint32(grh[0:4])
	a.AHFlags = ib.AHGRH
	a.GRH = ib.GlobalRoute{DGID: sgid, FlowLabel: flow & 0xFFFFF, SGIDIndex: uint8(local.Index),
		HopLimit: 0xFF, TrafficClass: uint8(flow >> 20)}
	if err := d.resolveDMAC(&a); err != nil {
		return a, err
	}
	return a, nil
}

// CreateAHFromWC creates an AH addressing the sender of a received UD
// message (ib_create_ah_from_wc): InitAHAttrFromWC, then CreateAH.
func (pd *PD) CreateAHFromWC(wc *WC, grh *[GRHSize]byte, port uint32) (*AH, error) {
	a, err := pd.Device.InitAHAttrFromWC(port, wc, grh)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(&a)
}
