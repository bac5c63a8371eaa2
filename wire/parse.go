package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"

	"github.com/softroce/softroce/ib"
)

// Ethernet, IP and UDP constants of a RoCEv2 frame.
const (
	EthernetSize    = 14     // Ethernet II header without 802.1Q tag
	VLANTagSize     = 4      // one 802.1Q tag
	IPv4Size        = 20     // IPv4 header without options
	IPv6Size        = 40     // IPv6 header without extension headers
	UDPSize         = 8      // UDP header
	EtherTypeIPv4   = 0x0800 // ETH_P_IP
	EtherTypeIPv6   = 0x86dd // ETH_P_IPV6
	EtherTypeVLAN   = 0x8100 // ETH_P_8021Q
	EtherTypeQinQ   = 0x88a8 // ETH_P_8021AD
	IPProtocolUDP   = 17
	ipv4FlagMF      = 0x2000
	ipv4FragOffMask = 0x1fff
)

// Sentinel errors. A *ParseError wraps ErrTruncated, ErrNotRoCE,
// ErrMalformed or ErrUnsupported; the ICRC functions return ErrBadICRC
// (and the first three for frames they cannot walk); Build returns
// ErrShortBuffer or ErrMalformed. Test with errors.Is.
var (
	// ErrTruncated: a length says there are more bytes than the frame has.
	ErrTruncated = errors.New("truncated")
	// ErrNotRoCE: a well-formed frame that is not RoCEv2 (ARP, TCP, another
	// UDP port, ...).
	ErrNotRoCE = errors.New("not RoCEv2")
	// ErrMalformed: a field holds a value RoCEv2 does not allow (unknown
	// opcode, bad IP version, inconsistent lengths).
	ErrMalformed = errors.New("malformed")
	// ErrUnsupported: valid on the wire but outside what rxe accepts and
	// this package handles (IPv4 options, fragments, stacked VLAN tags).
	ErrUnsupported = errors.New("unsupported")
	// ErrBadICRC: the ICRC does not match the frame's contents.
	ErrBadICRC = errors.New("bad ICRC")
	// ErrShortBuffer: Build's buffer is too small for the frame.
	ErrShortBuffer = errors.New("buffer too small")
)

// Layer names the header a ParseError is about.
type Layer uint8

// Layers of a RoCEv2 frame, outermost first.
const (
	LayerEthernet Layer = iota + 1
	LayerVLAN
	LayerIPv4
	LayerIPv6
	LayerUDP
	LayerBTH
	LayerExtHeaders
	LayerPayload
	LayerICRC
)

var layerNames = [...]string{
	LayerEthernet: "ethernet", LayerVLAN: "vlan", LayerIPv4: "ipv4", LayerIPv6: "ipv6",
	LayerUDP: "udp", LayerBTH: "bth", LayerExtHeaders: "extended headers",
	LayerPayload: "payload", LayerICRC: "icrc",
}

// IsValid reports whether l is one of the layers above (the zero Layer is
// not).
func (l Layer) IsValid() bool { return l >= LayerEthernet && l <= LayerICRC }

