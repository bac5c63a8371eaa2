package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"math"
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

// alternate measures a and b, each of which runs its operation n times,
// in rounds of about d that alternate a, b, a, b, and returns each one's
// fastest round in nanoseconds per operation. Short rounds fit in a
// scheduler time slice: on a loaded machine most run undisturbed, and the
// fastest of many is the operation's own cost, where one long round
// averages in the time other processes held the CPU (300 ms rounds under
// load made the ICRC rows swing 3× from run to run). Both sides are
// measured the same way, in the same loop shape, at the same moments.
func alternate(rounds int, d time.Duration, a, b func(n int)) (ta, tb float64) {
	na := max(1, int(d/max(1, timeOp(d, a))))
	nb := max(1, int(d/max(1, timeOp(d, b))))
	ta, tb = math.Inf(1), math.Inf(1)
	for range rounds {
		ta = min(ta, nsPerOp(na, a))
		tb = min(tb, nsPerOp(nb, b))
	}
	return ta, tb
}

// nsPerOp runs f(n) and returns its time per operation in nanoseconds.
func nsPerOp(n int, f func(n int)) float64 {
	start := time.Now()
	f(n)
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// wireRounds returns alternate's rounds and their length for the wire
// group: 400 rounds of 1 ms for each side (0.8 s a row), or 20 of 0.2 ms
// in a quick run.
func (o *Options) wireRounds() (int, time.Duration) {
	if o.Quick {
		return 20, 200 * time.Microsecond
	}
	return 400, time.Millisecond
}

// runWire measures the wire package's per-frame costs: SealICRC against
// hash/crc32 over the bytes the ICRC covers (target: at least 0.9 of
// crc32's throughput), Parse and Build against copying the frame.
func runWire(ctx context.Context, o *Options) ([]Row, error) {
	var rows []Row
	rounds, d := o.wireRounds()
	for _, size := range []int{1024, 4096} {
		f := benchFrame(size)
		fr, err := buildFrame(f)
		if err != nil {
			return rows, err
		}
		covered := fr[wire.EthernetSize : len(fr)-wire.ICRCSize]
		var sink uint32
		icrc, crc := alternate(rounds, d, func(n int) {
			for range n {
				if err := wire.SealICRC(fr, wire.EthernetSize); err != nil {
					panic(err) // fr was built by wire.Build
				}
			}
		}, func(n int) {
			for range n {
				sink += crc32.ChecksumIEEE(covered)
			}
		})
		_ = sink
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("SealICRC %d B frame", len(fr)),
			Value: icrc, Unit: "ns/frame",
			Baseline: "crc32.ChecksumIEEE", BaseValue: crc, BaseUnit: "ns/frame",
			Ratio: ratio(crc, icrc), RatioNote: "(throughput)"}.atLeast(0.9))

		dst := make([]byte, len(fr))
		cp := func(n int) {
			for range n {
				copy(dst, fr)
			}
		}
		var p wire.Packet
		parse, cpy := alternate(rounds, d, func(n int) {
			for range n {
				if err := p.Decode(fr); err != nil {
					panic(err) // fr was built by wire.Build
				}
			}
		}, cp)
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("Parse %d B frame", len(fr)),
			Value: parse, Unit: "ns/frame",
			Baseline: "copy of the frame", BaseValue: cpy, BaseUnit: "ns/frame",
			Ratio: ratio(parse, cpy), RatioNote: "(time)"})
		build, cpy := alternate(rounds, d, func(n int) {
			for range n {
				if _, err := wire.Build(dst, f); err != nil {
					panic(err)
				}
			}
		}, cp)
		rows = append(rows, Row{Group: "wire", Name: fmt.Sprintf("Build %d B frame", len(fr)),
			Value: build, Unit: "ns/frame",
			Baseline: "copy of the frame", BaseValue: cpy, BaseUnit: "ns/frame",
			Ratio: ratio(build, cpy), RatioNote: "(time)"})
		if err := ctx.Err(); err != nil {
			return rows, err
		}
	}
	return rows, nil
}
