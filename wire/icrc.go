package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC of RoCEv2 (IBTA Annex A17.3.3; rxe_icrc.c rxe_icrc_hdr and
// rxe_icrc_generate): CRC-32 (IEEE 802.3, as hash/crc32.ChecksumIEEE) over
//
//  1. 8 bytes of 0xff standing in for the masked LRH of InfiniBand,
//  2. the IP header with the variant fields set to all ones: IPv4 TOS, TTL
//     and header checksum; IPv6 traffic class, flow label and hop limit,
//  3. the UDP header with its checksum set to all ones,
//  4. the BTH with byte 4 (FECN, BECN, resv6; resv8a in IB) set to all ones,
//  5. everything after the BTH up to the ICRC: extended headers, payload,
//     pad,
//
// stored little-endian in the 4 bytes after the pad. The Ethernet header and
// VLAN tag are not covered.

// icrcSeed is crc32.ChecksumIEEE of 8 bytes of 0xff: the CRC after the LRH
// placeholder (the kernel's raw register value 0xdebb20e3, inverted).
const icrcSeed = 0x2144df1c

// maxMaskedHeaders is the most header bytes the ICRC masks: IPv6 + UDP + BTH.
const maxMaskedHeaders = IPv6Size + UDPSize + BTHSize

// computeICRC returns the ICRC of the frame whose IP header is at l3Off, UDP
// header at l4Off, and ICRC at icrcOff, as rxe computes it: the
// specification's (specICRC), except for RC FLUSH, whose ICRC rxe's opcode
// table makes cover the BTH, FETH and RETH (and any pad) a second time,
// unmasked: rxe_opcode.c (kernels 6.2 to at least 6.12) gives RC FLUSH no
// payload offset, so payload_addr is the BTH and rxe_icrc_generate and
// rxe_icrc_check run the CRC over the whole transport header again after
// the headers. The kernel drops a FLUSH whose ICRC lacks that (counting an
// ICRC error), so FLUSH is sealed rxe's way; VerifyICRC accepts either
// form for FLUSH (a peer that follows the specification computes the other
// one). The offsets must be valid (checked by icrcBounds or Decode).
func computeICRC(frame []byte, l3Off, l4Off, icrcOff int, v6 bool) uint32 {
	crc := specICRC(frame, l3Off, l4Off, icrcOff, v6)
	if bth := l4Off + UDPSize; frame[bth] == byte(RCFlush) {
		crc = crc32.Update(crc, crc32.IEEETable, frame[bth:icrcOff])
	}
	return crc
}

// specICRC is the ICRC the specification defines (see the top of this
// file).
func specICRC(frame []byte, l3Off, l4Off, icrcOff int, v6 bool) uint32 {
	var hdr [maxMaskedHeaders]byte
	bth := l4Off + UDPSize
	n := copy(hdr[:], frame[l3Off:bth+BTHSize])
	ip := l4Off - l3Off
	if v6 {
		hdr[0] |= 0x0f // traffic class (high nibble) ...
		hdr[1] = 0xff  // ... and flow label
		hdr[2] = 0xff
		hdr[3] = 0xff
		hdr[7] = 0xff // hop limit
	} else {
		hdr[1] = 0xff  // TOS
		hdr[8] = 0xff  // TTL
		hdr[10] = 0xff // header checksum
		hdr[11] = 0xff
	}
	hdr[ip+6] = 0xff // UDP checksum
	hdr[ip+7] = 0xff
	hdr[ip+UDPSize+bthResv8a] = 0xff // FECN, BECN, resv6
	crc := updateSmall(icrcSeed, &hdr, n)
	return crc32.Update(crc, crc32.IEEETable, frame[bth+BTHSize:icrcOff])
}

// specFlushOK reports whether frame is an RC FLUSH carrying the
// specification's ICRC (which computeICRC does not give it).
func specFlushOK(frame []byte, l3Off, l4Off, icrcOff int, v6 bool, icrc uint32) bool {
	return frame[l4Off+UDPSize] == byte(RCFlush) && specICRC(frame, l3Off, l4Off, icrcOff, v6) == icrc
}

// slicing8 holds the tables of a slicing-by-8 CRC-32 (IEEE, reflected).
// hash/crc32 would do, but its Update lets its argument escape, and the
// masked header copy lives on the stack.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.MakeTable(crc32.IEEE)
	for i := 0; i < 256; i++ {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// updateSmall adds p[:n] to crc with the semantics of crc32.Update.
func updateSmall(crc uint32, p *[maxMaskedHeaders]byte, n int) uint32 {
	t := &slicing8
	crc = ^crc
	i := 0
	for ; i+8 <= n; i += 8 {
		crc ^= binary.LittleEndian.Uint32(p[i:])
		crc = t[0][p[i+7]] ^ t[1][p[i+6]] ^ t[2][p[i+5]] ^ t[3][p[i+4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
	}
	for ; i < n; i++ {
		crc = t[0][byte(crc)^p[i]] ^ crc>>8
	}
	return ^crc
}

// icrcBounds checks the IP and UDP headers at l3Off just enough to compute
// an ICRC: IP version, header and datagram lengths, and a UDP payload of at
// least a BTH and an ICRC. It returns the UDP offset and the ICRC offset.
func icrcBounds(frame []byte, l3Off int) (l4Off, icrcOff int, v6 bool, err error) {
	if l3Off < 0 || l3Off >= len(frame) {
		return 0, 0, false, ErrTruncated
	}
	var p Packet
	p.frame = frame
	v6 = frame[l3Off]>>4 == 6
	l4, end, perr := p.ipBounds(l3Off, v6)
	if perr != nil {
		return 0, 0, false, p.err.Err
	}
	if end-l4 < UDPSize {
		return 0, 0, false, ErrTruncated
	}
	ul := int(binary.BigEndian.Uint16(frame[l4+4:]))
	if ul > end-l4 {
		return 0, 0, false, ErrMalformed
	}
	if ul < UDPSize+BTHSize+ICRCSize {
		return 0, 0, false, ErrTruncated
	}
	return l4, l4 + ul - ICRCSize, v6, nil
}

// SealICRC computes the ICRC of the RoCEv2 frame whose IP header starts at
// l3Off and stores it (little-endian) in the last 4 bytes of the UDP
// datagram. The IP and UDP lengths must be final. It returns ErrTruncated
// or ErrMalformed when those headers do not describe a RoCEv2 datagram that
// fits in frame. Mirrors rxe_icrc_generate.
func SealICRC(frame []byte, l3Off int) error {
	l4, icrcOff, v6, err := icrcBounds(frame, l3Off)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(frame[icrcOff:], computeICRC(frame, l3Off, l4, icrcOff, v6))
	return nil
}

// VerifyICRC checks the ICRC of the RoCEv2 frame whose IP header starts at
// l3Off. It returns nil, ErrBadICRC, or ErrTruncated/ErrMalformed when the
// headers do not describe a RoCEv2 datagram that fits in frame. Mirrors
// rxe_icrc_check.
func VerifyICRC(frame []byte, l3Off int) error {
	l4, icrcOff, v6, err := icrcBounds(frame, l3Off)
	if err != nil {
		return err
	}
	got := binary.LittleEndian.Uint32(frame[icrcOff:])
	if computeICRC(frame, l3Off, l4, icrcOff, v6) != got {
		if !specFlushOK(frame, l3Off, l4, icrcOff, v6, got) {
			return ErrBadICRC
		}
	}
	return nil
}

// ComputeICRC returns the ICRC p's frame should carry.
// It returns 0 after DecodeTransport, which saw no IP header.
func (p *Packet) ComputeICRC() uint32 {
	if p.l3Off < 0 {
		return 0
	}
	return computeICRC(p.frame, p.l3Off, p.l4Off, p.icrcOff, p.ipv6)
}

// VerifyICRC checks p's ICRC: nil or ErrBadICRC (ErrMalformed after
// DecodeTransport, which saw no IP header).
func (p *Packet) VerifyICRC() error {
	if p.l3Off < 0 {
		return ErrMalformed
	}
	if p.ComputeICRC() != p.ICRC() {
		if !specFlushOK(p.frame, p.l3Off, p.l4Off, p.icrcOff, p.ipv6, p.ICRC()) {
			return ErrBadICRC
		}
	}
	return nil
}

// SealICRC recomputes and stores p's ICRC, after a change to the frame's
// covered fields (no-op after DecodeTransport).
func (p *Packet) SealICRC() {
	if p.l3Off < 0 {
		return
	}
	binary.LittleEndian.PutUint32(p.frame[p.icrcOff:], p.ComputeICRC())
}
