// Package gopacketlayer adapts package wire's RoCEv2 transport headers to
// gopacket (github.com/google/gopacket): one layer, RoCE, holds the BTH and
// whichever extended transport headers its opcode carries (RDETH, DETH,
// XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), and
// registers itself on UDP port 4791, so gopacket.NewPacket decodes a
// RoCEv2 frame end to end (Ethernet, IPv4/IPv6, UDP, RoCE, Payload) and a
// gopacket.DecodingLayerParser does so without allocating.
//
// One layer rather than one per header because the headers are not
// self-describing: only the BTH opcode says which follow and in what order
// (IBTA vol. 1 §9.2 Table 38), and the pad and ICRC trail the payload.
//
// The ICRC covers the IP and UDP headers, which a layer never sees while
// gopacket serializes inside-out; SerializeTo therefore writes the ICRC
// field as given (zero by default) and the caller seals the finished frame
// with wire.SealICRC, or calls VerifyICRC / SealICRC here on a decoded
// gopacket.Packet.
//
// This package is an adapter: package wire stands alone and the emulator's
// data path uses it directly.
package gopacketlayer

import (
	"errors"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/wire"
)

// LayerTypeRoCE is the gopacket layer type of RoCE, registered as number
// 4791 (the RoCEv2 UDP port) with name "RoCE".
var LayerTypeRoCE = gopacket.RegisterLayerType(4791, gopacket.LayerTypeMetadata{
	Name:    "RoCE",
	Decoder: gopacket.DecodeFunc(decodeRoCE),
})

func init() {
	layers.RegisterUDPPortLayerType(ib.RoCEv2UDPPort, LayerTypeRoCE)
}

// RoCE is the InfiniBand transport part of a RoCEv2 UDP datagram: BTH,
// extended headers, payload, pad and ICRC. Contents holds the BTH and
// extended headers, Payload the payload (without pad and ICRC). Only the
// extended-header fields that BTH.Opcode carries are meaningful; decoding
// zeroes the others. Serializing writes pad bytes and the 16 reserved bytes
// of a CNP as zeros.
type RoCE struct {
	layers.BaseLayer // Contents (BTH and extended headers) and Payload

	BTH          wire.BTHFields          // base transport header
	RDETH        wire.RDETHFields        // reliable datagram extended header (RD opcodes)
	DETH         wire.DETHFields         // datagram extended header: Q_Key and source QP (UD)
	XRCETH       wire.XRCETHFields       // XRC extended header: destination XRC SRQ number
	FETH         wire.FETHFields         // flush extended header (FLUSH)
	RETH         wire.RETHFields         // RDMA extended header: VA, R_Key, DMA length
	AtomicETH    wire.AtomicETHFields    // atomic extended header: VA, R_Key, swap/add and compare values
	AETH         wire.AETHFields         // ACK extended header: syndrome and MSN
	AtomicAckETH wire.AtomicAckETHFields // original remote value (ATOMIC_ACKNOWLEDGE)
	ImmDt        wire.ImmDtFields        // immediate data (*_WITH_IMMEDIATE)
	IETH         wire.IETHFields         // R_Key to invalidate (SEND_*_WITH_INVALIDATE)

	// Pad is the number of pad bytes after the payload (BTH PadCnt).
	Pad int
	// ICRC is the stored ICRC (little-endian on the wire).
	ICRC uint32

	pkt wire.Packet // decoding state; holds DecodeFromBytes's error
}

// LayerType returns LayerTypeRoCE.
func (r *RoCE) LayerType() gopacket.LayerType { return LayerTypeRoCE }

// CanDecode returns LayerTypeRoCE.
func (r *RoCE) CanDecode() gopacket.LayerClass { return LayerTypeRoCE }

