package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/wire"
)

// headroom is the space received payloads are read at: room for the
// largest header the link writes in front of them (Ethernet, IPv6, UDP).
const headroom = wire.EthernetSize + wire.IPv6Size + wire.UDPSize

// minPayload is the shortest datagram the link hands up: a BTH and an ICRC.
const minPayload = wire.BTHSize + wire.ICRCSize

// rxMeta is what the socket tells about one received datagram.
type rxMeta struct {
	src, dst netip.AddrPort
	tos, ttl uint8
	seg      int // the datagram size of a UDP GRO train; 0 for one datagram
}

// synthesize writes the Ethernet, IP and UDP headers in front of the n
// payload bytes at b[off:] and returns where the frame starts; off must
// leave room for them (headroom always does). The
// IPv4 header carries identification 0 and DF, as this link's sender puts
// on the wire; the UDP checksum is 0 (masked by the ICRC, not checked by
// rxe). The addresses must both be IPv4 (or IPv4-mapped) or both IPv6.
func synthesize(b []byte, off, n int, m *rxMeta) (start int) {
	src, dst := m.src.Addr().Unmap(), m.dst.Addr().Unmap()
	l4 := off - wire.UDPSize
	u := b[l4:off]
	binary.BigEndian.PutUint16(u[0:], m.src.Port())
	binary.BigEndian.PutUint16(u[2:], m.dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(wire.UDPSize+n))
	u[6], u[7] = 0, 0
	var l3 int
	var etype uint16
	if src.Is4() {
		l3 = l4 - wire.IPv4Size
		etype = wire.EtherTypeIPv4
		h := b[l3:l4]
		h[0] = 0x45
		h[1] = m.tos
		binary.BigEndian.PutUint16(h[2:], uint16(wire.IPv4Size+wire.UDPSize+n))
		binary.BigEndian.PutUint16(h[4:], 0)      // identification: see the package doc
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
		h[8] = m.ttl
		h[9] = wire.IPProtocolUDP
		h[10], h[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
	} else {
		l3 = l4 - wire.IPv6Size
		etype = wire.EtherTypeIPv6
		h := b[l3:l4]
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(m.tos)<<20)
		binary.BigEndian.PutUint16(h[4:], uint16(wire.UDPSize+n))
		h[6] = wire.IPProtocolUDP
		h[7] = m.ttl
		s, d := src.As16(), dst.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
	}
	start = l3 - wire.EthernetSize
	e := b[start:l3]
	copy(e[0:6], LocalMAC[:])
	copy(e[6:12], PeerMAC[:])
	binary.BigEndian.PutUint16(e[12:], etype)
	return start
}

func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// txMeta is what a frame asks of the socket that sends it.
type txMeta struct {
	src, dst netip.Addr
	dport    uint16
	tos, ttl uint8
	// frame is the prepared frame (in the scratch space), l3 where its
	// IP header starts and icrc where its ICRC is, for setIPID.
	frame    []byte
	l3, icrc int
}

// setIPID gives the prepared IPv4 frame of m, sealed for identification
// 0, the identification id and its ICRC: the kernel numbers the segments
// of one UDP GSO send id 0, 1, 2, ... (inet_gso_segment counts up from the
// first segment's). Below MaxSegments the ICRC changes by the values of
// t, with no CRC of the frame.
func setIPID(m *txMeta, id uint16, t *idDeltas) {
	binary.BigEndian.PutUint16(m.frame[m.l3+4:], id)
	if id >= 1<<idBits {
		wire.SealICRC(m.frame, m.l3)
		return
	}
	binary.BigEndian.PutUint16(m.frame[m.l3+4:], 0)
	d := t.of(m.frame, m.l3, m.icrc)
	binary.BigEndian.PutUint16(m.frame[m.l3+4:], id)
	icrc := m.frame[m.icrc:]
	binary.LittleEndian.PutUint32(icrc, binary.LittleEndian.Uint32(icrc)^d.of(id))
}

// errNotRoCE is a frame the link cannot send: not IPv4 or IPv6 over UDP.
var errNotRoCE = errors.New("not a RoCEv2 frame")

