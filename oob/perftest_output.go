package oob

import (
	"strconv"
	"strings"
)

// PerftestResultLine is RESULT_LINE: the 87-dash rule perftest prints
// around its header and results, newline included.
var PerftestResultLine = strings.Repeat("-", 87) + "\n"

// FormatPerftestAddress returns what ctx_print_pingpong_data prints for
// one side: BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x",
// then READ_FMT " OUT %#04x" for RDMA_Read, then RDMA_FMT
// " RKey %#08x VAddr %#016llx" for RDMA_Read and RDMA_Write (the C switch
// falls through; Send and Atomic print neither), a newline, and with a
// GID the PERF_GID_FMT line " GID: %02d:...", whose bytes are in DECIMAL
// (00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:12). The "%#0Nx" forms
// print 0 without "0x" (LID 0 is "0000", QPN 0x11 is "0x0011").
func FormatPerftestAddress(v PerftestVerb, remote bool, d PerftestDest, withGID bool) string {
	var sb strings.Builder
	side := "local"
	if remote {
		side = "remote"
	}
	sb.WriteString(" " + side + " address: LID " + cHexAlt(uint64(d.LID), 4) +
		" QPN " + cHexAlt(uint64(d.QPN), 6) + " PSN " + cHexAlt(uint64(d.PSN), 6))
	if v == VerbRead {
		sb.WriteString(" OUT " + cHexAlt(uint64(d.OutReads), 4))
	}
	if v == VerbRead || v == VerbWrite {
		sb.WriteString(" RKey " + cHexAlt(uint64(d.RKey), 8) + " VAddr " + cHexAlt(d.VAddr, 16))
	}
	sb.WriteByte('\n')
	if withGID {
		sb.WriteString(" GID: ")
		for i, g := range d.GID {
			if i > 0 {
				sb.WriteByte(':')
			}
			s := strconv.Itoa(int(g))
			if len(s) < 2 {
				s = "0" + s
			}
			sb.WriteString(s)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// PerftestTitle returns the test's title as ctx_print_test_info prints it
// between the rules: 20 spaces, the verb, "Bidirectional" for -b, "BW" or
// "Latency", and "Test" ("                    RDMA_Write Bidirectional
// BW Test"), newline included. It leaves out what depends on more of the
// command line (the atomic type, "Post List"): see FormatPerftestTitle.
func PerftestTitle(p PerftestTest, bidirectional bool) string {
	return perftestTitle(p, "", bidirectional, false)
}

// FormatPerftestTitle returns the title line of c's test as
// ctx_print_test_info prints it: 20 spaces, the verb, the atomic type for
// the atomic tests ("Atomic FETCH_AND_ADD"), then for BW tests
// "Bidirectional" with -b and "Post List" with -l above 1 before "BW",
// else "Latency", and "Test", newline included.
func FormatPerftestTitle(c PerftestConfig) string {
	atomic := ""
	if c.Test.Verb() == VerbAtomic {
		atomic = c.AtomicType
		if atomic == "" {
			atomic = "FETCH_AND_ADD"
		}
	}
	return perftestTitle(c.Test, atomic, c.Bidirectional, c.PostList > 1)
}

func perftestTitle(p PerftestTest, atomicType string, bidirectional, postList bool) string {
	s := strings.Repeat(" ", 20) + p.Verb().String() + " "
	if atomicType != "" {
		s += atomicType + " "
	}
	if p.IsBW() {
		if bidirectional {
			s += "Bidirectional "
		}
		if postList {
			s += "Post List "
		}
		s += "BW "
	} else {
		s += "Latency "
	}
	return s + "Test\n"
}

// PerftestInfo is what the header block shows.
type PerftestInfo struct {
	Test          PerftestTest
	Client        bool   // the side with a server name
	Device        string // "rxe0"
	Config        PerftestConfig
	MTUBytes      int    // the negotiated path MTU in bytes
	LinkEthernet  bool   // "Ethernet" (else "IB")
	GIDIndex      int    // the GID index in use (-1: no line)
	InlineSize    int    // Max inline data, for Send and RDMA_Write
	OutReads      int    // Outstand reads, for RDMA_Read and Atomic
	CQModeration  int    // BW tests
	PCIeRelaxed   bool   // " PCIe relax order: ON" (not on Atomic)
	WRAPI         bool   // " ibv_wr* API     : ON"
	TransportType string // "IB"
}

// FormatPerftestInfo returns ctx_print_test_info's block: the rule, the
// title, then the " Dual-port       : OFF\t\tDevice         : rxe0" lines
// in perftest 4.5's order, and the closing rule. Field formats are the
// format strings of the Debian 12 binaries; the order and conditions
// follow perftest's source and are not confirmed by a capture (the
// captures hold the wire, not stdout).
func FormatPerftestInfo(in PerftestInfo) string {
	onOff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	c := in.Config
	var sb strings.Builder
	sb.WriteString(PerftestResultLine)
	c.Test = in.Test
	sb.WriteString(FormatPerftestTitle(c))
	sb.WriteString(" Dual-port       : OFF\t\tDevice         : " + in.Device + "\n")
	sb.WriteString(" Number of qps   : " + strconv.Itoa(c.NumQP) + "\t\tTransport type : " + in.TransportType + "\n")
	sb.WriteString(" Connection type : " + c.Connection + "\t\tUsing SRQ      : " + onOff(c.UseSRQ) + "\n")
	v := in.Test.Verb()
	if v != VerbAtomic {
		sb.WriteString(" PCIe relax order: " + onOff(in.PCIeRelaxed) + "\n")
	}
	sb.WriteString(" ibv_wr* API     : " + onOff(in.WRAPI) + "\n")
	if in.Client || c.Bidirectional {
		sb.WriteString(" TX depth        : " + strconv.Itoa(c.TxDepth) + "\n")
	}
	if c.PostList > 1 {
		sb.WriteString(" Post List       : " + strconv.Itoa(c.PostList) + "\n")
	}
	if v == VerbSend && (!in.Client || c.Bidirectional) {
		sb.WriteString(" RX depth        : " + strconv.Itoa(c.RxDepth) + "\n")
	}
	if in.Test.IsBW() {
		sb.WriteString(" CQ Moderation   : " + strconv.Itoa(in.CQModeration) + "\n")
	}
	sb.WriteString(" Mtu             : " + strconv.Itoa(in.MTUBytes) + "[B]\n")
	link := "IB"
	if in.LinkEthernet {
		link = "Ethernet"
	}
	sb.WriteString(" Link type       : " + link + "\n")
	if in.GIDIndex >= 0 {
		sb.WriteString(" GID index       : " + strconv.Itoa(in.GIDIndex) + "\n")
	}
	if v != VerbRead && v != VerbAtomic {
		sb.WriteString(" Max inline data : " + strconv.Itoa(in.InlineSize) + "[B]\n")
	} else {
		sb.WriteString(" Outstand reads  : " + strconv.Itoa(in.OutReads) + "\n")
	}
	sb.WriteString(" rdma_cm QPs\t : OFF\n")
	sb.WriteString(" Data ex. method : Ethernet\n")
	sb.WriteString(PerftestResultLine)
	return sb.String()
}

// FormatPerftestBWHeader returns RESULT_FMT (or RESULT_FMT_G with
// --report_gbits) and its newline.
func FormatPerftestBWHeader(gbits bool) string {
	unit := "MB/sec"
	if gbits {
		unit = "Gb/sec"
	}
	return " #bytes     #iterations    BW peak[" + unit + "]    BW average[" + unit + "]   MsgRate[Mpps]\n"
}

// FormatPerftestBWReport returns one result row, REPORT_FMT
// " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf" and
// its newline: size, iterations, peak and average bandwidth (in the unit
// of the header: MB/sec with MB = 2^20 bytes, or Gb/sec) and message rate
// in Mpps.
func FormatPerftestBWReport(r BWReport) string {
	return " " + leftPad(strconv.FormatUint(r.Size, 10), 7) + "    " + leftPad(strconv.FormatUint(r.Iters, 10), 10) +
		"       " + leftPad(cFloatC(r.BWPeak, 2), 7) + "            " + leftPad(cFloatC(r.BWAvg, 2), 7) +
		"\t\t   " + leftPad(cFloatC(r.MsgRateAvg, 6), 7) + "\n"
}

// LatReport is one latency result row.
type LatReport struct {
	Size, Iters                                   uint64
	TMin, TMax, TTypical, TAvg, TStdev, P99, P999 float64 // usec
}

// FormatPerftestLatHeader returns RESULT_FMT_LAT and its newline.
func FormatPerftestLatHeader() string {
	return " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
}

// FormatPerftestLatReport returns REPORT_FMT_LAT
// " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
// and its newline.
func FormatPerftestLatReport(r LatReport) string {
	f := func(v float64) string { return leftPad(cFloatC(v, 2), 7) }
	return " " + leftPad(strconv.FormatUint(r.Size, 10), 7) + " " + strconv.FormatUint(r.Iters, 10) +
		"          " + f(r.TMin) + "        " + f(r.TMax) + "      " + f(r.TTypical) + "  \t       " + f(r.TAvg) +
		"     \t" + f(r.TStdev) + "\t\t" + f(r.P99) + " \t\t" + f(r.P999) + "\n"
}

// LatDurationReport is one latency result row of duration mode (-D):
// the size, the iterations counted in the sample window, the average
// latency and the transactions per second.
type LatDurationReport struct {
	Size, Iters uint64
	TAvg        float64 // usec
	TPS         float64 // iterations per second
}

// FormatPerftestLatDurationHeader returns RESULT_FMT_LAT_DUR
// " #bytes        #iterations       t_avg[usec]    tps average" and its
// newline, the latency result header of duration mode.
func FormatPerftestLatDurationHeader() string {
	return " #bytes        #iterations       t_avg[usec]    tps average\n"
}

// FormatPerftestLatDurationReport returns REPORT_FMT_LAT_DUR
// " %-7lu       %lu            %-7.2f        %-7.2f" and its newline, as
// print_report_lat_duration prints it
// (" 2             1674            896.77         557.56 \n").
func FormatPerftestLatDurationReport(r LatDurationReport) string {
	return " " + leftPad(strconv.FormatUint(r.Size, 10), 7) + "       " + strconv.FormatUint(r.Iters, 10) +
		"            " + leftPad(cFloatC(r.TAvg, 2), 7) + "        " + leftPad(cFloatC(r.TPS, 2), 7) + "\n"
}

// Plus returns the row a bidirectional (-b) test prints after the report
// exchange, print_full_bw_report(my, rem): r's own Size and Iters with
// the peaks, averages and message rates of r and rem summed (per port
// too).
func (r BWReport) Plus(rem BWReport) BWReport {
	r.BWPeak += rem.BWPeak
	r.BWAvg += rem.BWAvg
	r.MsgRateAvg += rem.MsgRateAvg
	r.BWAvgP1 += rem.BWAvgP1
	r.MsgRateAvgP1 += rem.MsgRateAvgP1
	r.BWAvgP2 += rem.BWAvgP2
	r.MsgRateAvgP2 += rem.MsgRateAvgP2
	return r
}

// BWFromRun computes a BW report the way perftest does for iters messages
// of size bytes in seconds: average in MB/sec (2^20 bytes) or Gb/sec
// (10^9 bits) with gbits, message rate in Mpps. Peak is left to the
// caller (perftest takes it from per-iteration timestamps).
func BWFromRun(size, iters uint64, seconds float64, gbits bool) BWReport {
	r := BWReport{Size: size, Iters: iters}
	if seconds <= 0 {
		return r
	}
	bytes := float64(size) * float64(iters)
	if gbits {
		r.BWAvg = bytes * 8 / 1e9 / seconds
	} else {
		r.BWAvg = bytes / (1 << 20) / seconds
	}
	r.MsgRateAvg = float64(iters) / seconds / 1e6
	return r
}

// PerftestRun is what one side of a perftest run knows when it ends, for
// FormatPerftestResultHeader and FormatPerftestResult to choose what the
// tool prints.
type PerftestRun struct {
	Test          PerftestTest
	Client        bool // the side given a server name
	Bidirectional bool // -b
	Duration      bool // -D
	AllSizes      bool // -a: the client printed a row per size as it ran
	// Measured says whether this side measured anything itself (the
	// server of a unidirectional write, read or atomic BW test does not).
	Measured    bool
	BW          BWReport // this side's row (BW tests)
	Remote      BWReport // the peer's row from the report exchange
	Lat         LatReport
	LatDuration LatDurationReport
}

// idle reports whether r's side only serves and prints no results: the
// read_lat and atomic_lat servers close the connection after the
// addresses.
func (r PerftestRun) idle() bool {
	return !r.Client && (r.Test == PerftestReadLat || r.Test == PerftestAtomicLat)
}

// FormatPerftestResultHeader returns the header of the result rows test
// r.Test prints after the addresses: the BW header (gbits: in Gb/sec), the
// latency header of an iterations or a duration run, or nothing on an idle
// latency server.
func FormatPerftestResultHeader(r PerftestRun, gbits bool) string {
	switch {
	case r.Test.IsBW():
		return FormatPerftestBWHeader(gbits)
	case r.idle():
		return ""
	case r.Duration:
		return FormatPerftestLatDurationHeader()
	}
	return FormatPerftestLatHeader()
}

// FormatPerftestResult returns what one side prints when its run has
// ended, after the report exchange: the result row perftest's tools choose
// for that side, then the closing dashed line (none on an idle latency
// server). The choice: send_bw -b -D prints its own sends and receives;
// another -b test this side's size and count with both sides' rates
// summed (BWReport.Plus); a BW client its own row (unless -a printed the
// rows already) and so does a send_bw server, which measures its
// receives; the idle server of the other BW tests the client's row it
// received; a latency side that measured its row.
func FormatPerftestResult(r PerftestRun) string {
	var s string
	bw := r.Test.IsBW()
	switch {
	case bw && r.Bidirectional && r.Test.Verb() == VerbSend && r.Duration:
		s = FormatPerftestBWReport(r.BW)
	case bw && r.Bidirectional:
		s = FormatPerftestBWReport(r.BW.Plus(r.Remote))
	case bw && r.Client && !r.AllSizes, bw && r.Measured && !r.Client:
		s = FormatPerftestBWReport(r.BW)
	case bw && !r.Client:
		s = FormatPerftestBWReport(r.Remote)
	case !bw && r.Measured && r.Duration:
		s = FormatPerftestLatDurationReport(r.LatDuration)
	case !bw && r.Measured:
		s = FormatPerftestLatReport(r.Lat)
	}
	if !r.idle() {
		s += PerftestResultLine
	}
	return s
}
