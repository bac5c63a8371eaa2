package oob

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

func TestPingpongDefaults(t *testing.T) {
	// The defaults of rdma-core 44.0's main()s (the ud size checked in
	// the Debian 12 binary: 1024, although its usage says 2048).
	tests := []struct {
		mode  PingpongMode
		size  uint32
		mtu   ib.MTU
		numQP uint32
	}{
		{PingpongRC, 4096, ib.MTU1024, 0},
		{PingpongUC, 4096, ib.MTU1024, 0},
		{PingpongUD, 1024, 0, 0},
		{PingpongSRQ, 4096, ib.MTU1024, 16},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c, err := ParsePingpongFlags(tc.mode, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := PingpongConfig{Mode: tc.mode, Port: 18515, IBPort: 1, Size: tc.size, MTU: tc.mtu,
				RxDepth: 500, Iters: 1000, GIDIndex: -1, NumQP: tc.numQP}
			if c != want {
				t.Fatalf("defaults %+v, want %+v", c, want)
			}
		})
	}
}

func TestParsePingpongFlags(t *testing.T) {
	tests := []struct {
		name string
		mode PingpongMode
		args []string
		want func(*PingpongConfig)
	}{
		{"capture server", PingpongRC, []string{"-g", "1", "-n", "20"}, func(c *PingpongConfig) { c.GIDIndex, c.Iters = 1, 20 }},
		{"capture client", PingpongRC, []string{"-g", "1", "-n", "20", "10.77.0.11"}, func(c *PingpongConfig) {
			c.GIDIndex, c.Iters, c.Server = 1, 20, "10.77.0.11"
		}},
		{"operand first (GNU permutes)", PingpongRC, []string{"srv", "-n5"}, func(c *PingpongConfig) { c.Server, c.Iters = "srv", 5 }},
		{"long forms", PingpongUC, []string{"--port=1234", "--ib-dev", "rxe0", "--ib-port=2", "--size=64", "--mtu=4096", "--rx-depth=10", "--iters=7", "--sl=3", "--events", "--gid-idx=0", "--chk"},
			func(c *PingpongConfig) {
				c.Port, c.IBDev, c.IBPort, c.Size, c.MTU, c.RxDepth, c.Iters, c.SL, c.Events, c.GIDIndex, c.Check =
					1234, "rxe0", 2, 64, ib.MTU4096, 10, 7, 3, true, 0, true
			}},
		{"abbreviated long", PingpongRC, []string{"--it=9", "--gid=2"}, func(c *PingpongConfig) { c.Iters, c.GIDIndex = 9, 2 }},
		{"clustered", PingpongRC, []string{"-ecp0x10"}, func(c *PingpongConfig) { c.Events, c.Check, c.Port = true, true, 16 }},
		{"octal", PingpongRC, []string{"-s", "010"}, func(c *PingpongConfig) { c.Size = 8 }},
		{"rc extras", PingpongRC, []string{"-o", "-P", "-t", "-N"}, func(c *PingpongConfig) { c.ODP, c.Prefetch, c.Timestamps, c.NewSend = true, true, true, true }},
		{"rc iodp", PingpongRC, []string{"-O", "-P"}, func(c *PingpongConfig) { c.ODP, c.ImplicitOD, c.Prefetch = true, true, true }},
		{"rc dm", PingpongRC, []string{"-j"}, func(c *PingpongConfig) { c.DM = true }},
		{"srq", PingpongSRQ, []string{"-q", "4", "-o", "-m", "256"}, func(c *PingpongConfig) { c.NumQP, c.ODP, c.MTU = 4, true, ib.MTU256 }},
		{"srq 255 QPs", PingpongSRQ, []string{"-q", "255"}, func(c *PingpongConfig) { c.NumQP = 255 }},
		{"ud", PingpongUD, []string{"-s", "2048", "-l", "1"}, func(c *PingpongConfig) { c.Size, c.SL = 2048, 1 }},
		{"double dash", PingpongRC, []string{"--", "-host"}, func(c *PingpongConfig) { c.Server = "-host" }},
		{"port 65535", PingpongRC, []string{"-p", "65535"}, func(c *PingpongConfig) { c.Port = 65535 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePingpongFlags(tc.mode, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			want := PingpongDefaults(tc.mode)
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParsePingpongFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		mode PingpongMode
		args []string
	}{
		{"invalid mode", 0, nil},
		{"port above 65535", PingpongRC, []string{"-p", "65536"}},
		{"negative port", PingpongRC, []string{"-p", "-1"}},
		{"ib port 0", PingpongRC, []string{"-i", "0"}},
		{"bad mtu", PingpongRC, []string{"-m", "1500"}},
		{"ud has no -m", PingpongUD, []string{"-m", "1024"}},
		{"uc has no -o", PingpongUC, []string{"-o"}},
		{"srq has no -t", PingpongSRQ, []string{"-t"}},
		{"rc has no -q", PingpongRC, []string{"-q", "2"}},
		{"two operands", PingpongRC, []string{"a", "b"}},
		{"missing argument", PingpongRC, []string{"-n"}},
		{"missing long argument", PingpongRC, []string{"--iters"}},
		{"flag with argument", PingpongRC, []string{"--events=1"}},
		{"unknown long", PingpongRC, []string{"--bogus"}},
		{"ambiguous long", PingpongRC, []string{"--i=1"}},
		{"junk number", PingpongRC, []string{"-n", "12abc"}},
		{"empty number", PingpongRC, []string{"-n", ""}},
		{"go spelling", PingpongRC, []string{"-n", "1_000"}},
		{"odp and dm", PingpongRC, []string{"-o", "-j"}},
		{"prefetch without odp", PingpongRC, []string{"-P"}},
		{"srq size 0", PingpongSRQ, []string{"-s", "0"}},
		{"srq 256 QPs", PingpongSRQ, []string{"-q", "256", "-r", "1000"}},
		{"srq QPs above rx depth", PingpongSRQ, []string{"-q", "20", "-r", "10"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := ParsePingpongFlags(tc.mode, tc.args); !errors.Is(err, unix.EINVAL) {
				t.Fatalf("got %+v, %v; want EINVAL", c, err)
			}
		})
	}
}

func TestPerftestDefaults(t *testing.T) {
	// perftest 4.5-0.17 --help: sizes 65536 (BW), 2 (latency), 8
	// (atomic, fixed); iterations 5000 for ib_write_bw, else 1000.
	tests := []struct {
		test  PerftestTest
		size  uint64
		iters uint64
	}{
		{PerftestWriteBW, 65536, 5000}, {PerftestReadBW, 65536, 1000}, {PerftestSendBW, 65536, 1000}, {PerftestAtomicBW, 8, 1000},
		{PerftestWriteLat, 2, 1000}, {PerftestReadLat, 2, 1000}, {PerftestSendLat, 2, 1000}, {PerftestAtomicLat, 8, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.test.String(), func(t *testing.T) {
			c, err := ParsePerftestFlags(tc.test, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Size != tc.size || c.Iters != tc.iters || c.Port != 18515 || c.IBPort != 1 || c.Connection != "RC" ||
				c.GIDIndex != -1 || c.NumQP != 1 || c.MTU != 0 || c.QPTimeout != 14 || c.Server != "" {
				t.Fatalf("defaults %+v", c)
			}
			if tc.test.IsBW() && c.TxDepth != 128 {
				t.Errorf("tx depth %d", c.TxDepth)
			}
			if (tc.test.Verb() == VerbSend) != (c.RxDepth == 512) {
				t.Errorf("rx depth %d", c.RxDepth)
			}
			if (tc.test.Verb() == VerbAtomic) != (c.AtomicType == "FETCH_AND_ADD") {
				t.Errorf("atomic type %q", c.AtomicType)
			}
		})
	}
}

func TestParsePerftestFlags(t *testing.T) {
	tests := []struct {
		name string
		test PerftestTest
		args []string
		want func(*PerftestConfig)
	}{
		{"capture write_bw client", PerftestWriteBW, []string{"-x", "1", "-F", "-n", "100", "-s", "4096", "10.77.0.11"},
			func(c *PerftestConfig) {
				c.GIDIndex, c.CPUFreq, c.Iters, c.Size, c.SizeRequested, c.Server = 1, true, 100, 4096, true, "10.77.0.11"
			}},
		{"capture atomic_bw server", PerftestAtomicBW, []string{"-x", "1", "-F", "-n", "100"},
			func(c *PerftestConfig) { c.GIDIndex, c.CPUFreq, c.Iters = 1, true, 100 }},
		{"bw options", PerftestSendBW, []string{"-d", "rxe0", "-i", "1", "-q", "4", "-m", "2048", "--report_gbits", "-a", "-c", "UD", "-t", "64", "-I", "128", "-r", "256", "-b", "--use-srq", "-e"},
			func(c *PerftestConfig) {
				c.IBDev, c.NumQP, c.MTU, c.ReportGbits, c.All, c.Connection, c.TxDepth, c.InlineSize, c.RxDepth, c.Bidirectional, c.UseSRQ, c.Events =
					"rxe0", 4, ib.MTU2048, true, true, "UD", 64, 128, 256, true, true, true
			}},
		{"read outs", PerftestReadBW, []string{"-o", "16", "--outs=8"}, func(c *PerftestConfig) { c.OutReads, c.CQMod = 8, 1 }},
		{"atomic cas", PerftestAtomicLat, []string{"-A", "CMP_AND_SWAP", "-C", "-U"}, func(c *PerftestConfig) {
			c.AtomicType, c.ReportCycles, c.ReportHistogram, c.ReportUnsorted = "CMP_AND_SWAP", true, true, true
		}},
		{"lowercase connection", PerftestWriteBW, []string{"-c", "uc"}, func(c *PerftestConfig) { c.Connection, c.CQMod = "UC", 1 }},
		{"exchange flags", PerftestWriteLat, []string{"--dont_xchg_versions", "--ipv6", "-R", "-z", "-p", "9999"},
			func(c *PerftestConfig) {
				c.DontXchgVersions, c.IPv6, c.RDMACM, c.ComRDMACM, c.Port = true, true, true, true, 9999
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePerftestFlags(tc.test, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			want := PerftestDefaults(tc.test)
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParsePerftestFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		test PerftestTest
		args []string
	}{
		{"invalid test", 0, nil},
		{"iters below 5", PerftestWriteBW, []string{"-n", "4"}},
		{"size 0", PerftestWriteBW, []string{"-s", "0"}},
		{"size above 2^23", PerftestWriteBW, []string{"-s", "8388609"}},
		{"atomic size", PerftestAtomicBW, []string{"-s", "16"}},
		{"bad mtu", PerftestReadBW, []string{"-m", "9000"}},
		{"UD on write", PerftestWriteBW, []string{"-c", "UD"}},
		{"UC on read", PerftestReadBW, []string{"-c", "UC"}},
		{"bad atomic type", PerftestAtomicBW, []string{"-A", "SWAP"}},
		{"inline on read", PerftestReadBW, []string{"-I", "64"}},
		{"outs on write", PerftestWriteBW, []string{"-o", "4"}},
		{"qp on latency", PerftestWriteLat, []string{"-q", "2"}},
		{"gbits on latency", PerftestSendLat, []string{"--report_gbits"}},
		{"port", PerftestWriteBW, []string{"-p", "70000"}},
		{"two servers", PerftestWriteBW, []string{"a", "b"}},
		{"junk", PerftestWriteBW, []string{"-n", "ten"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := ParsePerftestFlags(tc.test, tc.args); !errors.Is(err, unix.EINVAL) {
				t.Fatalf("got %+v, %v; want EINVAL", c, err)
			}
		})
	}
}

func TestPerftestTestNames(t *testing.T) {
	for p := PerftestWriteBW; p <= PerftestAtomicLat; p++ {
		for _, s := range []string{p.String(), p.Tool()} {
			if got, err := ParsePerftestTest(s); err != nil || got != p {
				t.Errorf("%s: %v, %v", s, got, err)
			}
		}
	}
	if _, err := ParsePerftestTest("ib_foo"); !errors.Is(err, unix.EINVAL) {
		t.Error(err)
	}
	if PerftestTest(0).IsValid() || PerftestVerb(0).String() != "PerftestVerb(0)" {
		t.Error("zero values must be invalid")
	}
}

// TestParsePerftestDependencies checks the force_dependecies rules about
// -D, -f, -b and large messages against what perftest 4.5-0.17's binaries
// do with these command lines (no RDMA device needed: they fail or warn
// before opening one).
func TestParsePerftestDependencies(t *testing.T) {
	warn := []string{"Warning: Large message requested and CQ moderation enabled", "Warning: It can lead to inaccurate results"}
	tests := []struct {
		name     string
		test     PerftestTest
		args     []string
		duration int
		margin   int
		cqMod    int
		noPeak   bool
		warnings []string
	}{
		{"no -D", PerftestWriteBW, nil, 0, -1, 1, false, nil},
		{"-D 3: margin 0", PerftestWriteBW, []string{"-D", "3"}, 3, 0, 1, true, nil},
		{"-D 5: margin 1", PerftestReadBW, []string{"--duration=5"}, 5, 1, 1, true, nil},
		{"-D 10: margin 2", PerftestWriteLat, []string{"-D", "10"}, 10, 2, 0, true, nil},
		{"-D 1 -f 0", PerftestWriteBW, []string{"-D", "1", "--margin=0"}, 1, 0, 1, true, nil},
		{"-D 5 -f 2", PerftestSendBW, []string{"-D5", "-f2", "-b"}, 5, 2, 1, true, nil},
		{"-f 2 without -D", PerftestWriteBW, []string{"-f", "2"}, 0, 2, 1, false, nil},
		{"-D with -b", PerftestAtomicBW, []string{"-D", "3", "-b"}, 3, 0, 0, true, nil},
		{"-Q 10 large", PerftestWriteBW, []string{"-Q", "10"}, 0, -1, 10, false, warn},
		{"-Q 200 large", PerftestWriteBW, []string{"-Q", "200", "-D", "5", "-b"}, 5, 1, 200, true, warn},
		{"-Q 10 -s 8193", PerftestWriteBW, []string{"-Q", "10", "-s", "8193"}, 0, -1, 10, false, warn},
		{"-Q 1 large", PerftestWriteBW, []string{"-Q", "1"}, 0, -1, 1, false, nil},
		{"-Q 10 -s 8192", PerftestWriteBW, []string{"-Q", "10", "-s", "8192"}, 0, -1, 10, false, nil},
		{"-s 8192 keeps default", PerftestWriteBW, []string{"-s", "8192"}, 0, -1, 0, false, nil},
		{"-s 8193 cq mod 1", PerftestSendBW, []string{"-s", "8193"}, 0, -1, 1, false, nil},
		{"-Q 10 -a", PerftestWriteBW, []string{"-Q", "10", "-a"}, 0, -1, 10, false, nil},
		{"-a keeps default", PerftestReadBW, []string{"-a"}, 0, -1, 0, false, nil},
		{"-Q 10 -e", PerftestSendBW, []string{"-Q", "10", "-e"}, 0, -1, 10, false, nil},
		{"-e keeps default", PerftestReadBW, []string{"-e"}, 0, -1, 0, false, nil},
		{"-Q 10 UD", PerftestSendBW, []string{"-Q", "10", "-c", "UD"}, 0, -1, 10, false, nil},
		{"UD keeps default", PerftestSendBW, []string{"-c", "UD"}, 0, -1, 0, false, nil},
		{"atomic keeps default", PerftestAtomicBW, nil, 0, -1, 0, false, nil},
		{"latency large", PerftestSendLat, []string{"-s", "10000", "-D", "3"}, 3, 0, 1, true, nil},
		{"-l 4: cq mod 4", PerftestWriteBW, []string{"-l", "4", "-s", "64"}, 0, -1, 4, false,
			[]string{"Post List requested - CQ moderation will be the size of the post list"}},
		{"-l 4 large", PerftestSendBW, []string{"--post_list=4"}, 0, -1, 4, false,
			[]string{"Post List requested - CQ moderation will be the size of the post list"}},
		{"-l 8 -Q 4", PerftestWriteBW, []string{"-l", "8", "-Q", "4", "-s", "64"}, 0, -1, 4, false, nil},
		{"-l 3 -D", PerftestWriteBW, []string{"-l", "3", "-D", "3", "-s", "64"}, 3, 0, 3, true,
			[]string{"Post List requested - CQ moderation will be the size of the post list"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParsePerftestFlags(tc.test, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.Duration != tc.duration || c.Margin != tc.margin || c.CQMod != tc.cqMod || c.NoPeak != tc.noPeak ||
				!reflect.DeepEqual(c.Warnings, tc.warnings) {
				t.Fatalf("duration %d margin %d cq mod %d noPeak %v warnings %q; want %d %d %d %v %q",
					c.Duration, c.Margin, c.CQMod, c.NoPeak, c.Warnings, tc.duration, tc.margin, tc.cqMod, tc.noPeak, tc.warnings)
			}
			if c.CQModRequested != strings.Contains(strings.Join(tc.args, " "), "-Q") {
				t.Errorf("CQModRequested %v", c.CQModRequested)
			}
			wantText := ""
			if tc.warnings != nil {
				wantText = PerftestResultLine + strings.Join(tc.warnings, "\n") + "\n"
			}
			if got := c.WarningText(); got != wantText {
				t.Errorf("warning text %q, want %q", got, wantText)
			}
		})
	}
}

// TestParsePerftestDependencyErrors checks the refusals: the message,
// where the tool prints what (stdout rule, stderr lines) and EINVAL.
func TestParsePerftestDependencyErrors(t *testing.T) {
	const parserFailed = " Parser function exited with Error\n"
	tests := []struct {
		name       string
		test       PerftestTest
		args       []string
		msg        string
		resultLine bool // stdout gets RESULT_LINE (force_dependecies)
	}{
		{"-D with -a", PerftestWriteBW, []string{"-D", "3", "-a"}, "Duration mode currently doesn't support running on all sizes.", true},
		{"-D with -a on a latency test", PerftestWriteLat, []string{"-a", "-D", "3"}, "Duration mode currently doesn't support running on all sizes.", true},
		{"-D with -a and a margin", PerftestWriteBW, []string{"-D", "3", "-f", "2", "-a"}, "Duration mode currently doesn't support running on all sizes.", true},
		{"-D with -e", PerftestReadBW, []string{"-D", "3", "-e"}, "Duration mode doesn't work with events.", true},
		{"-l 3 -n 100", PerftestWriteBW, []string{"-l", "3", "-n", "100"}, "Number of iterations must be a multiple of post list size", true},
		{"SRQ shallower than the QPs", PerftestSendBW, []string{"--use-srq", "-q", "8", "-r", "4"}, " Using SRQ depth should be greater than number of QPs.", true},
		{"SRQ clamped by -n", PerftestSendBW, []string{"--use-srq", "-q", "8", "-n", "6"}, " Using SRQ depth should be greater than number of QPs.", true},
		{"-l 6 -Q 4", PerftestWriteBW, []string{"-l", "6", "-Q", "4", "-n", "600"}, "Post list size must be a multiple of CQ moderation", true},
		{"-D with -e before -a", PerftestReadBW, []string{"-D", "3", "-a", "-e"}, "Duration mode doesn't work with events.", true},
		{"-D with -e before margin", PerftestSendLat, []string{"-D", "3", "-e", "-f", "1"}, "Duration mode doesn't work with events.", true},
		{"--odp with atomics", PerftestAtomicBW, []string{"--odp"}, " ODP does not support ATOMICS for now", true},
		{"--odp with UC", PerftestSendBW, []string{"--odp", "-c", "UC"}, " ODP does not support UC", true},
		{"--odp after the post list", PerftestSendBW, []string{"--odp", "-c", "UC", "-l", "3", "-n", "10"}, "Number of iterations must be a multiple of post list size", true},
		{"--odp before the margin", PerftestAtomicLat, []string{"--odp", "-D", "2", "-f", "2"}, " ODP does not support ATOMICS for now", true},
		{"-D 4 -f 2", PerftestWriteBW, []string{"-D", "4", "-f", "2"}, "please check that DURATION > 2*MARGIN", true},
		{"-D 2 -f 1", PerftestWriteBW, []string{"-D", "2", "-f", "1"}, "please check that DURATION > 2*MARGIN", true},
		{"-f 3 without -D", PerftestWriteBW, []string{"-f", "3"}, "please check that DURATION > 2*MARGIN", true},
		{"-f 3 with -Q", PerftestWriteBW, []string{"-Q", "10", "-f", "3"}, "please check that DURATION > 2*MARGIN", true},
		{"-D 0", PerftestWriteBW, []string{"-D", "0"}, " Duration period must be positive", false},
		{"-D -2", PerftestSendLat, []string{"--duration=-2"}, " Duration period must be positive", false},
		{"-f -1", PerftestWriteBW, []string{"-f", "-1"}, " Margin must be non-negative", false},
		{"-b on write_lat", PerftestWriteLat, []string{"-b"}, " Bidirectional is only available in BW test", false},
		{"-b on send_lat", PerftestSendLat, []string{"--bidirectional", "-D", "3"}, " Bidirectional is only available in BW test", false},
		{"-b on atomic_lat", PerftestAtomicLat, []string{"-b"}, " Bidirectional is only available in BW test", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParsePerftestFlags(tc.test, tc.args)
			if !errors.Is(err, unix.EINVAL) {
				t.Fatalf("got %+v, %v; want EINVAL", c, err)
			}
			var fe *PerftestFlagError
			if !errors.As(err, &fe) {
				t.Fatalf("%T %v: not a *PerftestFlagError", err, err)
			}
			if fe.Tool != tc.test.Tool() || fe.Msg != tc.msg || fe.ResultLine != tc.resultLine || fe.ParserFailed == tc.resultLine {
				t.Fatalf("%+v; want msg %q, result line %v", fe, tc.msg, tc.resultLine)
			}
			if want := tc.test.Tool() + ": " + strings.TrimSpace(tc.msg) + ": invalid argument"; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			stdout, stderr := fe.Output()
			wantOut, wantErr := "", tc.msg+"\n"+parserFailed
			if tc.resultLine {
				wantOut, wantErr = PerftestResultLine, tc.msg+"\n"
			}
			if strings.Contains(tc.msg, "Using SRQ") { // printf, not fprintf(stderr)
				wantOut, wantErr = PerftestResultLine+tc.msg+"\n", ""
			}
			if stdout != wantOut || stderr != wantErr {
				t.Errorf("output %q, %q; want %q, %q", stdout, stderr, wantOut, wantErr)
			}
		})
	}
}

// TestFitUDSize: check_mtu's UD rule: the BW tests' default size shrinks
// to the MTU with the tool's two lines on stderr, an -s above the MTU is
// refused, sizes that fit and other transports are left alone.
func TestFitUDSize(t *testing.T) {
	for _, tc := range []struct {
		test     PerftestTest
		args     []string
		mtu      int
		size     uint64
		msg, err string
	}{
		{PerftestSendBW, []string{"-c", "UD"}, 4096, 4096, " Max msg size in UD is MTU 4096\n Changing to this MTU\n", ""},
		{PerftestSendBW, []string{"-c", "UD"}, 1024, 1024, " Max msg size in UD is MTU 1024\n Changing to this MTU\n", ""},
		{PerftestSendBW, []string{"-c", "UD", "-s", "2048"}, 1024, 0, "", " Max message size in UD cannot be greater than MTU "},
		{PerftestSendBW, []string{"-c", "UD", "-s", "1024"}, 1024, 1024, "", ""},
		{PerftestSendLat, []string{"-c", "UD"}, 1024, 2, "", ""},
		{PerftestSendBW, []string{"-c", "UC"}, 1024, 65536, "", ""},
	} {
		c, err := ParsePerftestFlags(tc.test, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := c.FitUDSize(tc.mtu)
		var fe *PerftestFlagError
		switch {
		case tc.err != "" && (!errors.As(err, &fe) || fe.Msg != tc.err):
			t.Errorf("%v at %d: error %v, want %q", tc.args, tc.mtu, err, tc.err)
		case tc.err == "" && (err != nil || msg != tc.msg || c.Size != tc.size):
			t.Errorf("%v at %d: size %d, %q, %v; want %d, %q", tc.args, tc.mtu, c.Size, msg, err, tc.size, tc.msg)
		}
	}
}
