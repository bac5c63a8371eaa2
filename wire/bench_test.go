package wire

import (
	"hash/crc32"
	"strconv"
	"testing"
)

var benchSizes = []int{64, 1024, 4096}

func benchFrame(b *testing.B, n int) []byte {
	return frameOf(b, sampleFrame(RCRDMAWriteFirst, false, false, n))
}

func BenchmarkParse(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			b.SetBytes(int64(len(fr)))
			b.ReportAllocs()
			var p Packet
			for b.Loop() {
				if err := p.Decode(fr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			f := sampleFrame(RCRDMAWriteFirst, false, false, n)
			buf := make([]byte, f.Len())
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(buf, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSealICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			b.SetBytes(int64(len(fr)))
			b.ReportAllocs()
			for b.Loop() {
				if err := SealICRC(fr, EthernetSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkVerifyICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			b.SetBytes(int64(len(fr)))
			b.ReportAllocs()
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
}

// BenchmarkCRC32 is the baseline: hash/crc32 over the same bytes the ICRC
// covers, without masking.
func BenchmarkCRC32(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			fr := benchFrame(b, n)
			covered := fr[EthernetSize : len(fr)-ICRCSize]
			b.SetBytes(int64(len(fr)))
			for b.Loop() {
				_ = crc32.Update(icrcSeed, crc32.IEEETable, covered)
			}
		})
	}
}