// String returns the layer's lower-case name.
func (l Layer) String() string {
	if int(l) < len(layerNames) && layerNames[l] != "" {
		return layerNames[l]
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// ParseError says what is wrong with a frame and where. Err is one of the
// sentinels (ErrTruncated, ErrNotRoCE, ErrMalformed, ErrUnsupported).
type ParseError struct {
	Layer  Layer  // the header being parsed
	Offset int    // byte offset of that header (or of the field) in the frame
	Reason string // what is wrong, e.g. "UDP length exceeds IP payload"
	Value  int    // the offending value, if HasValue
	// HasValue reports whether Value is meaningful.
	HasValue bool
	Err      error // the sentinel: ErrTruncated, ErrNotRoCE, ErrMalformed or ErrUnsupported; what Unwrap returns
}

// Error formats the error as "wire: LAYER at offset N: REASON (VALUE): ERR".
func (e *ParseError) Error() string {
	s := "wire: " + e.Layer.String() + " at offset " + strconv.Itoa(e.Offset) + ": " + e.Reason
	if e.HasValue {
		s += " (" + strconv.Itoa(e.Value) + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the sentinel error.
func (e *ParseError) Unwrap() error { return e.Err }

// Packet is a parsed RoCEv2 frame: offsets into the frame it was parsed
// from, which it aliases. Its accessors trust the offsets (Decode checked
// them); they are only meaningful after a successful Decode or Parse.
type Packet struct {
	frame   []byte
	l3Off   int // IP header
	l4Off   int // UDP header
	bthOff  int // BTH
	payOff  int // payload
	payLen  int
	icrcOff int // ICRC (end of the UDP datagram - 4)
	vlanTCI uint16
	vlan    bool
	ipv6    bool
	pad     uint8
	op      Opcode
	err     ParseError // storage for Decode's error, so errors don't allocate
}

// Parse parses a whole Ethernet frame. See Packet.Decode for the checks;
// Parse allocates only to return an error.
func Parse(frame []byte) (Packet, error) {
	var p Packet
	if err := p.Decode(frame); err != nil {
		e := p.err
		return p, &e
	}
	return p, nil
}

// Decode parses frame (starting at the Ethernet header, without FCS) into
// p: Ethernet with at most one 802.1Q tag, IPv4 without options and not
// fragmented, or IPv6 without extension headers, UDP to port 4791, BTH, the
// extended headers the opcode implies, payload, pad and ICRC. Bytes after
// the IP datagram (Ethernet padding) are ignored. It checks every length it
// uses, never panics and never allocates; on failure it returns a
// *ParseError that points into p and stays valid until p's next Decode.
// Decode does not verify the ICRC: see Packet.VerifyICRC.
func (p *Packet) Decode(frame []byte) error {
	// The usual frame, untagged IPv4 without options to UDP port 4791,
	// passes the checks of the general path below in a few loads; any
	// other frame, or one that fails a check, takes the general path,
	// which reports what is wrong.
	if len(frame) >= EthernetSize+IPv4Size+UDPSize &&
		binary.BigEndian.Uint32(frame[12:])>>8 == EtherTypeIPv4<<8|0x45 && frame[23] == IPProtocolUDP &&
		binary.BigEndian.Uint16(frame[20:])&(ipv4FlagMF|ipv4FragOffMask) == 0 &&
		binary.BigEndian.Uint16(frame[36:]) == ib.RoCEv2UDPPort {
		tot := int(binary.BigEndian.Uint16(frame[16:]))
		ul := int(binary.BigEndian.Uint16(frame[38:]))
		if tot <= len(frame)-EthernetSize && ul >= UDPSize && ul <= tot-IPv4Size {
			// Every field as the general path would leave it here,
			// set one by one: clearing the whole Packet, its
			// error's storage too, costs more than the checks.
			p.frame, p.l3Off, p.l4Off = frame, EthernetSize, EthernetSize+IPv4Size
			p.vlanTCI, p.vlan, p.ipv6 = 0, false, false
			p.payOff, p.payLen, p.icrcOff, p.pad, p.op = 0, 0, 0, 0, 0
			if p.err.Err != nil {
				p.err = ParseError{}
			}
			return p.decodeTransport(EthernetSize+IPv4Size+UDPSize, EthernetSize+IPv4Size+ul)
		}
	}
	return p.decodeFrame(frame)
}

// decodeFrame is Decode's general path, every check in order.
func (p *Packet) decodeFrame(frame []byte) error {
	*p = Packet{frame: frame}
	if len(frame) < EthernetSize {
		return p.fail(LayerEthernet, 0, "frame shorter than an Ethernet header", len(frame), true, ErrTruncated)
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := EthernetSize
	if et == EtherTypeVLAN {
		if len(frame) < EthernetSize+VLANTagSize {
			return p.fail(LayerVLAN, 12, "frame shorter than an 802.1Q tag", len(frame), true, ErrTruncated)
		}
		p.vlan = true
		p.vlanTCI = binary.BigEndian.Uint16(frame[14:])
		et = binary.BigEndian.Uint16(frame[16:])
		off += VLANTagSize
		if et == EtherTypeVLAN || et == EtherTypeQinQ {
			return p.fail(LayerVLAN, 16, "stacked VLAN tags", int(et), true, ErrUnsupported)
		}
	} else if et == EtherTypeQinQ {
		return p.fail(LayerVLAN, 12, "802.1ad (QinQ) tag", int(et), true, ErrUnsupported)
	}
	switch et {
	case EtherTypeIPv4, EtherTypeIPv6:
		return p.decodeIP(off, et == EtherTypeIPv6)
	}
	return p.fail(LayerEthernet, off-2, "ethertype is not IP", int(et), true, ErrNotRoCE)
}

// DecodeIP parses frame starting at its IP header (l3Off 0) into p, for
// links without an Ethernet header; otherwise as Decode.
func (p *Packet) DecodeIP(frame []byte) error {
	*p = Packet{frame: frame}
	if len(frame) == 0 {
		return p.fail(LayerIPv4, 0, "empty packet", 0, false, ErrTruncated)
	}
	switch frame[0] >> 4 {
	case 4:
		return p.decodeIP(0, false)
	case 6:
		return p.decodeIP(0, true)
	}
	return p.fail(LayerIPv4, 0, "IP version is neither 4 nor 6", int(frame[0]>>4), true, ErrMalformed)
}

func (p *Packet) decodeIP(off int, v6 bool) error {
	p.l3Off = off
	l4, end, v, bad := ipBounds(p.frame, off, v6)
	if bad != nil {
		return p.fail(bad.layer, off+bad.off, bad.reason, v, true, bad.err)
	}
	p.ipv6 = v6
	return p.decodeUDP(l4, end)
}

// ipCheck is a check of the IP header that failed: the layer, the
// failing field's offset from the IP header, the reason and the error.
type ipCheck struct {
	layer  Layer
	off    int
	reason string
	err    error
}

// The IP header checks, in the order ipBounds makes them.
var (
	ipv4Short     = &ipCheck{LayerIPv4, 0, "shorter than an IPv4 header", ErrTruncated}
	ipv4Version   = &ipCheck{LayerIPv4, 0, "IP version is not 4", ErrMalformed}
	ipv4IHLShort  = &ipCheck{LayerIPv4, 0, "IHL below 5", ErrMalformed}
	ipv4Options   = &ipCheck{LayerIPv4, 0, "IPv4 options", ErrUnsupported}
	ipv4TotShort  = &ipCheck{LayerIPv4, 2, "total length below header length", ErrMalformed}
	ipv4TotLong   = &ipCheck{LayerIPv4, 2, "total length exceeds frame", ErrTruncated}
	ipv4Fragment  = &ipCheck{LayerIPv4, 6, "fragment", ErrUnsupported}
	ipv4NotUDP    = &ipCheck{LayerIPv4, 9, "protocol is not UDP", ErrNotRoCE}
	ipv6Short     = &ipCheck{LayerIPv6, 0, "shorter than an IPv6 header", ErrTruncated}
	ipv6Version   = &ipCheck{LayerIPv6, 0, "IP version is not 6", ErrMalformed}
	ipv6PayloadLn = &ipCheck{LayerIPv6, 4, "payload length exceeds frame", ErrTruncated}
	ipv6NotUDP    = &ipCheck{LayerIPv6, 6, "next header is not UDP", ErrNotRoCE}
)

// ipBounds checks the IP header at off and returns the offset of the UDP
// header and the end of the IP datagram, or the check that failed and the
// value it found. It needs no Packet, so that SealICRC and VerifyICRC
// check a frame without setting one up.
func ipBounds(frame []byte, off int, v6 bool) (l4, end, v int, bad *ipCheck) {
	avail := len(frame) - off
	if !v6 {
		if avail < IPv4Size {
			return 0, 0, avail, ipv4Short
		}
		h := frame[off : off+IPv4Size]
		if v := h[0] >> 4; v != 4 {
			return 0, 0, int(v), ipv4Version
		}
		ihl := int(h[0]&0x0f) * 4
		if ihl < IPv4Size {
			return 0, 0, ihl / 4, ipv4IHLShort
		}
		if ihl > IPv4Size {
			return 0, 0, ihl - IPv4Size, ipv4Options
		}
		tot := int(binary.BigEndian.Uint16(h[2:]))
		if tot < ihl {
			return 0, 0, tot, ipv4TotShort
		}
		if tot > avail {
			return 0, 0, tot, ipv4TotLong
		}
		if fr := binary.BigEndian.Uint16(h[6:]); fr&(ipv4FlagMF|ipv4FragOffMask) != 0 {
			return 0, 0, int(fr), ipv4Fragment
		}
		if h[9] != IPProtocolUDP {
			return 0, 0, int(h[9]), ipv4NotUDP
		}
		return off + IPv4Size, off + tot, 0, nil
	}
	if avail < IPv6Size {
		return 0, 0, avail, ipv6Short
	}
	h := frame[off : off+IPv6Size]
	if v := h[0] >> 4; v != 6 {
		return 0, 0, int(v), ipv6Version
	}
	pl := int(binary.BigEndian.Uint16(h[4:]))
	if pl > avail-IPv6Size {
		return 0, 0, pl, ipv6PayloadLn
	}
	if h[6] != IPProtocolUDP {
		return 0, 0, int(h[6]), ipv6NotUDP
	}
	return off + IPv6Size, off + IPv6Size + pl, 0, nil
}

func (p *Packet) decodeUDP(off, ipEnd int) error {
	p.l4Off = off
	if ipEnd-off < UDPSize {
		return p.fail(LayerUDP, off, "IP payload shorter than a UDP header", ipEnd-off, true, ErrTruncated)
	}
	h := p.frame[off:]
	if dp := binary.BigEndian.Uint16(h[2:]); dp != ib.RoCEv2UDPPort {
		return p.fail(LayerUDP, off+2, "destination port is not 4791", int(dp), true, ErrNotRoCE)
	}
	ul := int(binary.BigEndian.Uint16(h[4:]))
	if ul < UDPSize {
		return p.fail(LayerUDP, off+4, "UDP length below 8", ul, true, ErrMalformed)
	}
	if ul > ipEnd-off {
		return p.fail(LayerUDP, off+4, "UDP length exceeds IP payload", ul, true, ErrMalformed)
	}
	return p.decodeTransport(off+UDPSize, off+ul)
}

// DecodeTransport parses b as a UDP payload of RoCEv2: BTH, extended
// headers, payload, pad and ICRC, with no IP or UDP header (so the ICRC
// cannot be verified: VerifyICRC reports ErrMalformed). Offsets are
// relative to b.
func (p *Packet) DecodeTransport(b []byte) error {
	*p = Packet{frame: b, l3Off: -1, l4Off: -1}
	return p.decodeTransport(0, len(b))
}

// decodeTransport parses the BTH and what follows, from off to end (the end
// of the UDP datagram). rxe_rcv's checks: at least a BTH, a known opcode,
// and room for the opcode's headers, the pad and the ICRC.
func (p *Packet) decodeTransport(off, end int) error {
	p.bthOff = off
	n := end - off
	if n < BTHSize {
		return p.fail(LayerBTH, off, "UDP payload shorter than a BTH", n, true, ErrTruncated)
	}
	b := BTH(p.frame[off:end])
	op := b.Opcode()
	if !op.IsValid() {
		return p.fail(LayerBTH, off, "unknown opcode", int(op), true, ErrMalformed)
	}
	p.op = op
	hl := op.HeaderLen()
	if n < hl+ICRCSize {
		return p.fail(LayerExtHeaders, off+BTHSize, "UDP payload shorter than the opcode's headers and ICRC", n, true, ErrTruncated)
	}
	pad := int(b.PadCnt())
	if n < hl+pad+ICRCSize {
		return p.fail(LayerPayload, off+hl, "payload shorter than the pad count", n-hl-ICRCSize, true, ErrMalformed)
	}
	p.pad = uint8(pad)
	p.payOff = off + hl
	p.payLen = n - hl - pad - ICRCSize
	p.icrcOff = end - ICRCSize
	return nil
}

func (p *Packet) fail(l Layer, off int, reason string, v int, hasV bool, err error) error {
	p.err = ParseError{Layer: l, Offset: off, Reason: reason, Value: v, HasValue: hasV, Err: err}
	return &p.err
}

// Frame returns the frame p was parsed from.
func (p *Packet) Frame() []byte { return p.frame }

// Len returns the length of the RoCE frame: up to and including the ICRC
// (excluding any Ethernet padding after it).
func (p *Packet) Len() int { return p.icrcOff + ICRCSize }

// HasVLAN reports whether the frame carries an 802.1Q tag.
func (p *Packet) HasVLAN() bool { return p.vlan }

// VLANTCI returns the 802.1Q tag control information (PCP, DEI, VID), or 0.
func (p *Packet) VLANTCI() uint16 { return p.vlanTCI }

// EthDst returns the Ethernet destination address.
func (p *Packet) EthDst() [6]byte { return [6]byte(p.frame[0:6]) }

// EthSrc returns the Ethernet source address.
func (p *Packet) EthSrc() [6]byte { return [6]byte(p.frame[6:12]) }

// L3Offset returns the offset of the IP header (-1 after DecodeTransport).
func (p *Packet) L3Offset() int { return p.l3Off }

// UDPOffset returns the offset of the UDP header (-1 after DecodeTransport).
func (p *Packet) UDPOffset() int { return p.l4Off }

// BTHOffset returns the offset of the BTH.
func (p *Packet) BTHOffset() int { return p.bthOff }

// PayloadOffset returns the offset of the payload.
func (p *Packet) PayloadOffset() int { return p.payOff }

// ICRCOffset returns the offset of the ICRC.
func (p *Packet) ICRCOffset() int { return p.icrcOff }

// IsIPv6 reports whether the frame is RoCEv2 over IPv6.
func (p *Packet) IsIPv6() bool { return p.ipv6 }

// IPHeader returns the IPv4 or IPv6 header.
func (p *Packet) IPHeader() []byte { return p.frame[p.l3Off:p.l4Off] }

// Src returns the source IP address.
func (p *Packet) Src() netip.Addr {
	if p.ipv6 {
		return netip.AddrFrom16([16]byte(p.frame[p.l3Off+8:]))
	}
	return netip.AddrFrom4([4]byte(p.frame[p.l3Off+12:]))
}

// Dst returns the destination IP address.
func (p *Packet) Dst() netip.Addr {
	if p.ipv6 {
		return netip.AddrFrom16([16]byte(p.frame[p.l3Off+24:]))
	}
	return netip.AddrFrom4([4]byte(p.frame[p.l3Off+16:]))
}

// SrcBytes returns the source IP address as the frame holds it, a slice
// of the frame: 4 bytes for IPv4, 16 for IPv6. It equals an address's
// AsSlice() exactly when Src() equals that address (one without a zone),
// without making an Addr of the frame's bytes.
func (p *Packet) SrcBytes() []byte {
	if p.ipv6 {
		return p.frame[p.l3Off+8 : p.l3Off+24 : p.l3Off+24]
	}
	return p.frame[p.l3Off+12 : p.l3Off+16 : p.l3Off+16]
}

// DstBytes returns the destination IP address as the frame holds it, as
// SrcBytes does the source.
func (p *Packet) DstBytes() []byte {
	if p.ipv6 {
		return p.frame[p.l3Off+24 : p.l3Off+40 : p.l3Off+40]
	}
	return p.frame[p.l3Off+16 : p.l3Off+20 : p.l3Off+20]
}

// TrafficClass returns the IPv4 TOS or IPv6 traffic class byte (DSCP<<2 |
// ECN).
func (p *Packet) TrafficClass() uint8 {
	if p.ipv6 {
		return uint8(binary.BigEndian.Uint16(p.frame[p.l3Off:]) >> 4)
	}
	return p.frame[p.l3Off+1]
}

// HopLimit returns the IPv4 TTL or IPv6 hop limit.
func (p *Packet) HopLimit() uint8 {
	if p.ipv6 {
		return p.frame[p.l3Off+7]
	}
	return p.frame[p.l3Off+8]
}

// FlowLabel returns the IPv6 flow label (0 for IPv4).
func (p *Packet) FlowLabel() uint32 {
	if p.ipv6 {
		return binary.BigEndian.Uint32(p.frame[p.l3Off:]) & 0xfffff
	}
	return 0
}

// IPID returns the IPv4 identification (0 for IPv6).
func (p *Packet) IPID() uint16 {
	if p.ipv6 {
		return 0
	}
	return binary.BigEndian.Uint16(p.frame[p.l3Off+4:])
}

// DontFragment reports whether the IPv4 DF flag is set (false for IPv6).
func (p *Packet) DontFragment() bool {
	return !p.ipv6 && p.frame[p.l3Off+6]&0x40 != 0
}

// UDPSrcPort returns the UDP source port.
func (p *Packet) UDPSrcPort() uint16 { return binary.BigEndian.Uint16(p.frame[p.l4Off:]) }

// UDPChecksum returns the UDP checksum field (0 from rxe).
func (p *Packet) UDPChecksum() uint16 { return binary.BigEndian.Uint16(p.frame[p.l4Off+6:]) }

// UDPPayload returns the UDP payload: BTH through ICRC.
func (p *Packet) UDPPayload() []byte { return p.frame[p.bthOff : p.icrcOff+ICRCSize] }

// Opcode returns the BTH opcode.
func (p *Packet) Opcode() Opcode { return p.op }

// BTH returns the BTH.
func (p *Packet) BTH() BTH { return BTH(p.frame[p.bthOff : p.bthOff+BTHSize]) }

// ext returns the extended header h (a single Hdr* bit) of size n, or nil.
func (p *Packet) ext(h Headers, n int) []byte {
	off, ok := p.op.HeaderOffset(h)
	if !ok {
		return nil
	}
	off += p.bthOff
	return p.frame[off : off+n : off+n]
}

// RDETH returns the RDETH, or nil if the opcode carries none.
func (p *Packet) RDETH() RDETH { return p.ext(HdrRDETH, RDETHSize) }

// DETH returns the DETH, or nil if the opcode carries none.
func (p *Packet) DETH() DETH { return p.ext(HdrDETH, DETHSize) }

// XRCETH returns the XRCETH, or nil if the opcode carries none.
func (p *Packet) XRCETH() XRCETH { return p.ext(HdrXRCETH, XRCETHSize) }

// FETH returns the FETH, or nil if the opcode carries none.
func (p *Packet) FETH() FETH { return p.ext(HdrFETH, FETHSize) }

// RETH returns the RETH, or nil if the opcode carries none.
func (p *Packet) RETH() RETH { return p.ext(HdrRETH, RETHSize) }

// AtomicETH returns the AtomicETH, or nil if the opcode carries none.
func (p *Packet) AtomicETH() AtomicETH { return p.ext(HdrAtomicETH, AtomicETHSize) }

// AETH returns the AETH, or nil if the opcode carries none.
func (p *Packet) AETH() AETH { return p.ext(HdrAETH, AETHSize) }

// AtomicAckETH returns the AtomicAckETH, or nil if the opcode carries none.
func (p *Packet) AtomicAckETH() AtomicAckETH { return p.ext(HdrAtomicAckETH, AtomicAckETHSize) }

// ImmDt returns the ImmDt, or nil if the opcode carries none.
func (p *Packet) ImmDt() ImmDt { return p.ext(HdrImmDt, ImmDtSize) }

// IETH returns the IETH, or nil if the opcode carries none.
func (p *Packet) IETH() IETH { return p.ext(HdrIETH, IETHSize) }

// CNPReserved returns the 16 reserved bytes of a CNP, or nil.
func (p *Packet) CNPReserved() []byte { return p.ext(HdrCNPReserved, CNPReservedSize) }

// Payload returns the payload (without pad), aliasing the frame.
func (p *Packet) Payload() []byte { return p.frame[p.payOff : p.payOff+p.payLen : p.payOff+p.payLen] }

// PayloadLen returns the payload length.
func (p *Packet) PayloadLen() int { return p.payLen }

// Pad returns the pad bytes between payload and ICRC.
func (p *Packet) Pad() []byte { return p.frame[p.payOff+p.payLen : p.icrcOff] }

// ICRC returns the ICRC stored in the frame (read little-endian, as rxe
// stores it).
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.frame[p.icrcOff:]) }
