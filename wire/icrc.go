package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
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
// file), in one CRC pass (updateIEEE) over the unmasked bytes from the IP
// header to the ICRC.
//
// CRC-32 is linear: a byte b_i at position i of the covered bytes, changed
// by d, changes the CRC register after the last byte by S^(n-i)(d), where S
// is the (invertible) step of the register over one zero byte and n the
// number of bytes; and the register's initial value r changes it by
// S^n(r). So the masked fields, instead of being overwritten with ones in a
// copy, are folded into the initial value: with d_i = frame byte ^ masked
// byte, starting from r ^ XOR_i S^-i(d_i) over the frame's own bytes gives
// the masked CRC. S^-i(d) depends only on the field's position from the IP
// header, not on the length of the frame: icrcFix4 and icrcFix6 hold it
// for every value of each masked byte.
func specICRC(frame []byte, l3Off, l4Off, icrcOff int, v6 bool) uint32 {
	h := frame[l3Off:icrcOff]
	// Where the CPU allows, the pass sets the masked bits itself, in its
	// registers; IPv6's reach byte 52, so only when the pass's padding
	// leaves them room (see updateIEEEOnes).
	ones := &icrcOnes4
	if v6 {
		ones = &icrcOnes6
		if -len(h)&15 > 64-(IPv6Size+UDPSize+bthResv8a+1) {
			ones = nil
		}
	}
	if ones != nil {
		if crc, ok := updateIEEEOnes(icrcSeed, h, ones); ok {
			return crc
		}
	}
	var fix uint32
	if v6 {
		_ = h[IPv6Size+UDPSize+BTHSize-1]
		t := &icrcFix6
		fix = t[0][^h[0]&0x0f] ^ t[1][^h[1]] ^ t[2][^h[2]] ^ t[3][^h[3]] ^ t[4][^h[7]] ^
			t[5][^h[IPv6Size+6]] ^ t[6][^h[IPv6Size+7]] ^ t[7][^h[IPv6Size+UDPSize+bthResv8a]]
	} else {
		_ = h[IPv4Size+UDPSize+BTHSize-1]
		t := &icrcFix4
		fix = t[0][^h[1]] ^ t[1][^h[8]] ^ t[2][^h[10]] ^ t[3][^h[11]] ^
			t[4][^h[IPv4Size+6]] ^ t[5][^h[IPv4Size+7]] ^ t[6][^h[IPv4Size+UDPSize+bthResv8a]]
	}
	// The register is the complement of updateIEEE's argument.
	return updateIEEE(icrcSeed^fix, h)
}

// slicing8 holds the tables of a slicing-by-8 CRC-32 (IEEE, reflected):
// slicing8[j][b] is the register after byte b and j zero bytes, from a
// zero register.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.MakeTable(crc32.IEEE)
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// updateIEEEGeneric is crc32.Update(crc, crc32.IEEETable, p) with the
// bytes after the last multiple of 16 added by updateTail: hash/crc32's
// vectorised pass takes multiples of 16 bytes and adds the rest one byte
// at a time.
func updateIEEEGeneric(crc uint32, p []byte) uint32 {
	n := len(p) &^ 15
	return updateTail(crc32.Update(crc, crc32.IEEETable, p[:n]), p[n:])
}

