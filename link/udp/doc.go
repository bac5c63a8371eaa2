// Package udp is a link.Link that carries RoCEv2 over ordinary UDP sockets
// on port 4791: no TAP, no AF_PACKET, no privilege. The kernel does IP,
// ARP/ND and routing; softroce sees only the datagrams addressed to it.
//
// # Design
//
// The link presents the rest of softroce the Ethernet frames it already
// speaks, so the emulated device (package emu/rxe) stays unchanged: on
// receive it writes an Ethernet, IP and UDP header in front of each
// datagram's payload (the BTH through the ICRC), and on send it strips
// them, keeping what the socket can express (the destination, the source
// address, the traffic class and TTL). The Ethernet addresses are fixed
// placeholders (LocalMAC, PeerMAC): nothing resolves MACs on a UDP link.
// A link mode without Ethernet would have meant a second frame format in
// wire, rxe and the pcap capture for no gain; the 14 bytes cost nothing.
//
// # The ICRC on what is sent
//
// The ICRC (IBA 17.3.3, RoCEv2 annex A17.4.5) covers the IPv4 header's
// identification, flags and fragment offset and the UDP source port,
// none of which a UDP socket lets the sender choose directly. The link
// recomputes the ICRC of every frame for the datagram the kernel will
// actually emit:
//
//   - the UDP source port is the socket's own port (4791), not the flow
//     entropy port rxe puts in the frame (rxe_get_udp_sport);
//   - IPv4: the socket is unconnected and has IP_MTU_DISCOVER set to
//     IP_PMTUDISC_DO, so every datagram leaves with DF set and, because
//     the socket has no connected peer, identification 0 (the kernel's
//     ip_select_ident_segs picks 0 for a DF packet of an unconnected
//     socket, and a per-socket counter for a connected one; without DF it
//     draws from the shared ip_idents hash). The link never connects its
//     sockets, and a test checks a capture of the sockets' own packets
//     with wire.VerifyICRC;
//   - IPv6 has no such field; the traffic class and flow label are masked.
//
// The traffic class (DSCP and ECN) and TTL or hop limit are masked by the
// ICRC but still follow the frame's (the QP's GRH attributes): they are set
// per message with IP_TOS and IP_TTL, or IPV6_TCLASS and IPV6_HOPLIMIT,
// control messages.
//
// # The ICRC on what is received
//
// The socket hands over the UDP payload without the IP header. The link
// rebuilds the header from the message: the source address and port from
// recvmmsg's name, the destination from IP_PKTINFO or IPV6_PKTINFO, the
// traffic class and hop limit from IP_RECVTOS/IP_RECVTTL or
// IPV6_RECVTCLASS/IPV6_RECVHOPLIMIT, the lengths from the datagram. IPv6
// frames are then complete and their ICRC is checked by the device as on
// any link. An IPv4 sender's identification is not visible to a UDP
// socket: the link assumes 0 with DF (what softroce over this link sends).
// When the ICRC does not match under that assumption, the frame cannot be
// verified: the sender may have used another identification (the kernel's
// rxe does: prepare_ipv4_hdr sets DF and lets __ip_select_ident draw a
// nonzero identification), or the frame may be corrupt. The link counts it
// in Stats.Unverifiable and reseals its ICRC so the device accepts it; such
// frames are protected only by the UDP checksum, where the sender set one.
//
// # Sockets
//
// With Config.Addrs the link binds one socket to each address; without, it
// binds the wildcard addresses (0.0.0.0 and [::], IPv6-only) and picks the
// source address of each datagram with IP_PKTINFO/IPV6_PKTINFO, so it
// follows the host's addresses as they come and go. Binding fails with an
// error wrapping EADDRINUSE when port 4791 is taken: by the kernel's rxe
// (rxe_net_init binds UDP 4791 on the wildcard addresses when the rdma_rxe
// module loads, in the initial network namespace, or in each namespace on
// kernels whose rxe has per-namespace sockets) or by another softroce.
// IPv6 sockets accept datagrams with a zero UDP checksum
// (UDP_NO_CHECK6_RX), as rxe's own tunnel socket does: the kernel's rxe
// sends its IPv6 RoCEv2 packets without one, and the ICRC covers them.
//
// Datagrams move in batches with recvmmsg and sendmmsg. UDP GSO
// (UDP_SEGMENT) and GRO (UDP_GRO) are not used yet, though they would
// help: measured once between two namespaces on a veth (1036-byte
// datagrams, a shared two-core machine), one sendto per datagram carried
// about 0.9 Gb/s and sendmmsg of 44 about the same, while one send of 44
// segments carried 2 Gb/s to a plain receiver and 10 Gb/s to one with
// UDP_GRO. Two things stand in the way: GSO needs equal-sized segments to
// one destination with the same control messages (a WRITE burst of one
// QP, not ACKs of many QPs interleaved), and the kernel numbers the IPv4
// identification of the segments of one send 0, 1, 2, ... (inet_gso_segment
// increments it per segment), so segment k must carry the ICRC of
// identification k, and a receiver behind GRO cannot see which k a
// segment had.
package udp

import (
	"github.com/softroce/softroce/ib"
	"net/netip"
)

// Port is the UDP port the link binds: RoCEv2's.
const Port = ib.RoCEv2UDPPort

// LocalMAC is the Ethernet destination of every frame the link hands up and
// PeerMAC their source: placeholders, as a UDP link has no Ethernet.
var (
	LocalMAC = [6]byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	PeerMAC  = [6]byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
)

// DefaultMTU is the link's MTU when Config.MTU is zero.
const DefaultMTU = 1500

// Config configures Open. The zero value binds all of the host's
// addresses on port 4791 with MTU 1500.
type Config struct {
	// Addrs are the addresses to bind, one socket each; empty binds the
	// wildcard addresses, IPv4 and IPv6.
	Addrs []netip.Addr
	// Port is the UDP port to bind; 0 means Port (4791). Tests use others.
	Port uint16
	// MTU is the largest IP packet the link sends; 0 means DefaultMTU.
	MTU int
	// BatchSize is the most datagrams one recvmmsg or sendmmsg moves; 0
	// means 64.
	BatchSize int
}

// Stats counts what the link did.
type Stats struct {
	// RxFrames and TxFrames count datagrams received and sent.
	RxFrames, TxFrames uint64
	// Unverifiable counts IPv4 frames whose ICRC did not match under the
	// assumption of identification 0 with DF: their sender's
	// identification is unknown, so the ICRC could not be checked. They
	// were delivered with a recomputed ICRC.
	Unverifiable uint64
	// RxDropped counts datagrams dropped on receive: truncated (larger than
	// the MTU), or too short to hold a BTH and an ICRC.
	RxDropped uint64
	// TxErrors counts frames not sent: no bound socket for their source
	// address, or an error from sendmmsg (EHOSTUNREACH, ENETUNREACH, ...).
	TxErrors uint64
}
