package oob

import (
	"strconv"
	"strings"
)

// cHexAlt formats v like C printf("%#0<width>x", v): a nonzero value gets a
// "0x" prefix counted in the width, zero gets no prefix at all (C11
// 7.21.6.1: "For x conversion, a nonzero result has 0x prefixed").
// perftest prints its addresses this way, so LID 0 is "0000" while QPN 0x11
// is "0x0011".
func cHexAlt(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	prefix := ""
	if v != 0 {
		prefix = "0x"
	}
	pad := width - len(prefix) - len(digits)
	if pad < 0 {
		pad = 0
	}
	return prefix + strings.Repeat("0", pad) + digits
}

// cHex formats v like C printf("%0<width>x", v).
func cHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	if len(digits) >= width {
		return digits
	}
	return strings.Repeat("0", width-len(digits)) + digits
}

// leftPad formats s like C printf("%-<width>s"): s padded with spaces on
// the right to width.
func leftPad(s string, width int) string {
	if len(s) >= width {
		return s
	}
	return s + strings.Repeat(" ", width-len(s))
}

// cFloat formats f like C printf("%.<prec>f").
func cFloat(f float64, prec int) string {
	return strconv.FormatFloat(f, 'f', prec, 64)
}

// InetNtop6 formats a 16-byte address the way glibc's inet_ntop(AF_INET6)
// does, which is how ibv_*_pingpong print GIDs: the longest run of two or
// more zero words becomes "::" (the first run wins a tie), and an address
// whose first six words are zero, or whose first five are zero and sixth
// is 0xffff, ends in dotted IPv4 ("::ffff:10.77.0.12", "::10.0.0.1").
// Unlike net/netip it prints the IPv4-compatible form too.
func InetNtop6(a [16]byte) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i := 0; i < 8; i++ {
		if w[i] == 0 {
			if curBase < 0 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase >= 0 {
			if bestBase < 0 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase >= 0 && bestLen < 2 {
		bestBase = -1
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				sb.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			sb.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			sb.WriteString(strconv.Itoa(int(a[12])) + "." + strconv.Itoa(int(a[13])) + "." +
				strconv.Itoa(int(a[14])) + "." + strconv.Itoa(int(a[15])))
			break
		}
		sb.WriteString(strconv.FormatUint(uint64(w[i]), 16))
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		sb.WriteByte(':')
	}
	return sb.String()
}
