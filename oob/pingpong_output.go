package oob

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// FormatPingpongAddress returns the line the pingpong tools print for an
// address, newline included:
//
//	"  local address:  LID 0x0000, QPN 0x000011, PSN 0x7d1801, GID ::ffff:10.77.0.12"
//	"  remote address: LID 0x0000, QPN 0x000011, PSN 0xaeba70, GID ::ffff:10.77.0.11"
//
// The GID is printed by inet_ntop (see InetNtop6). ud_pingpong.c's local
// line has a quirk kept here: ": GID" instead of ", GID".
func FormatPingpongAddress(m PingpongMode, remote bool, d PingpongDest) string {
	var sb strings.Builder
	if remote {
		sb.WriteString("  remote address: ")
	} else {
		sb.WriteString("  local address:  ")
	}
	sb.WriteString("LID 0x" + cHex(uint64(d.LID), 4))
	sb.WriteString(", QPN 0x" + cHex(uint64(d.QPN), 6))
	sb.WriteString(", PSN 0x" + cHex(uint64(d.PSN), 6))
	if m == PingpongUD && !remote {
		sb.WriteString(": GID ")
	} else {
		sb.WriteString(", GID ")
	}
	sb.WriteString(InetNtop6(d.GID))
	sb.WriteByte('\n')
	return sb.String()
}

// FormatPingpongResult returns the two result lines every pingpong tool
// prints at the end, for iters exchanges of size bytes in elapsed:
//
//	"8192000 bytes in 0.01 seconds = 5461.33 Mbit/sec"
//	"1000 iters in 0.01 seconds = 12.00 usec/iter"
//
// The arithmetic follows the C: elapsed is whole microseconds held in a
// float (single precision), bytes = size*iters*2, Mbit/sec = bytes*8/usec
// in double, usec/iter divided in single precision. iters 0 prints C's
// "inf"/"-nan".
func FormatPingpongResult(size, iters uint32, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000.
	var sb strings.Builder
	sb.WriteString(strconv.FormatInt(bytes, 10) + " bytes in " + cFloatC(secs, 2) +
		" seconds = " + cFloatC(float64(bytes)*8./float64(usec), 2) + " Mbit/sec\n")
	sb.WriteString(strconv.Itoa(int(int32(iters))) + " iters in " + cFloatC(secs, 2) +
		" seconds = " + cFloatC(float64(usec/float32(iters)), 2) + " usec/iter\n")
	return sb.String()
}

// cFloatC is cFloat with glibc's spelling of infinities and NaNs.
func cFloatC(f float64, prec int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	}
	return cFloat(f, prec)
}

// FillCheckPattern writes the -c (--chk) pattern the pingpong clients send
// into buf: the first byte of every page is set to i/page_size %
// sizeof(char), which is always 0 (the C expression reduces modulo 1);
// the other bytes keep the buffer's fill (0x7b in rc/uc/ud, 0 in srq).
// For ud the data starts 40 bytes into the buffer (the GRH room): pass
// buf[40:].
func FillCheckPattern(buf []byte, pageSize int) {
	if pageSize <= 0 {
		return
	}
	for i := 0; i < len(buf); i += pageSize {
		buf[i] = 0
	}
}

// CheckPattern returns the pages of buf whose first byte is not the -c
// pattern: the pages for which the pingpong server prints
// FormatInvalidPage after the run.
func CheckPattern(buf []byte, pageSize int) []int {
	if pageSize <= 0 {
		return nil
	}
	var bad []int
	for i := 0; i < len(buf); i += pageSize {
		if buf[i] != 0 {
			bad = append(bad, i/pageSize)
		}
	}
	return bad
}

// FormatInvalidPage returns "invalid data in page N\n", the -c failure
// line of the pingpong servers.
func FormatInvalidPage(page int) string {
	return "invalid data in page " + strconv.Itoa(page) + "\n"
}

// PingpongFill is the byte rc/uc/ud_pingpong fill their buffers with
// (memset(ctx->buf, 0x7b, size)); srq_pingpong fills with 0.
const PingpongFill = 0x7b
