package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/softroce/softroce/ib"
)

// Frame describes a RoCEv2 frame for Build. Extended-header fields are
// used only when BTH.Opcode carries that header; the rest are ignored.
type Frame struct {
	DstMAC, SrcMAC [6]byte // Ethernet destination and source addresses
	// VLAN adds one 802.1Q tag with tag control information VLANTCI (PCP,
	// DEI, VID). rxe never sets PCP itself.
	VLAN    bool
	VLANTCI uint16 // 802.1Q TCI: PCP<<13 | DEI<<12 | VID; used only with VLAN

	// Src and Dst are both IPv4 (Is4) for RoCEv2 over IPv4, or both IPv6.
	// An IPv4-mapped IPv6 address counts as IPv4 (rxe picks IPv4 when the
	// SGID is IPv4-mapped).
	Src, Dst netip.Addr
	// TrafficClass is the IPv4 TOS or IPv6 traffic class: DSCP<<2 | ECN.
	TrafficClass uint8
	// HopLimit is the IPv4 TTL or IPv6 hop limit; rxe uses the route's,
	// normally 64. Zero is sent as zero.
	HopLimit uint8
	// FlowLabel is the IPv6 flow label (20 bits; rxe sends 0). Ignored
	// for IPv4.
	FlowLabel uint32
	// IPID is the IPv4 identification. The builder always sets DF and
	// never fragments, as rxe does.
	IPID uint16
	// SrcPort is the UDP source port. Zero means
	// FlowLabelToUDPSport(FlowLabel); callers mirroring rxe pass the QP's
	// port (GetUDPSport). The destination port is always 4791 and the UDP
	// checksum 0.
	SrcPort uint16

	// BTH is the base transport header. Its PadCnt is ignored: Build sets
	// it from len(Payload).
	BTH          BTHFields
	RDETH        RDETHFields        // reliable datagram extended header: EE context (RD)
	DETH         DETHFields         // datagram extended header: Q_Key and source QP (UD, RD)
	XRCETH       XRCETHFields       // XRC extended header: the destination XRC SRQ number
	FETH         FETHFields         // flush extended header (FLUSH)
	RETH         RETHFields         // RDMA extended header: VA, R_Key, DMA length
	AtomicETH    AtomicETHFields    // atomic extended header: VA, R_Key, swap/add and compare values
	AETH         AETHFields         // ACK extended header: syndrome and MSN
	AtomicAckETH AtomicAckETHFields // original remote value (ATOMIC_ACKNOWLEDGE)
	ImmDt        ImmDtFields        // immediate data (*_WITH_IMMEDIATE)
	IETH         IETHFields         // R_Key to invalidate (SEND_*_WITH_INVALIDATE)

	Payload []byte // the message bytes after the headers, before pad and ICRC

	// NoICRC makes Build leave the ICRC zero instead of computing it, for
	// a link that carries the frame with "ICRC not computed" and computes
	// it where the frame becomes observable (link.PipeEnd.WriteNoICRC),
	// as a virtual NIC skips checksums nobody will see. SealICRC computes
	// it later.
	NoICRC bool
}

// Len returns the length of the frame Build would write for f: Ethernet,
// optional VLAN tag, IP, UDP, BTH, extended headers, payload, pad and ICRC.
// It returns 0 if f's opcode is not in the table.
func (f *Frame) Len() int {
	hl := f.BTH.Opcode.HeaderLen()
	if hl == 0 {
		return 0
	}
	n := EthernetSize + UDPSize + hl + len(f.Payload) + padLen(len(f.Payload)) + ICRCSize
	if f.VLAN {
		n += VLANTagSize
	}
	if f.isIPv4() {
		n += IPv4Size
	} else {
		n += IPv6Size
	}
	return n
}

// PayloadOffset returns where Build puts the payload in the frame: after
// Ethernet, the optional VLAN tag, IP, UDP, the BTH and the extended
// headers of f's opcode. It returns 0 if the opcode is not in the table.
// A sender can gather the payload straight into its frame buffer at this
// offset and pass that slice as f.Payload: Build then copies nothing.
func (f *Frame) PayloadOffset() int {
	hl := f.BTH.Opcode.HeaderLen()
	if hl == 0 {
		return 0
	}
	n := EthernetSize + UDPSize + hl
	if f.VLAN {
		n += VLANTagSize
	}
	if f.isIPv4() {
		return n + IPv4Size
	}
	return n + IPv6Size
}

func (f *Frame) isIPv4() bool { return f.Src.Unmap().Is4() }

// padLen returns the pad that makes n a multiple of 4 (IBTA §9.2: PadCnt).
func padLen(n int) int { return -n & 3 }