// NextLayerType returns gopacket.LayerTypePayload when the packet carries
// payload, else gopacket.LayerTypeZero.
func (r *RoCE) NextLayerType() gopacket.LayerType {
	if len(r.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes a UDP payload with wire.Packet.DecodeTransport.
// It allocates nothing; the error, a *wire.ParseError, stays valid until
// the next call. Truncated data also marks df truncated.
func (r *RoCE) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	p := &r.pkt
	if err := p.DecodeTransport(data); err != nil {
		if errors.Is(err, wire.ErrTruncated) {
			df.SetTruncated()
		}
		return err
	}
	var f wire.Frame
	p.Fields(&f)
	r.fromFrame(&f)
	r.Pad = len(p.Pad())
	r.ICRC = p.ICRC()
	r.Contents = data[:p.PayloadOffset()]
	r.Payload = f.Payload
	return nil
}

func (r *RoCE) fromFrame(f *wire.Frame) {
	r.BTH, r.RDETH, r.DETH, r.XRCETH, r.FETH = f.BTH, f.RDETH, f.DETH, f.XRCETH, f.FETH
	r.RETH, r.AtomicETH, r.AETH, r.AtomicAckETH = f.RETH, f.AtomicETH, f.AETH, f.AtomicAckETH
	r.ImmDt, r.IETH = f.ImmDt, f.IETH
}

func (r *RoCE) toFrame(f *wire.Frame) {
	f.BTH, f.RDETH, f.DETH, f.XRCETH, f.FETH = r.BTH, r.RDETH, r.DETH, r.XRCETH, r.FETH
	f.RETH, f.AtomicETH, f.AETH, f.AtomicAckETH = r.RETH, r.AtomicETH, r.AETH, r.AtomicAckETH
	f.ImmDt, f.IETH = r.ImmDt, r.IETH
}

// SerializeTo prepends the BTH and extended headers to the payload already
// in b and appends the pad (zeros) and the ICRC field (r.ICRC; seal the
// finished frame with wire.SealICRC or SealICRC). With opts.FixLengths the
// BTH PadCnt is set from the payload length, otherwise r.Pad bytes of pad
// are written and PadCnt is r.BTH.PadCnt.
func (r *RoCE) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	payLen := len(b.Bytes())
	var f wire.Frame
	r.toFrame(&f)
	pad := r.Pad
	if opts.FixLengths {
		pad = -payLen & 3
		f.BTH.PadCnt = uint8(pad)
	}
	if pad < 0 || pad > 3 {
		return fmt.Errorf("gopacketlayer: pad %d out of range 0-3", pad)
	}
	hl := f.BTH.Opcode.HeaderLen()
	if hl == 0 {
		return fmt.Errorf("gopacketlayer: opcode %v: %w", f.BTH.Opcode, wire.ErrMalformed)
	}
	hdr, err := b.PrependBytes(hl)
	if err != nil {
		return err
	}
	if _, err := f.EncodeTransportHeaders(hdr); err != nil {
		return err
	}
	tail, err := b.AppendBytes(pad + wire.ICRCSize)
	if err != nil {
		return err
	}
	clear(tail[:pad])
	tail[pad] = byte(r.ICRC)
	tail[pad+1] = byte(r.ICRC >> 8)
	tail[pad+2] = byte(r.ICRC >> 16)
	tail[pad+3] = byte(r.ICRC >> 24)
	return nil
}

// String summarises the layer as "RC_SEND_ONLY qp=0x000011 psn=5".
func (r *RoCE) String() string {
	return fmt.Sprintf("%v qp=%#06x psn=%d", r.BTH.Opcode, r.BTH.DestQP, r.BTH.PSN)
}

func decodeRoCE(data []byte, p gopacket.PacketBuilder) error {
	r := &RoCE{}
	if err := r.DecodeFromBytes(data, p); err != nil {
		// The packet keeps the error; copy it out of r's decoding state.
		var pe *wire.ParseError
		if errors.As(err, &pe) {
			e := *pe
			return &e
		}
		return err
	}
	p.AddLayer(r)
	return p.NextDecoder(r.NextLayerType())
}

// l3Offset returns the offset of pkt's network layer: the summed contents
// of the layers before it.
func l3Offset(pkt gopacket.Packet) (int, error) {
	off := 0
	for _, l := range pkt.Layers() {
		switch l.LayerType() {
		case layers.LayerTypeIPv4, layers.LayerTypeIPv6:
			return off, nil
		}
		off += len(l.LayerContents())
	}
	return 0, fmt.Errorf("gopacketlayer: no IP layer: %w", wire.ErrNotRoCE)
}

// VerifyICRC checks the ICRC of a decoded RoCEv2 packet (see
// wire.VerifyICRC): nil, wire.ErrBadICRC, or an error when pkt holds no
// IP layer or no RoCE datagram.
func VerifyICRC(pkt gopacket.Packet) error {
	off, err := l3Offset(pkt)
	if err != nil {
		return err
	}
	return wire.VerifyICRC(pkt.Data(), off)
}

// SealICRC computes and stores the ICRC of a serialized RoCEv2 frame
// starting with an Ethernet header (with at most one 802.1Q tag).
func SealICRC(frame []byte) error {
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
	off, err := l3Offset(pkt)
	if err != nil {
		return err
	}
	return wire.SealICRC(frame, off)
}