// updateTail adds p (less than 16 bytes) to crc with the semantics of
// crc32.Update: 8 and 4 bytes at a time, each with independent table
// lookups, rather than crc32's one serial lookup per byte below 16 bytes.
func updateTail(crc uint32, p []byte) uint32 {
	t := &slicing8
	crc = ^crc
	if len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	if len(p) >= 4 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][crc>>24] ^ t[1][crc>>16&0xff] ^ t[2][crc>>8&0xff] ^ t[3][crc&0xff]
		p = p[4:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// icrcMasked4 and icrcMasked6 are the positions, from the IP header, of the
// bytes the ICRC masks (all their bits, except the first byte of IPv6,
// whose low 4 bits only are traffic class and flow label), in the order
// specICRC indexes icrcFix4 and icrcFix6.
var (
	icrcMasked4 = [...]int{1, 8, 10, 11, IPv4Size + 6, IPv4Size + 7, IPv4Size + UDPSize + bthResv8a}
	icrcMasked6 = [...]int{0, 1, 2, 3, 7, IPv6Size + 6, IPv6Size + 7, IPv6Size + UDPSize + bthResv8a}
)

// icrcOnes4 and icrcOnes6 have the bits the ICRC masks set, from the IP
// header on.
var (
	icrcOnes4 = func() (m [64]byte) {
		for _, i := range icrcMasked4 {
			m[i] = 0xff
		}
		return m
	}()
	icrcOnes6 = func() (m [64]byte) {
		for _, i := range icrcMasked6 {
			m[i] = 0xff
		}
		m[0] = 0x0f // the version stays
		return m
	}()
)

// icrcFix4[k][d] (icrcFix6 for IPv6) is S^-i(d): the change to the CRC
// register before the IP header equivalent to changing the byte at
// position i = icrcMasked4[k] by d (see specICRC).
var (
	icrcFix4 [len(icrcMasked4)][256]uint32
	icrcFix6 [len(icrcMasked6)][256]uint32
)

func init() {
	icrcFixTables(icrcFix4[:], icrcMasked4[:])
	icrcFixTables(icrcFix6[:], icrcMasked6[:])
}

// icrcFixTables fills out[k] with S^-pos[k] of every byte value.
func icrcFixTables(out [][256]uint32, pos []int) {
	for j, i := range pos {
		// S^-i is linear: compute it on the 8 bits and combine.
		var bit [8]uint32
		for b := range bit {
			x := uint32(1) << b
			for range i {
				x = crcUnstep(x)
			}
			bit[b] = x
		}
		for d := 1; d < 256; d++ {
			low := d & -d
			out[j][d] = out[j][d^low] ^ bit[bits.TrailingZeros(uint(low))]
		}
	}
}

// crcUnstep is S^-1, the inverse of the CRC register's step over one zero
// byte, S(x) = tab[x&0xff] ^ x>>8 (tab = crc32.IEEETable). The top bytes of
// the table's entries are all distinct, so S^-1(y) = (y^tab[k])<<8 | k with
// k the entry whose top byte is y's.
func crcUnstep(y uint32) uint32 {
	k := crcByTop[y>>24]
	return (y^crc32.IEEETable[k])<<8 | uint32(k)
}

// crcByTop[t] is the index of crc32.IEEETable's entry whose top byte is t.
var crcByTop = func() (b [256]byte) {
	for k, v := range crc32.IEEETable {
		b[v>>24] = byte(k)
	}
	return b
}()

// specFlushOK reports whether frame is an RC FLUSH carrying the
// specification's ICRC (which computeICRC does not give it).
func specFlushOK(frame []byte, l3Off, l4Off, icrcOff int, v6 bool, icrc uint32) bool {
	return frame[l4Off+UDPSize] == byte(RCFlush) && specICRC(frame, l3Off, l4Off, icrcOff, v6) == icrc
}

// icrcBounds checks the IP and UDP headers at l3Off just enough to compute
// an ICRC: IP version, header and datagram lengths, and a UDP payload of at
// least a BTH and an ICRC. It returns the UDP offset and the ICRC offset.
func icrcBounds(frame []byte, l3Off int) (l4Off, icrcOff int, v6 bool, err error) {
	if l3Off < 0 || l3Off >= len(frame) {
		return 0, 0, false, ErrTruncated
	}
	// The usual frame first: its IP datagram, and the UDP datagram in it,
	// end where the frame ends. The offsets returned then come from the
	// frame's length, not from the length fields: the CRC pass need not
	// wait for their loads, only the branches that check them do. The
	// result is icrcBoundsChecked's.
	if n := len(frame) - l3Off; n >= IPv6Size+UDPSize+BTHSize+ICRCSize {
		h := frame[l3Off : l3Off+IPv6Size]
		w := binary.LittleEndian.Uint64(h)
		switch {
		case byte(w) == 0x45 && w>>48&0xff3f == 0 && h[9] == IPProtocolUDP &&
			int(bits.ReverseBytes16(uint16(w>>16))) == n &&
			int(binary.BigEndian.Uint16(frame[l3Off+IPv4Size+4:])) == n-IPv4Size:
			// IPv4 without options or fragmentation (ipBounds' checks).
			return l3Off + IPv4Size, len(frame) - ICRCSize, false, nil
		case byte(w)>>4 == 6 && h[6] == IPProtocolUDP &&
			int(bits.ReverseBytes16(uint16(w>>32))) == n-IPv6Size &&
			int(binary.BigEndian.Uint16(frame[l3Off+IPv6Size+4:])) == n-IPv6Size:
			return l3Off + IPv6Size, len(frame) - ICRCSize, true, nil
		}
	}
	return icrcBoundsChecked(frame, l3Off)
}

// icrcBoundsChecked is icrcBounds for any frame: each offset follows from
// the length fields.
func icrcBoundsChecked(frame []byte, l3Off int) (l4Off, icrcOff int, v6 bool, err error) {
	if l3Off < 0 || l3Off >= len(frame) {
		return 0, 0, false, ErrTruncated
	}
	v6 = frame[l3Off]>>4 == 6
	l4, end, _, bad := ipBounds(frame, l3Off, v6)
	if bad != nil {
		return 0, 0, false, bad.err
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

// icrcUsual returns the ICRC of the usual frame, in as few instructions
// as possible ahead of the CRC pass, and true; or false for any other frame
// (which icrcBounds and computeICRC then take). The usual frame is IPv4
// without options or fragmentation or IPv6 (ipBounds' checks), its IP and
// UDP datagrams end where it ends, it is not an RC FLUSH (rxe's ICRC
// differs, see computeICRC), and the pass can set its masked bits itself
// (updateIEEEOnes; for IPv6, when the pass's padding leaves them room).
func icrcUsual(frame []byte, l3Off int) (uint32, bool) {
	n := len(frame) - l3Off
	if l3Off < 0 || n < IPv6Size+UDPSize+BTHSize+ICRCSize {
		return 0, false
	}
	h := frame[l3Off:]
	w := binary.LittleEndian.Uint64(h)
	ones := &icrcOnes4
	if byte(w) == 0x45 {
		if w>>48&0xff3f != 0 || h[9] != IPProtocolUDP ||
			int(bits.ReverseBytes16(uint16(w>>16))) != n ||
			int(binary.BigEndian.Uint16(h[IPv4Size+4:])) != n-IPv4Size ||
			h[IPv4Size+UDPSize] == byte(RCFlush) {
			return 0, false
		}
	} else {
		if byte(w)>>4 != 6 || h[6] != IPProtocolUDP ||
			int(bits.ReverseBytes16(uint16(w>>32))) != n-IPv6Size ||
			int(binary.BigEndian.Uint16(h[IPv6Size+4:])) != n-IPv6Size ||
			h[IPv6Size+UDPSize] == byte(RCFlush) ||
			-(n-ICRCSize)&15 > 64-(IPv6Size+UDPSize+bthResv8a+1) {
			return 0, false
		}
		ones = &icrcOnes6
	}
	return updateIEEEOnes(icrcSeed, h[:n-ICRCSize], ones)
}

// SealICRC computes the ICRC of the RoCEv2 frame whose IP header starts at
// l3Off and stores it (little-endian) in the last 4 bytes of the UDP
// datagram. The IP and UDP lengths must be final. It returns ErrTruncated
// or ErrMalformed when those headers do not describe a RoCEv2 datagram that
// fits in frame. Mirrors rxe_icrc_generate.
func SealICRC(frame []byte, l3Off int) error {
	if crc, ok := icrcUsual(frame, l3Off); ok {
		binary.LittleEndian.PutUint32(frame[len(frame)-ICRCSize:], crc)
		return nil
	}
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
	if crc, ok := icrcUsual(frame, l3Off); ok {
		if crc != binary.LittleEndian.Uint32(frame[len(frame)-ICRCSize:]) {
			return ErrBadICRC
		}
		return nil
	}
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
