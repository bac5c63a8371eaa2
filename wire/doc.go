// Package wire holds the RoCEv2 wire formats: zero-copy views of the
// InfiniBand transport headers (BTH and the extended transport headers of
// IBTA vol. 1 §9.2-9.3 and Annex A17), the opcode table, the ICRC, and one
// total parser and one builder for whole Ethernet frames.
//
// Layout of a RoCEv2 frame as the Linux rxe driver sends it (IBTA Annex A17,
// "RoCEv2"):
//
//	Ethernet (14, or 18 with one 802.1Q tag)
//	IPv4 (20, no options) or IPv6 (40, no extension headers)
//	UDP (8, destination port 4791, checksum 0)
//	BTH (12)
//	extended transport headers, in the order the opcode implies
//	payload
//	pad (0-3 zero bytes, BTH PadCnt)
//	ICRC (4, CRC-32 over the invariant fields, stored little-endian)
//
// Headers are byte-slice views in the style of gVisor's pkg/tcpip/header:
// a type such as BTH is a []byte whose methods read and write fields at
// their exact bit positions (sub-byte fields masked, 24-bit QPNs and PSNs),
// and each header has a fields struct and an Encode method for
// construction. Views do no bounds checking of their own beyond Go's: they
// are meant to be taken from a Packet that Parse (or Packet.Decode) has
// validated, or from a buffer the caller sized with the exported *Size
// constants.
//
// Packet.Decode (and Parse, its by-value form) is the one boundary check:
// it validates every length and field it relies on, never panics, never
// loops and never allocates, and returns a *ParseError naming the layer,
// the offset and the reason (Parse allocates only that error). After it the
// Packet's accessors return views without further checks. The ICRC is a
// separate pass (SealICRC, VerifyICRC) over the whole frame, because it
// covers fields of the IP and UDP headers. Build writes a complete frame
// into a caller's buffer and seals it.
//
// gopacket adapters for these headers live in the subpackage
// wire/gopacketlayer, so that this package (used on the emulator's data
// path) imports nothing but the standard library.
package wire
