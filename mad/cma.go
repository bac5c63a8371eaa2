package mad

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The rdma_cm private-data header (struct cma_hdr in the kernel's cma.c,
// which librdmacm's users get for free): the first CMAHeaderSize bytes of
// a REQ's private data when the connection was made by IP address.
//
//	 0 CMA version (0)
//	 1 IP version (4 bits, high nibble) | reserved (4)
//	 2 source port (16, the active side's)
//	 4 source address (16: IPv6, or IPv4 in the last 4 bytes)
//	20 destination address (16)
//
// The consumer's own private data follows it.

// CMAHeaderSize is the size of the rdma_cm private-data header.
const CMAHeaderSize = 36

// CMAVersion is the only version of the header (CMA_VERSION).
const CMAVersion = 0x00

// The rdma_cm port spaces (enum rdma_ucm_port_space).
const (
	// PortSpaceTCP is RDMA_PS_TCP: RC connections (REQ/REP/RTU), the
	// port space of rping, ucmatose and perftest -R.
	PortSpaceTCP = 0x0106
	// PortSpaceUDP is RDMA_PS_UDP: UD service resolution (SIDR) and
	// multicast with Q_Key RDMAUDPQKey (udaddy, mckey).
	PortSpaceUDP = 0x0111
	// PortSpaceIB is RDMA_PS_IB: either QP type.
	PortSpaceIB = 0x013F
	// PortSpaceIPoIB is RDMA_PS_IPOIB: UD, IPoIB only (rdma_cm refuses
	// it on a RoCE port, cma_acquire_dev: EINVAL).
	PortSpaceIPoIB = 0x0002
)

// RDMAUDPQKey is the Q_Key rdma_cm gives UD QPs and multicast groups of
// RDMA_PS_UDP and RDMA_PS_IB (RDMA_UDP_QKEY), and that a SIDR_REP of
// such a listener carries.
const RDMAUDPQKey = 0x01234567

// ServiceIDPrefix is the top of the service IDs of the 0x01xx port spaces
// (TCP, UDP, IB): 0x0000000001 << 24.
const ServiceIDPrefix uint64 = 0x0000000001000000

// ServiceID returns the service ID of port in port space ps as rdma_cm
// builds it for an IP address (cma_get_service_id: ps << 16 + port), e.g.
// 0x0000000001064e20 for RDMA_PS_TCP port 20000, 0x0000000001111c06 for
// RDMA_PS_UDP port 7174 and 0x0000000000021c06 for RDMA_PS_IPOIB.
func ServiceID(ps uint16, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// ServicePort splits an rdma_cm service ID into its port space and port
// (cma_ps_from_service_id, cma_port_from_service_id); ok is false for a
// service ID outside the four port spaces.
func ServicePort(sid uint64) (ps uint16, port uint16, ok bool) {
	ps = uint16(sid >> 16)
	if sid>>32 != 0 {
		return 0, 0, false
	}
	switch ps {
	case PortSpaceTCP, PortSpaceUDP, PortSpaceIB, PortSpaceIPoIB:
		return ps, uint16(sid), true
	}
	return 0, 0, false
}

// CMAHeader is a view of the rdma_cm private-data header; it must be at
// least CMAHeaderSize bytes long.
type CMAHeader []byte

// CMAHeaderFields holds the header's fields. Src and Dst are both IPv4 or
// both IPv6.
type CMAHeaderFields struct {
	Version uint8
	SrcPort uint16
	Src     netip.Addr
	Dst     netip.Addr
}

// Version returns the CMA version.
func (h CMAHeader) Version() uint8 { return h[0] }

// IPVersion returns the IP version (4 or 6).
func (h CMAHeader) IPVersion() uint8 { return h[1] >> 4 }

// SrcPort returns the source port.
func (h CMAHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(h[2:]) }

func (h CMAHeader) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+12 : off+16]))
	}
	return netip.AddrFrom16([16]byte(h[off : off+16]))
}

// Src returns the source (active side's) address.
func (h CMAHeader) Src() netip.Addr { return h.addr(4) }

// Dst returns the destination (passive side's) address.
func (h CMAHeader) Dst() netip.Addr { return h.addr(20) }

// Fields returns the header's fields.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{Version: h.Version(), SrcPort: h.SrcPort(), Src: h.Src(), Dst: h.Dst()}
}

// Encode writes f into the header.
func (h CMAHeader) Encode(f *CMAHeaderFields) {
	clear(h[:CMAHeaderSize])
	h[0] = f.Version
	binary.BigEndian.PutUint16(h[2:], f.SrcPort)
	if f.Src.Is4() {
		h[1] = 4 << 4
		a, b := f.Src.As4(), f.Dst.As4()
		copy(h[16:20], a[:])
		copy(h[32:36], b[:])
		return
	}
	h[1] = 6 << 4
	a, b := f.Src.As16(), f.Dst.As16()
	copy(h[4:20], a[:])
	copy(h[20:36], b[:])
}

// ParseCMAHeader returns the header at the start of a REQ's or a
// SIDR_REQ's private data,
// checking its length, version and IP version.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderSize {
		return nil, fmt.Errorf("cma header: %d bytes, want %d: %w", len(b), CMAHeaderSize, ErrTruncated)
	}
	h := CMAHeader(b[:CMAHeaderSize])
	if h.Version() != CMAVersion {
		return nil, fmt.Errorf("cma header: version %d, want %d", h.Version(), CMAVersion)
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("cma header: IP version %d", v)
	}
	return h, nil
}