// Build writes the frame f describes into buf and returns its length. It
// fills in every length, the IPv4 header checksum, PadCnt, zero pad bytes
// and the ICRC, and allocates nothing. It fails with ErrShortBuffer if buf
// is shorter than f.Len(), ErrMalformed if the opcode is unknown, the
// addresses are not both IPv4 or both IPv6, or the datagram exceeds 65535
// bytes. Mirrors what rxe_init_packet, prepare_ipv4_hdr / prepare_ipv6_hdr
// and rxe_icrc_generate produce.
func Build(buf []byte, f *Frame) (int, error) {
	op := f.BTH.Opcode
	hl := op.HeaderLen()
	if hl == 0 {
		return 0, ErrMalformed
	}
	v4 := f.isIPv4()
	if v4 != f.Dst.Unmap().Is4() || (!v4 && !f.Src.Is6()) {
		return 0, ErrMalformed
	}
	pay := len(f.Payload)
	pad := padLen(pay)
	udpLen := UDPSize + hl + pay + pad + ICRCSize
	if udpLen > 0xffff-IPv6Size {
		return 0, ErrMalformed
	}
	n := EthernetSize + IPv6Size + udpLen // f.Len()
	if v4 {
		n = EthernetSize + IPv4Size + udpLen
	}
	if f.VLAN {
		n += VLANTagSize
	}
	if len(buf) < n {
		return 0, ErrShortBuffer
	}
	b := buf[:n]

	// Ethernet and VLAN.
	copy(b[0:6], f.DstMAC[:])
	copy(b[6:12], f.SrcMAC[:])
	off := 12
	if f.VLAN {
		binary.BigEndian.PutUint16(b[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[14:], f.VLANTCI)
		off += VLANTagSize
	}
	l3 := off + 2
	var l4 int
	if v4 {
		binary.BigEndian.PutUint16(b[off:], EtherTypeIPv4)
		h := b[l3 : l3+IPv4Size]
		s, d := f.Src.Unmap().As4(), f.Dst.Unmap().As4()
		src, dst := binary.BigEndian.Uint32(s[:]), binary.BigEndian.Uint32(d[:])
		w0 := 0x4500 | uint32(f.TrafficClass)
		tot := uint32(IPv4Size + udpLen)
		w4 := uint32(f.HopLimit)<<8 | IPProtocolUDP
		binary.BigEndian.PutUint32(h[0:], w0<<16|tot)
		binary.BigEndian.PutUint32(h[4:], uint32(f.IPID)<<16|0x4000) // DF
		// The header checksum from the words just written, without
		// reading them back.
		sum := w0 + tot + uint32(f.IPID) + 0x4000 + w4 + src>>16 + src&0xffff + dst>>16 + dst&0xffff
		binary.BigEndian.PutUint32(h[8:], w4<<16|uint32(foldChecksum(sum)))
		binary.BigEndian.PutUint32(h[12:], src)
		binary.BigEndian.PutUint32(h[16:], dst)
		l4 = l3 + IPv4Size
	} else {
		binary.BigEndian.PutUint16(b[off:], EtherTypeIPv6)
		h := b[l3 : l3+IPv6Size]
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = IPProtocolUDP
		h[7] = f.HopLimit
		s, d := f.Src.As16(), f.Dst.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		l4 = l3 + IPv6Size
	}

	// UDP.
	u := b[l4 : l4+UDPSize]
	sp := f.SrcPort
	if sp == 0 {
		sp = FlowLabelToUDPSport(f.FlowLabel)
	}
	binary.BigEndian.PutUint16(u[0:], sp)
	binary.BigEndian.PutUint16(u[2:], ib.RoCEv2UDPPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0

	// BTH and extended headers.
	bth := l4 + UDPSize
	f.encodeTransportHeaders(b[bth : bth+hl])
	BTH(b[bth:]).SetPadCnt(uint8(pad))

	// Payload, pad, ICRC.
	po := bth + hl
	if pay > 0 && &b[po] != &f.Payload[0] { // in place already: see PayloadOffset
		copy(b[po:], f.Payload)
	}
	if pad > 0 { // clear of nothing is still a call
		clear(b[po+pay : po+pay+pad])
	}
	icrcOff := n - ICRCSize
	if f.NoICRC {
		binary.LittleEndian.PutUint32(b[icrcOff:], 0)
		return n, nil
	}
	binary.LittleEndian.PutUint32(b[icrcOff:], computeICRC(b, l3, l4, icrcOff, !v4))
	return n, nil
}

// EncodeTransportHeaders writes the BTH and the extended headers f's
// opcode carries into b, as Build does (but with f.BTH.PadCnt as given), and
// returns their length, f.BTH.Opcode.HeaderLen(). It fails with
// ErrMalformed for an unknown opcode and ErrShortBuffer when b is shorter
// than the headers.
func (f *Frame) EncodeTransportHeaders(b []byte) (int, error) {
	hl := f.BTH.Opcode.HeaderLen()
	if hl == 0 {
		return 0, ErrMalformed
	}
	if len(b) < hl {
		return 0, ErrShortBuffer
	}
	f.encodeTransportHeaders(b[:hl])
	return hl, nil
}

// encodeTransportHeaders writes the BTH and extended headers into b, which
// is exactly the opcode's header length.
func (f *Frame) encodeTransportHeaders(b []byte) {
	BTH(b).Encode(&f.BTH)
	in := &opTable[f.BTH.Opcode]
	h := in.headers
	if h&HdrRDETH != 0 {
		RDETH(b[in.offsets[0]:]).Encode(&f.RDETH)
	}
	if h&HdrDETH != 0 {
		DETH(b[in.offsets[1]:]).Encode(&f.DETH)
	}
	if h&HdrXRCETH != 0 {
		XRCETH(b[in.offsets[2]:]).Encode(&f.XRCETH)
	}
	if h&HdrFETH != 0 {
		FETH(b[in.offsets[3]:]).Encode(&f.FETH)
	}
	if h&HdrRETH != 0 {
		RETH(b[in.offsets[4]:]).Encode(&f.RETH)
	}
	if h&HdrAtomicETH != 0 {
		AtomicETH(b[in.offsets[5]:]).Encode(&f.AtomicETH)
	}
	if h&HdrAETH != 0 {
		AETH(b[in.offsets[6]:]).Encode(&f.AETH)
	}
	if h&HdrAtomicAckETH != 0 {
		AtomicAckETH(b[in.offsets[7]:]).Encode(&f.AtomicAckETH)
	}
	if h&HdrImmDt != 0 {
		ImmDt(b[in.offsets[8]:]).Encode(&f.ImmDt)
	}
	if h&HdrIETH != 0 {
		IETH(b[in.offsets[9]:]).Encode(&f.IETH)
	}
	if h&HdrCNPReserved != 0 {
		clear(b[in.offsets[10] : int(in.offsets[10])+CNPReservedSize])
	}
}

// ipv4Checksum returns the Internet checksum (RFC 1071) of an IPv4 header
// whose checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	return foldChecksum(s)
}

// foldChecksum returns the Internet checksum (RFC 1071) whose sum of
// 16-bit words is s: its carries folded into 16 bits, complemented.
func foldChecksum(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// Fields fills f with every field of p, so that Build(buf, f) reproduces
// p's frame byte for byte when p was built the way rxe builds frames (DF
// set, UDP checksum 0, zero pad, a non-zero UDP source port, the UDP length
// filling the IP datagram; Ethernet padding is dropped). f.Payload aliases
// p's frame. After DecodeTransport only the transport fields are set.
func (p *Packet) Fields(f *Frame) {
	*f = Frame{}
	if p.l3Off >= 0 {
		f.DstMAC, f.SrcMAC = p.EthDst(), p.EthSrc()
		if p.l3Off == 0 {
			f.DstMAC, f.SrcMAC = [6]byte{}, [6]byte{}
		}
		f.VLAN, f.VLANTCI = p.vlan, p.vlanTCI
		f.Src, f.Dst = p.Src(), p.Dst()
		f.TrafficClass, f.HopLimit = p.TrafficClass(), p.HopLimit()
		f.FlowLabel, f.IPID = p.FlowLabel(), p.IPID()
		f.SrcPort = p.UDPSrcPort()
	}
	f.BTH = p.BTH().Fields()
	if h := p.RDETH(); h != nil {
		f.RDETH = h.Fields()
	}
	if h := p.DETH(); h != nil {
		f.DETH = h.Fields()
	}
	if h := p.XRCETH(); h != nil {
		f.XRCETH = h.Fields()
	}
	if h := p.FETH(); h != nil {
		f.FETH = h.Fields()
	}
	if h := p.RETH(); h != nil {
		f.RETH = h.Fields()
	}
	if h := p.AtomicETH(); h != nil {
		f.AtomicETH = h.Fields()
	}
	if h := p.AETH(); h != nil {
		f.AETH = h.Fields()
	}
	if h := p.AtomicAckETH(); h != nil {
		f.AtomicAckETH = h.Fields()
	}
	if h := p.ImmDt(); h != nil {
		f.ImmDt = h.Fields()
	}
	if h := p.IETH(); h != nil {
		f.IETH = h.Fields()
	}
	f.Payload = p.Payload()
}

// BuildNext writes into buf the frame that follows prev in a message and
// returns its length: the frame Build would write for prev's fields with
// only the IPv4 identification (ignored for IPv6), the BTH's PSN and its
// AckReq bit changed, and the same opcode and payload length, as the
// middle packets of a message are (rxe's init_req_packet fills the same
// headers for each). prev must be a frame Build wrote. The payload is the
// caller's: bytes [PayloadOffset, len(prev)-pad-ICRCSize) of buf are not
// written, so that a sender can gather the payload into buf first (or
// leave it unset when it travels by reference); the pad is zeroed and the
// ICRC computed over buf as it then is, or left zero with noICRC. Copying
// the headers and patching three fields costs a fraction of Build's
// encoding. It fails with ErrShortBuffer if buf is shorter than prev and
// ErrMalformed if prev is not a RoCEv2 frame with room for its headers.
// NextFrames does the same for many frames, examining prev once.
func BuildNext(buf, prev []byte, ipID uint16, psn uint32, ackReq, noICRC bool) (int, error) {
	var nf NextFrames
	if err := nf.Reset(prev); err != nil {
		return 0, err
	}
	return nf.Build(buf, ipID, psn, ackReq, noICRC)
}

// NextFrames builds the frames that follow one frame of a message, each
// as BuildNext would, having examined that frame once (Reset). The zero
// value builds nothing (ErrMalformed).
type NextFrames struct {
	prev    []byte
	l3, l4  int // the IP and UDP headers
	po, pad int // the payload offset, the pad's length
	v6      bool
}

// Reset makes prev the frame the next ones follow, failing with
// ErrMalformed as BuildNext does. The NextFrames keeps prev: it must stay
// unchanged while Build is used.
func (nf *NextFrames) Reset(prev []byte) error {
	*nf = NextFrames{}
	n := len(prev)
	if n < EthernetSize+VLANTagSize {
		return ErrMalformed
	}
	l3 := EthernetSize
	et := binary.BigEndian.Uint16(prev[12:])
	if et == EtherTypeVLAN {
		l3 += VLANTagSize
		et = binary.BigEndian.Uint16(prev[16:])
	}
	var l4 int
	switch et {
	case EtherTypeIPv4:
		l4 = l3 + IPv4Size
	case EtherTypeIPv6:
		l4 = l3 + IPv6Size
	default:
		return ErrMalformed
	}
	bth := l4 + UDPSize
	if n < bth+BTHSize+ICRCSize {
		return ErrMalformed
	}
	t := BTH(prev[bth:])
	hl := t.Opcode().HeaderLen()
	pad := int(t.PadCnt())
	po := bth + hl
	if hl == 0 || po+pad > n-ICRCSize {
		return ErrMalformed
	}
	*nf = NextFrames{prev: prev, l3: l3, l4: l4, po: po, pad: pad, v6: et == EtherTypeIPv6}
	return nil
}

// Len returns the length of the frames Build writes (prev's), 0 for the
// zero NextFrames.
func (nf *NextFrames) Len() int { return len(nf.prev) }

// Build writes into buf the frame BuildNext(buf, prev, ipID, psn, ackReq,
// noICRC) writes for the frame of the last Reset, and returns its length.
func (nf *NextFrames) Build(buf []byte, ipID uint16, psn uint32, ackReq, noICRC bool) (int, error) {
	n := len(nf.prev)
	if nf.po == 0 {
		return 0, ErrMalformed
	}
	if len(buf) < n {
		return 0, ErrShortBuffer
	}
	b := buf[:n]
	copy(b[:nf.po], nf.prev[:nf.po])
	if !nf.v6 {
		// The header checksum updated for the new identification
		// (RFC 1624, eqn. 3): HC' = ~(~HC + ~m + m').
		h := b[nf.l3 : nf.l3+IPv4Size]
		m := binary.BigEndian.Uint16(h[4:])
		hc := binary.BigEndian.Uint16(h[10:])
		binary.BigEndian.PutUint16(h[4:], ipID)
		binary.BigEndian.PutUint16(h[10:], foldChecksum(uint32(^hc)+uint32(^m)+uint32(ipID)))
	}
	t := BTH(b[nf.l4+UDPSize:])
	t.SetPSN(psn)
	t.SetAckReq(ackReq)
	icrcOff := n - ICRCSize
	if nf.pad > 0 {
		clear(b[icrcOff-nf.pad : icrcOff])
	}
	if noICRC {
		binary.LittleEndian.PutUint32(b[icrcOff:], 0)
		return n, nil
	}
	binary.LittleEndian.PutUint32(b[icrcOff:], computeICRC(b, nf.l3, nf.l4, icrcOff, nf.v6))
	return n, nil
}
