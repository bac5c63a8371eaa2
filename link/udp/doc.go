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
// socket: the link tries 0 (what softroce over this link sends) and 1 to
// MaxSegments-1 (the segments of a GSO send, below), and gives the frame
// the identification its ICRC matches. The ICRC is a CRC, so for frames of
// one length a change of identification changes it by a value that
// depends on the change alone: one CRC of the frame and a table of six
// values per length try all 64. When none matches, the frame cannot be
// verified: the sender may have used another identification (the kernel's
// rxe does: prepare_ipv4_hdr sets DF and lets __ip_select_ident draw one),
// or the frame may be corrupt. The link counts it in Stats.Unverifiable
// and reseals its ICRC for identification 0 so the device accepts it; such
// frames are protected only by the UDP checksum, where the sender set
// one. Trying 64 identifications lets a corrupt frame pass with
// probability 64 in 2^32 instead of 1.
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
// Datagrams move in batches with recvmmsg and sendmmsg.
//
// # GSO and GRO
//
// With Config.GSO, a run of frames of one batch to one destination through
// one socket with the same traffic class and TTL, all of one size but the
// last (the packets of one message at the path MTU), is one message with
// UDP_SEGMENT: the kernel cuts it into datagrams on the way out, or passes
// it whole where the path takes GSO packets (a veth, a bridge, loopback).
// The kernel numbers the IPv4 identifications of the segments of one send
// 0, 1, 2, ... (inet_gso_segment counts up from the first segment's 0), so
// the link seals segment k's ICRC for identification k. A segmented send
// the kernel refuses with EIO, EINVAL or EOPNOTSUPP (a route without GSO)
// turns GSO off for the link; its frames are lost, as on a failed
// transmit. GSO is off by default: a capture on a device that passes GSO
// packets whole shows one packet per send, not the frames.
//
// Every socket has UDP_GRO on and 64 KiB receive buffers: a train of
// datagrams that reaches the socket whole (a GSO send over a veth) is one
// message, which the link splits into its frames.
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

// MaxSegments is the most datagrams one GSO send carries (the kernel's
// UDP_MAX_SEGMENTS before Linux 6.9). The kernel numbers their IPv4
// identifications 0 to MaxSegments-1, so a received IPv4 frame is
// checked against each of these.
const MaxSegments = 1 << idBits

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
	// BatchSize is the most messages one sendmmsg moves, and the most
	// frames one WritePackets or ReadPackets call should carry; 0 means
	// 64. A recvmmsg takes at most 16 messages (each into a 64 KiB
	// buffer, for GRO trains).
	BatchSize int
	// GSO sends runs of equal-sized frames to one destination as one UDP
	// GSO send (UDP_SEGMENT), each frame's ICRC sealed for the IPv4
	// identification the kernel gives its segment.
	GSO bool
}

// Stats counts what the link did.
type Stats struct {
	// RxFrames counts the frames ReadPackets returned (datagrams
	// received), TxFrames the datagrams sent.
	RxFrames, TxFrames uint64
	// Unverifiable counts IPv4 frames whose ICRC did not match under the
	// assumption of identification 0 with DF: their sender's
	// identification is unknown, so the ICRC could not be checked. They
	// were delivered with a recomputed ICRC.
	Unverifiable uint64
	// RxDropped counts datagrams dropped on receive: larger than the MTU
	// allows (or truncated), or too short to hold a BTH and an ICRC.
	RxDropped uint64
	// TxErrors counts frames not sent: no bound socket for their source
	// address, or an error from sendmmsg (EHOSTUNREACH, ENETUNREACH, ...).
	TxErrors uint64
}
