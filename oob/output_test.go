package oob

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestFormatPingpongAddress(t *testing.T) {
	d := PingpongDest{QPN: 0x11, PSN: 0x7d1801, GID: netip.MustParseAddr("::ffff:10.77.0.12").As16()}
	tests := []struct {
		name   string
		mode   PingpongMode
		remote bool
		d      PingpongDest
		want   string
	}{
		{"rc local", PingpongRC, false, d, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x7d1801, GID ::ffff:10.77.0.12\n"},
		{"rc remote", PingpongRC, true, d, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x7d1801, GID ::ffff:10.77.0.12\n"},
		{"ud local quirk", PingpongUD, false, d, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x7d1801: GID ::ffff:10.77.0.12\n"},
		{"ud remote", PingpongUD, true, d, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x7d1801, GID ::ffff:10.77.0.12\n"},
		{"IB, no GID", PingpongSRQ, false, PingpongDest{LID: 0x1f, QPN: 0xabcdef, PSN: 1}, "  local address:  LID 0x001f, QPN 0xabcdef, PSN 0x000001, GID ::\n"},
		{"ipv6", PingpongRC, true, PingpongDest{QPN: 0x11, PSN: 0xf50bb4, GID: netip.MustParseAddr("fd77::11").As16()}, "  remote address: LID 0x0000, QPN 0x000011, PSN 0xf50bb4, GID fd77::11\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatPingpongAddress(tc.mode, tc.remote, tc.d); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFormatPingpongResult(t *testing.T) {
	tests := []struct {
		name        string
		size, iters uint32
		elapsed     time.Duration
		want        string
	}{
		{"defaults", 4096, 1000, 10 * time.Millisecond,
			"8192000 bytes in 0.01 seconds = 6553.60 Mbit/sec\n1000 iters in 0.01 seconds = 10.00 usec/iter\n"},
		{"capture run", 4096, 20, 1234567 * time.Microsecond,
			"163840 bytes in 1.23 seconds = 1.06 Mbit/sec\n20 iters in 1.23 seconds = 61728.35 usec/iter\n"},
		{"sub-microsecond truncates", 1, 1, 1500 * time.Nanosecond,
			"2 bytes in 0.00 seconds = 16.00 Mbit/sec\n1 iters in 0.00 seconds = 1.00 usec/iter\n"},
		{"zero iters", 4096, 0, 10 * time.Millisecond,
			"0 bytes in 0.01 seconds = 0.00 Mbit/sec\n0 iters in 0.01 seconds = inf usec/iter\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatPingpongResult(tc.size, tc.iters, tc.elapsed); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	buf := make([]byte, 3*4096+10)
	for i := range buf {
		buf[i] = PingpongFill
	}
	if bad := CheckPattern(buf, 4096); len(bad) != 4 {
		t.Fatalf("unfilled buffer: bad pages %v, want all 4", bad)
	}
	FillCheckPattern(buf, 4096)
	if bad := CheckPattern(buf, 4096); len(bad) != 0 {
		t.Fatalf("filled buffer: bad pages %v", bad)
	}
	if buf[1] != PingpongFill || buf[4097] != PingpongFill {
		t.Fatal("fill touched more than the first byte of each page")
	}
	buf[2*4096] = 1
	if bad := CheckPattern(buf, 4096); len(bad) != 1 || bad[0] != 2 {
		t.Fatalf("bad pages %v, want [2]", bad)
	}
	if FormatInvalidPage(2) != "invalid data in page 2\n" {
		t.Fatal(FormatInvalidPage(2))
	}
	FillCheckPattern(buf, 0)
	if CheckPattern(buf, 0) != nil {
		t.Fatal("page size 0")
	}
}

// The write_bw capture's addresses (client, server).
var (
	writeBWClient = PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x3dbc49, RKey: 0x2f4, VAddr: 0x55d69ea81000,
		GID: netip.MustParseAddr("::ffff:10.77.0.12").As16()}
	readBWServer = PerftestDest{OutReads: 0x80, QPN: 0x11, PSN: 0xb9c3af, RKey: 0x266, VAddr: 0x55b253e6e000,
		GID: netip.MustParseAddr("::ffff:10.77.0.11").As16()}
)

func TestFormatPerftestAddress(t *testing.T) {
	const gid12 = " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:12\n"
	tests := []struct {
		name    string
		verb    PerftestVerb
		remote  bool
		d       PerftestDest
		withGID bool
		want    string
	}{
		{"write local", VerbWrite, false, writeBWClient, true,
			" local address: LID 0000 QPN 0x0011 PSN 0x3dbc49 RKey 0x0002f4 VAddr 0x0055d69ea81000\n" + gid12},
		{"read remote", VerbRead, true, readBWServer, true,
			" remote address: LID 0000 QPN 0x0011 PSN 0xb9c3af OUT 0x80 RKey 0x000266 VAddr 0x0055b253e6e000\n" +
				" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:11\n"},
		{"atomic: basic only", VerbAtomic, false, writeBWClient, true, " local address: LID 0000 QPN 0x0011 PSN 0x3dbc49\n" + gid12},
		{"send, IB without GID", VerbSend, false, PerftestDest{LID: 3, QPN: 0x1234, PSN: 0}, false, " local address: LID 0x03 QPN 0x1234 PSN 000000\n"},
		{"zero psn and rkey", VerbWrite, false, PerftestDest{}, false, " local address: LID 0000 QPN 000000 PSN 000000 RKey 00000000 VAddr 0000000000000000\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatPerftestAddress(tc.verb, tc.remote, tc.d, tc.withGID); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFormatPerftestResults(t *testing.T) {
	if got, want := FormatPerftestBWHeader(false), " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"; got != want {
		t.Errorf("BW header %q", got)
	}
	if got := FormatPerftestBWHeader(true); !strings.Contains(got, "BW peak[Gb/sec]    BW average[Gb/sec]") {
		t.Errorf("Gb header %q", got)
	}
	rep := BWReport{Size: 4096, Iters: 100, BWPeak: 15.331989, BWAvg: 9.899914, MsgRateAvg: 0.002534}
	if got, want := FormatPerftestBWReport(rep), " 4096       100              15.33              9.90   \t\t   0.002534\n"; got != want {
		t.Errorf("BW row\n got %q\nwant %q", got, want)
	}
	wide := BWReport{Size: 8388608, Iters: 12345678901, BWPeak: 12345.678, BWAvg: 0, MsgRateAvg: 1.5}
	if got, want := FormatPerftestBWReport(wide), " 8388608    12345678901       12345.68            0.00   \t\t   1.500000\n"; got != want {
		t.Errorf("wide BW row\n got %q\nwant %q", got, want)
	}
	if got := FormatPerftestLatHeader(); !strings.HasPrefix(got, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]") || !strings.HasSuffix(got, "99.9% percentile[usec] \n") {
		t.Errorf("lat header %q", got)
	}
	lat := LatReport{Size: 2, Iters: 1000, TMin: 1.5, TMax: 20.25, TTypical: 2, TAvg: 2.5, TStdev: 0.75, P99: 5, P999: 20}
	if got, want := FormatPerftestLatReport(lat), " 2       1000          1.50           20.25        2.00     \t       2.50        \t0.75   \t\t5.00    \t\t20.00  \n"; got != want {
		t.Errorf("lat row\n got %q\nwant %q", got, want)
	}
	if got := PerftestTitle(PerftestWriteBW, false); got != "                    RDMA_Write BW Test\n" {
		t.Errorf("title %q", got)
	}
	if got := PerftestTitle(PerftestSendBW, true); got != "                    Send Bidirectional BW Test\n" {
		t.Errorf("title %q", got)
	}
	if got := PerftestTitle(PerftestAtomicLat, false); got != "                    Atomic Latency Test\n" {
		t.Errorf("title %q", got)
	}
	if len(PerftestResultLine) != 88 {
		t.Errorf("result line %d bytes", len(PerftestResultLine))
	}
}

func TestFormatPerftestInfo(t *testing.T) {
	cfg, err := ParsePerftestFlags(PerftestWriteBW, []string{"-x", "1", "-F", "-n", "100", "-s", "4096", "srv"})
	if err != nil {
		t.Fatal(err)
	}
	got := FormatPerftestInfo(PerftestInfo{Test: PerftestWriteBW, Client: true, Device: "rxe0", Config: cfg, MTUBytes: 1024,
		LinkEthernet: true, GIDIndex: 1, CQModeration: 100, PCIeRelaxed: true, WRAPI: true, TransportType: "IB"})
	want := PerftestResultLine +
		"                    RDMA_Write BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : rxe0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: ON\n" +
		" ibv_wr* API     : ON\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 100\n" +
		" Mtu             : 1024[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 1\n" +
		" Max inline data : 0[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		PerftestResultLine
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// A read server: no TX depth, outstanding reads instead of inline.
	cfg, _ = ParsePerftestFlags(PerftestReadBW, nil)
	got = FormatPerftestInfo(PerftestInfo{Test: PerftestReadBW, Config: cfg, MTUBytes: 1024, GIDIndex: -1, OutReads: 128, TransportType: "IB"})
	if strings.Contains(got, "TX depth") || !strings.Contains(got, " Outstand reads  : 128\n") || strings.Contains(got, "GID index") ||
		!strings.Contains(got, " Link type       : IB\n") {
		t.Fatalf("read server header:\n%s", got)
	}
	// A post list (as the real ib_send_bw -l 4 prints it): its line after
	// the TX depth (client) and before the RX depth (server).
	cfg, _ = ParsePerftestFlags(PerftestSendBW, []string{"-l", "4", "-n", "100"})
	for _, client := range []bool{true, false} {
		got = FormatPerftestInfo(PerftestInfo{Test: PerftestSendBW, Client: client, Config: cfg, CQModeration: 4})
		want := " TX depth        : 128\n Post List       : 4\n CQ Moderation   : 4\n"
		if !client {
			want = " Post List       : 4\n RX depth        : 512\n CQ Moderation   : 4\n"
		}
		if !strings.Contains(got, want) || !strings.Contains(got, "Send Post List BW Test\n") {
			t.Errorf("client %v: post list header:\n%s", client, got)
		}
	}
}

// TestFormatPerftestDuplexDuration checks the lines -b and -D change:
// the title (as observed: "RDMA_Write Bidirectional BW Test"), the
// latency rows of duration mode (the row observed from ib_write_lat -D 3)
// and the summed duplex BW row.
func TestFormatPerftestDuplexDuration(t *testing.T) {
	const sp = "                    "
	titles := []struct {
		test PerftestTest
		args []string
		want string
	}{
		{PerftestWriteBW, []string{"-b"}, sp + "RDMA_Write Bidirectional BW Test\n"},
		{PerftestReadBW, []string{"-b", "-D", "3"}, sp + "RDMA_Read Bidirectional BW Test\n"},
		{PerftestSendBW, []string{"-b", "-l", "4"}, sp + "Send Bidirectional Post List BW Test\n"},
		{PerftestSendBW, []string{"-l", "4"}, sp + "Send Post List BW Test\n"},
		{PerftestAtomicBW, []string{"-b"}, sp + "Atomic FETCH_AND_ADD Bidirectional BW Test\n"},
		{PerftestAtomicBW, nil, sp + "Atomic FETCH_AND_ADD BW Test\n"},
		{PerftestAtomicLat, []string{"-A", "CMP_AND_SWAP"}, sp + "Atomic CMP_AND_SWAP Latency Test\n"},
		{PerftestWriteLat, []string{"-D", "3"}, sp + "RDMA_Write Latency Test\n"},
		{PerftestWriteBW, nil, sp + "RDMA_Write BW Test\n"},
	}
	for _, tc := range titles {
		c, err := ParsePerftestFlags(tc.test, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatPerftestTitle(c); got != tc.want {
			t.Errorf("%v %q: title %q, want %q", tc.test, tc.args, got, tc.want)
		}
		if got := FormatPerftestInfo(PerftestInfo{Test: tc.test, Config: c}); !strings.Contains(got, PerftestResultLine+tc.want) {
			t.Errorf("%v %q: header block without the title:\n%s", tc.test, tc.args, got)
		}
	}
	if got, want := FormatPerftestLatDurationHeader(), " #bytes        #iterations       t_avg[usec]    tps average\n"; got != want {
		t.Errorf("lat duration header %q, want %q", got, want)
	}
	for _, tc := range []struct {
		r    LatDurationReport
		want string
	}{
		{LatDurationReport{Size: 2, Iters: 1674, TAvg: 896.7712, TPS: 557.5561}, " 2             1674            896.77         557.56 \n"},
		{LatDurationReport{Size: 8388608, Iters: 12, TAvg: 12345.678, TPS: 0.5}, " 8388608       12            12345.68        0.50   \n"},
	} {
		if got := FormatPerftestLatDurationReport(tc.r); got != tc.want {
			t.Errorf("lat duration row\n got %q\nwant %q", got, tc.want)
		}
	}
	my := BWReport{Size: 65536, Iters: 5000, BWPeak: 0, BWAvg: 1000.5, MsgRateAvg: 0.016008, BWAvgP1: 1, MsgRateAvgP1: 2, BWAvgP2: 3, MsgRateAvgP2: 4}
	rem := BWReport{Size: 1, Iters: 7, BWPeak: 0, BWAvg: 999.25, MsgRateAvg: 0.015988, BWAvgP1: 10, MsgRateAvgP1: 20, BWAvgP2: 30, MsgRateAvgP2: 40}
	sum := my.Plus(rem)
	if want := (BWReport{Size: 65536, Iters: 5000, BWPeak: 0, BWAvg: 1999.75, MsgRateAvg: 0.016008 + 0.015988,
		BWAvgP1: 11, MsgRateAvgP1: 22, BWAvgP2: 33, MsgRateAvgP2: 44}); sum != want {
		t.Errorf("Plus: %+v, want %+v", sum, want)
	}
	if got, want := FormatPerftestBWReport(sum), " 65536      5000             0.00               1999.75\t\t   0.031996\n"; got != want {
		t.Errorf("duplex row\n got %q\nwant %q", got, want)
	}
	// TX depth on the -b server, RX depth on both sides of send_bw -b.
	for _, tc := range []struct {
		test    PerftestTest
		args    []string
		client  bool
		txDepth bool
		rxDepth bool
	}{
		{PerftestWriteBW, nil, false, false, false},
		{PerftestWriteBW, []string{"-b"}, false, true, false},
		{PerftestWriteBW, []string{"-b"}, true, true, false},
		{PerftestSendBW, nil, true, true, false},
		{PerftestSendBW, nil, false, false, true},
		{PerftestSendBW, []string{"-b"}, true, true, true},
		{PerftestSendBW, []string{"-b"}, false, true, true},
	} {
		c, err := ParsePerftestFlags(tc.test, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		got := FormatPerftestInfo(PerftestInfo{Test: tc.test, Client: tc.client, Config: c})
		if strings.Contains(got, " TX depth        : 128\n") != tc.txDepth || strings.Contains(got, " RX depth        : 512\n") != tc.rxDepth {
			t.Errorf("%v %q client=%v: want TX depth %v, RX depth %v:\n%s", tc.test, tc.args, tc.client, tc.txDepth, tc.rxDepth, got)
		}
	}
}

func TestBWFromRun(t *testing.T) {
	r := BWFromRun(4096, 100, 0.0394571, false)
	if r.Size != 4096 || r.Iters != 100 {
		t.Fatal(r)
	}
	// The capture's client report satisfies the same relation.
	if got := r.MsgRateAvg * 1e6 * 4096 / (1 << 20); got-r.BWAvg > 1e-9 || r.BWAvg-got > 1e-9 {
		t.Fatalf("avg %g vs msg rate %g", r.BWAvg, r.MsgRateAvg)
	}
	if g := BWFromRun(125000000, 1, 1, true); g.BWAvg != 1 {
		t.Fatalf("1 Gb in 1 s: %g", g.BWAvg)
	}
	if z := BWFromRun(1, 1, 0, false); z.BWAvg != 0 || z.MsgRateAvg != 0 {
		t.Fatal(z)
	}
}

// TestFormatPerftestResult: which row each side of each kind of run
// prints at its end, and the closing line.
func TestFormatPerftestResult(t *testing.T) {
	own := BWReport{Size: 65536, Iters: 1000, BWPeak: 1, BWAvg: 1, MsgRateAvg: 0.1}
	rem := BWReport{Size: 65536, Iters: 1000, BWPeak: 2, BWAvg: 2, MsgRateAvg: 0.2}
	lat := LatReport{Size: 2, Iters: 1000, TMin: 1}
	dur := LatDurationReport{Size: 2, Iters: 10, TAvg: 3, TPS: 4}
	for _, tc := range []struct {
		name string
		run  PerftestRun
		want string
	}{
		{"write_bw client", PerftestRun{Test: PerftestWriteBW, Client: true, Measured: true}, FormatPerftestBWReport(own)},
		{"write_bw server prints the client's row", PerftestRun{Test: PerftestWriteBW}, FormatPerftestBWReport(rem)},
		{"send_bw server measured its own", PerftestRun{Test: PerftestSendBW, Measured: true}, FormatPerftestBWReport(own)},
		{"write_bw -a client printed its rows", PerftestRun{Test: PerftestWriteBW, Client: true, AllSizes: true, Measured: true}, ""},
		{"write_bw -b sums both rates", PerftestRun{Test: PerftestWriteBW, Client: true, Bidirectional: true, Measured: true}, FormatPerftestBWReport(own.Plus(rem))},
		{"send_bw -b -D its own", PerftestRun{Test: PerftestSendBW, Bidirectional: true, Duration: true, Measured: true}, FormatPerftestBWReport(own)},
		{"send_lat", PerftestRun{Test: PerftestSendLat, Measured: true}, FormatPerftestLatReport(lat)},
		{"write_lat -D", PerftestRun{Test: PerftestWriteLat, Client: true, Duration: true, Measured: true}, FormatPerftestLatDurationReport(dur)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run.BW, tc.run.Remote, tc.run.Lat, tc.run.LatDuration = own, rem, lat, dur
			if got := FormatPerftestResult(tc.run); got != tc.want+PerftestResultLine {
				t.Errorf("got %q, want %q", got, tc.want+PerftestResultLine)
			}
		})
	}
	for _, test := range []PerftestTest{PerftestReadLat, PerftestAtomicLat} {
		r := PerftestRun{Test: test}
		if h, got := FormatPerftestResultHeader(r, false), FormatPerftestResult(r); h != "" || got != "" {
			t.Errorf("%v server: header %q, result %q; want nothing (it only serves)", test, h, got)
		}
		r.Client, r.Measured, r.Lat = true, true, lat
		if got := FormatPerftestResult(r); got != FormatPerftestLatReport(lat)+PerftestResultLine {
			t.Errorf("%v client: %q", test, got)
		}
	}
}