// prepare copies frame into scratch as the datagram the kernel will emit
// from a socket bound to sport — identification 0 and DF for IPv4, source
// port sport — reseals its ICRC for those headers and returns the UDP
// payload (inside scratch) with what the socket needs. Frames longer than
// mtu (IP packet) fail with EMSGSIZE, frames that are not RoCEv2 over UDP
// with errNotRoCE.
func prepare(scratch, frame []byte, sport uint16, mtu int) ([]byte, txMeta, error) {
	var m txMeta
	if len(frame) > len(scratch) {
		return nil, m, fmt.Errorf("udp: frame of %d bytes: %w", len(frame), unix.EMSGSIZE)
	}
	b := scratch[:copy(scratch, frame)]
	if len(b) < wire.EthernetSize {
		return nil, m, errNotRoCE
	}
	l3 := wire.EthernetSize
	etype := binary.BigEndian.Uint16(b[12:])
	if etype == wire.EtherTypeVLAN && len(b) >= l3+wire.VLANTagSize {
		etype = binary.BigEndian.Uint16(b[16:])
		l3 += wire.VLANTagSize
	}
	if len(b)-l3 > mtu {
		return nil, m, fmt.Errorf("udp: IP packet of %d bytes over MTU %d: %w", len(b)-l3, mtu, unix.EMSGSIZE)
	}
	var l4 int
	switch etype {
	case wire.EtherTypeIPv4:
		if len(b) < l3+wire.IPv4Size || b[l3] != 0x45 || b[l3+9] != wire.IPProtocolUDP {
			return nil, m, errNotRoCE
		}
		h := b[l3:]
		m.tos, m.ttl = h[1], h[8]
		m.src, m.dst = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		binary.BigEndian.PutUint16(h[4:], 0)
		binary.BigEndian.PutUint16(h[6:], 0x4000)
		l4 = l3 + wire.IPv4Size
	case wire.EtherTypeIPv6:
		if len(b) < l3+wire.IPv6Size || b[l3]>>4 != 6 || b[l3+6] != wire.IPProtocolUDP {
			return nil, m, errNotRoCE
		}
		h := b[l3:]
		m.tos = uint8(binary.BigEndian.Uint32(h[0:]) >> 20)
		m.ttl = h[7]
		m.src, m.dst = netip.AddrFrom16([16]byte(h[8:24])), netip.AddrFrom16([16]byte(h[24:40]))
		l4 = l3 + wire.IPv6Size
	default:
		return nil, m, errNotRoCE
	}
	if len(b) < l4+wire.UDPSize {
		return nil, m, errNotRoCE
	}
	// The kernel writes the IP length from the UDP datagram: a frame
	// whose IP length says otherwise has an ICRC no datagram can carry.
	ulen := int(binary.BigEndian.Uint16(b[l4+4:]))
	iplen := int(binary.BigEndian.Uint16(b[l3+2:]))
	if etype == wire.EtherTypeIPv6 {
		iplen = int(binary.BigEndian.Uint16(b[l3+4:]))
	}
	if iplen != l4-l3+ulen && etype == wire.EtherTypeIPv4 || iplen != ulen && etype == wire.EtherTypeIPv6 {
		return nil, m, errNotRoCE
	}
	binary.BigEndian.PutUint16(b[l4:], sport)
	m.dport = binary.BigEndian.Uint16(b[l4+2:])
	if err := wire.SealICRC(b, l3); err != nil {
		return nil, m, fmt.Errorf("%w: %w", errNotRoCE, err)
	}
	m.frame, m.l3, m.icrc = b, l3, l4+ulen-wire.ICRCSize
	return b[l4+wire.UDPSize : l4+ulen], m, nil
}

// idBits is how many low bits of the IPv4 identification checker.check
// tries: the identifications the segments of one GSO send carry.
const idBits = 6 // 1 << idBits == maxSegments

// idDeltas keeps, per length of what the ICRC covers, what each IPv4
// identification below 1<<idBits changes in the ICRC. The ICRC
// is a CRC: for frames of one length, changing the identification changes
// the ICRC by a value that depends only on the change.
type idDeltas struct {
	m map[int]*deltas
}

// deltas are, for one length, the ICRC change of every identification
// below 1<<idBits, from identification 0.
type deltas [1 << idBits]uint32

// of returns what identification id (below 1<<idBits) changes in the
// ICRC, from identification 0.
func (d *deltas) of(id uint16) uint32 { return d[id] }

// of returns the deltas of the IPv4 frame whose IP header starts at l3 and
// ICRC at icrc, computing them from the frame (sealed, left as it was)
// the first time a length comes.
func (t *idDeltas) of(frame []byte, l3, icrc int) *deltas {
	k := icrc - l3
	if d := t.m[k]; d != nil {
		return d
	}
	id := frame[l3+4 : l3+6]
	old := binary.BigEndian.Uint16(id)
	sealed := binary.LittleEndian.Uint32(frame[icrc:])
	d := new(deltas)
	for b := range idBits {
		binary.BigEndian.PutUint16(id, old^1<<b)
		wire.SealICRC(frame, l3)
		d[1<<b] = binary.LittleEndian.Uint32(frame[icrc:]) ^ sealed
	}
	binary.BigEndian.PutUint16(id, old)
	binary.LittleEndian.PutUint32(frame[icrc:], sealed)
	for i := 3; i < len(d); i++ {
		low := i & -i // the lowest bit of i; the rest, i-low, came before
		d[i] = d[i-low] ^ d[low]
	}
	if t.m == nil || len(t.m) >= 64 {
		t.m = map[int]*deltas{}
	}
	t.m[k] = d
	return d
}

// checker verifies the ICRC of synthesized frames; one per reader.
type checker struct {
	deltas idDeltas
}

// check verifies the ICRC of a synthesized frame. An IPv4 frame is
// synthesized with identification 0; when its ICRC matches another
// identification below 1<<idBits instead (a segment of a GSO send, which
// the kernel numbers 0, 1, 2, ...), the frame gets that identification
// and is verified. An IPv4 frame that matches none of them is
// unverifiable (its sender's identification is unknown): its ICRC is
// resealed for identification 0 and check reports true. IPv6 frames are
// left as they are, for the device to check. One CRC of the frame and the
// idDeltas of its length try every identification.
func (c *checker) check(frame []byte) (unverifiable bool) {
	const l3 = wire.EthernetSize
	if binary.BigEndian.Uint16(frame[12:]) != wire.EtherTypeIPv4 {
		return false
	}
	if wire.VerifyICRC(frame, l3) == nil {
		return false
	}
	icrcOff := len(frame) - wire.ICRCSize
	icrc := frame[icrcOff:]
	got := binary.LittleEndian.Uint32(icrc)
	if wire.SealICRC(frame, l3) != nil {
		return true
	}
	diff := got ^ binary.LittleEndian.Uint32(icrc)
	d := c.deltas.of(frame, l3, icrcOff)
	for id := uint16(1); id < 1<<idBits; id++ {
		if d.of(id) == diff {
			h := frame[l3 : l3+wire.IPv4Size]
			binary.BigEndian.PutUint16(h[4:], id)
			h[10], h[11] = 0, 0
			binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
			binary.LittleEndian.PutUint32(icrc, got)
			return false
		}
	}
	return true
}
