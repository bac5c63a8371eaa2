package oob

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

func TestPingpongDefaults(t *testing.T) {
	// The defaults of rdma-core 44.0's main()s (the ud size checked in
	// the Debian 12 binary: 1024, although its usage says 2048).
	tests := []struct {
		mode  PingpongMode
		size  uint32
		mtu   qpstate.MTU
		numQP uint32
	}{
		{PingpongRC, 4096, qpstate.MTU1024, 0},
		{PingpongUC, 4096, qpstate.MTU1024, 0},
		{PingpongUD, 1024, 0, 0},
		{PingpongSRQ, 4096, qpstate.MTU1024, 16},
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
					1234, "rxe0", 2, 64, qpstate.MTU4096, 10, 7, 3, true, 0, true
			}},
		{"abbreviated long", PingpongRC, []string{"--it=9", "--gid=2"}, func(c *PingpongConfig) { c.Iters, c.GIDIndex = 9, 2 }},
		{"clustered", PingpongRC, []string{"-ecp0x10"}, func(c *PingpongConfig) { c.Events, c.Check, c.Port = true, true, 16 }},
		{"octal", PingpongRC, []string{"-s", "010"}, func(c *PingpongConfig) { c.Size = 8 }},
		{"rc extras", PingpongRC, []string{"-o", "-P", "-t", "-N"}, func(c *PingpongConfig) { c.ODP, c.Prefetch, c.Timestamps, c.NewSend = true, true, true, true }},
		{"rc iodp", PingpongRC, []string{"-O", "-P"}, func(c *PingpongConfig) { c.ODP, c.ImplicitOD, c.Prefetch = true, true, true }},
		{"rc dm", PingpongRC, []string{"-j"}, func(c *PingpongConfig) { c.DM = true }},
		{"srq", PingpongSRQ, []string{"-q", "4", "-o", "-m", "256"}, func(c *PingpongConfig) { c.NumQP, c.ODP, c.MTU = 4, true, qpstate.MTU256 }},
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
			if got != want {
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
				c.GIDIndex, c.CPUFreq, c.Iters, c.Size, c.Server = 1, true, 100, 4096, "10.77.0.11"
			}},
		{"capture atomic_bw server", PerftestAtomicBW, []string{"-x", "1", "-F", "-n", "100"},
			func(c *PerftestConfig) { c.GIDIndex, c.CPUFreq, c.Iters = 1, true, 100 }},
		{"bw options", PerftestSendBW, []string{"-d", "rxe0", "-i", "1", "-D", "5", "-q", "4", "-m", "2048", "--report_gbits", "-a", "-c", "UD", "-t", "64", "-I", "128", "-r", "256", "-b", "--use-srq", "-e"},
			func(c *PerftestConfig) {
				c.IBDev, c.Duration, c.NumQP, c.MTU, c.ReportGbits, c.All, c.Connection, c.TxDepth, c.InlineSize, c.RxDepth, c.Bidirectional, c.UseSRQ, c.Events =
					"rxe0", 5, 4, qpstate.MTU2048, true, true, "UD", 64, 128, 256, true, true, true
			}},
		{"read outs", PerftestReadBW, []string{"-o", "16", "--outs=8"}, func(c *PerftestConfig) { c.OutReads = 8 }},
		{"atomic cas", PerftestAtomicLat, []string{"-A", "CMP_AND_SWAP", "-C", "-U"}, func(c *PerftestConfig) {
			c.AtomicType, c.ReportCycles, c.ReportHistogram, c.ReportUnsorted = "CMP_AND_SWAP", true, true, true
		}},
		{"lowercase connection", PerftestWriteBW, []string{"-c", "uc"}, func(c *PerftestConfig) { c.Connection = "UC" }},
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
			if got != want {
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
