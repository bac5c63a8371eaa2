package wire

import (
	"hash/crc32"
	"strconv"
	"testing"
)

// benchSizes are the payload lengths of the benchmarks.
var benchSizes = []int{64, 1024, 4096}

// benchEach runs loop as a sub-benchmark for each payload size, on an
// RC_RDMA_WRITE_FIRST frame over IPv4 described by f and built into fr.
func benchEach(b *testing.B, loop func(b *testing.B, f *Frame, fr []byte)) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			f := sampleFrame(RCRDMAWriteFirst, false, false, n)
			fr := frameOf(b, f)
			b.SetBytes(int64(len(fr)))
			b.ReportAllocs()
			loop(b, f, fr)
		})
	}
}

func BenchmarkParse(b *testing.B) {
	benchEach(b, func(b *testing.B, _ *Frame, fr []byte) {
		var p Packet
		for b.Loop() {
			if err := p.Decode(fr); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBuild(b *testing.B) {
	benchEach(b, func(b *testing.B, f *Frame, fr []byte) {
		for b.Loop() {
			if _, err := Build(fr, f); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSealICRC(b *testing.B) {
	benchEach(b, func(b *testing.B, _ *Frame, fr []byte) {
		for b.Loop() {
			if err := SealICRC(fr, EthernetSize); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkVerifyICRC(b *testing.B) {
	benchEach(b, func(b *testing.B, _ *Frame, fr []byte) {
		var p Packet
		if err := p.Decode(fr); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := p.VerifyICRC(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCRC32 is the baseline: hash/crc32 over the bytes the ICRC
// covers, without masking.
func BenchmarkCRC32(b *testing.B) {
	benchEach(b, func(b *testing.B, _ *Frame, fr []byte) {
		covered := fr[EthernetSize : len(fr)-ICRCSize]
		for b.Loop() {
			_ = crc32.Update(icrcSeed, crc32.IEEETable, covered)
		}
	})
}

// BenchmarkBuildInPlace is Build with the payload already at
// PayloadOffset in the buffer, as rxe's requester gathers it.
func BenchmarkBuildInPlace(b *testing.B) {
	benchEach(b, func(b *testing.B, f *Frame, fr []byte) {
		g := *f
		off := g.PayloadOffset()
		g.Payload = fr[off : off+copy(fr[off:], f.Payload)]
		for b.Loop() {
			if _, err := Build(fr, &g); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBuildHeaders is Build as the requester on the in-memory link
// runs it: the payload in place and no ICRC, so that what is left is the
// headers.
func BenchmarkBuildHeaders(b *testing.B) {
	benchEach(b, func(b *testing.B, f *Frame, fr []byte) {
		g := *f
		off := g.PayloadOffset()
		g.Payload = fr[off : off+copy(fr[off:], f.Payload)]
		g.NoICRC = true
		for b.Loop() {
			if _, err := Build(fr, &g); err != nil {
				b.Fatal(err)
			}
		}
	})
}
