package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/netip"
	"time"

	"github.com/softroce/softroce/wire"
)

// benchFrame returns an RC RDMA WRITE MIDDLE frame over IPv4 with n bytes
// of payload, the shape of most frames of a large WRITE.
func benchFrame(n int) *wire.Frame {
	f := &wire.Frame{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}),
		HopLimit: 64, SrcPort: 0xc000,
		BTH:     wire.BTHFields{Opcode: wire.RCRDMAWriteMiddle, PKey: 0xffff, DestQP: 0x11, PSN: 0x123456},
		Payload: make([]byte, n),
	}
	for i := range f.Payload {
		f.Payload[i] = byte(i*7 + 1)
	}
	return f
}

// buildFrame builds f into a new buffer of its exact size.
func buildFrame(f *wire.Frame) ([]byte, error) {
	buf := make([]byte, 64+len(f.Payload)+wire.EthernetSize+40+8+wire.BTHSize+64)
	n, err := wire.Build(buf, f)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// perOp returns a measurement of f's time per call over a round.
func perOp(o *Options, f func()) func() time.Duration {
	return func() time.Duration {
		return timeOp(o.round(), func(n int) {
			for range n {
				f()
			}
		})
	}
}

// runWire measures the wire package's per-frame costs: SealICRC against
// hash/crc32 over the bytes the ICRC covers (target: at least 0.9 of
// crc32's throughput), Parse and Build against copying the frame.
func runWire(ctx context.Context, o *Options) ([]Row, error) {
	var rows []Row
	for _, size := range []int{1024, 4096} {
		f := benchFrame(size)
		fr, err := buildFrame(f)
		if err != nil {
			return rows, err
		}
		covered := fr[wire.EthernetSize : len(fr)-wire.ICRCSize]
		var sink uint32
		icrc, crc := bestOf(o.rounds(), perOp(o, func() {
			if err := wire.SealICRC(fr, wire.EthernetSize); err != nil {
				panic(err)
			}
		}), perOp(o, func() { sink += crc32.ChecksumIEEE(covered) }))
		_ = sink
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("SealICRC %d B frame", len(fr)),
			Value: float64(icrc.Nanoseconds()), Unit: "ns/frame",
			Baseline: "crc32.ChecksumIEEE", BaseValue: float64(crc.Nanoseconds()), BaseUnit: "ns/frame",
			Ratio: ratio(float64(crc), float64(icrc)), RatioNote: "(throughput)"}.atLeast(0.9))

		dst := make([]byte, len(fr))
		cp := perOp(o, func() { copy(dst, fr) })
		var p wire.Packet
		parse, cpy := bestOf(o.rounds(), perOp(o, func() {
			if err := p.Decode(fr); err != nil {
				panic(err) // fr was built by wire.Build
			}
		}), cp)
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("Parse %d B frame", len(fr)),
			Value: float64(parse.Nanoseconds()), Unit: "ns/frame",
			Baseline: "copy of the frame", BaseValue: float64(cpy.Nanoseconds()), BaseUnit: "ns/frame",
			Ratio: ratio(float64(parse), float64(cpy)), RatioNote: "(time)"})
		build, cpy := bestOf(o.rounds(), perOp(o, func() {
			if _, err := wire.Build(dst, f); err != nil {
				panic(err)
			}
		}), cp)
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("Build %d B frame", len(fr)),
			Value: float64(build.Nanoseconds()), Unit: "ns/frame",
			Baseline: "copy of the frame", BaseValue: float64(cpy.Nanoseconds()), BaseUnit: "ns/frame",
			Ratio: ratio(float64(build), float64(cpy)), RatioNote: "(time)"})
		if err := ctx.Err(); err != nil {
			return rows, err
		}
	}
	return rows, nil
}
