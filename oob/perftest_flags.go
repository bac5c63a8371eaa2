package oob

import (
	"fmt"
	"github.com/softroce/softroce/internal/getopt"
	"strings"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// PerftestTest is one of the eight perftest tools softroce speaks for.
// The zero value is invalid.
type PerftestTest int

// The perftest tools (src/write_bw.c, read_bw.c, ... of perftest).
const (
	PerftestWriteBW PerftestTest = iota + 1
	PerftestReadBW
	PerftestSendBW
	PerftestAtomicBW
	PerftestWriteLat
	PerftestReadLat
	PerftestSendLat
	PerftestAtomicLat
)

var perftestNames = [...]string{
	PerftestWriteBW: "write_bw", PerftestReadBW: "read_bw", PerftestSendBW: "send_bw", PerftestAtomicBW: "atomic_bw",
	PerftestWriteLat: "write_lat", PerftestReadLat: "read_lat", PerftestSendLat: "send_lat", PerftestAtomicLat: "atomic_lat",
}

// String returns the test's name ("write_bw").
func (p PerftestTest) String() string {
	if p.IsValid() {
		return perftestNames[p]
	}
	return fmt.Sprintf("PerftestTest(%d)", int(p))
}

// IsValid reports whether p is one of the eight tests.
func (p PerftestTest) IsValid() bool { return p >= PerftestWriteBW && p <= PerftestAtomicLat }

// Tool returns the perftest binary ("ib_write_bw").
func (p PerftestTest) Tool() string { return "ib_" + p.String() }

// IsBW reports whether p is a bandwidth test (else a latency test).
func (p PerftestTest) IsBW() bool { return p >= PerftestWriteBW && p <= PerftestAtomicBW }

// Verb returns the operation of p.
func (p PerftestTest) Verb() PerftestVerb {
	switch p {
	case PerftestWriteBW, PerftestWriteLat:
		return VerbWrite
	case PerftestReadBW, PerftestReadLat:
		return VerbRead
	case PerftestSendBW, PerftestSendLat:
		return VerbSend
	case PerftestAtomicBW, PerftestAtomicLat:
		return VerbAtomic
	}
	return 0
}

// ParsePerftestTest parses a test name ("write_bw", or the tool name
// "ib_write_bw").
func ParsePerftestTest(s string) (PerftestTest, error) {
	s = strings.TrimPrefix(s, "ib_")
	for p := PerftestWriteBW; p <= PerftestAtomicLat; p++ {
		if perftestNames[p] == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("oob: unknown perftest test %q: %w", s, unix.EINVAL)
}

// PerftestVerb is perftest's enum of operations; String prints the names
// the tools put in their title line.
type PerftestVerb int

// The verbs, in perftest's order (SEND=0 there; here zero is invalid).
const (
	VerbSend PerftestVerb = iota + 1
	VerbWrite
	VerbRead
	VerbAtomic
)

// String returns "Send", "RDMA_Write", "RDMA_Read" or "Atomic".
func (v PerftestVerb) String() string {
	switch v {
	case VerbSend:
		return "Send"
	case VerbWrite:
		return "RDMA_Write"
	case VerbRead:
		return "RDMA_Read"
	case VerbAtomic:
		return "Atomic"
	}
	return fmt.Sprintf("PerftestVerb(%d)", int(v))
}

// PerftestConfig is the main part of a perftest command line, with the
// defaults of Debian 12's perftest 4.5-0.17 (its --help).
type PerftestConfig struct {
	Test             PerftestTest
	Server           string // operand: connect to it (client); "" is the server
	Port             int    // -p --port (18515)
	IBDev            string // -d --ib-dev ("" = first found)
	IBPort           int    // -i --ib-port (1)
	GIDIndex         int    // -x --gid-index (-1: default, which is 0 or the best GID on Ethernet)
	Size             uint64 // -s --size (65536 BW, 2 latency, 8 atomic and fixed)
	SizeRequested    bool   // -s was given (perftest's req_size)
	Iters            uint64 // -n --iters (5000 write_bw, 1000 the others; at least 5)
	Duration         int    // -D --duration seconds (0: iterations mode)
	Margin           int    // -f --margin seconds (-1: not given; with -D it becomes Duration/4)
	All              bool   // -a --all: sizes 2..2^23
	Connection       string // -c --connection (RC)
	TxDepth          int    // -t --tx-depth (128; BW tests)
	RxDepth          int    // -r --rx-depth (512; send tests)
	NumQP            int    // -q --qp (1; BW tests)
	MTU              ib.MTU // -m --mtu (0: the port's active MTU)
	InlineSize       int    // -I --inline_size (-1: the tool's default)
	OutReads         int    // -o --outs (0: the device maximum; read and atomic)
	AtomicType       string // -A --atomic_type (FETCH_AND_ADD; atomic tests)
	SL               int    // -S --sl (0)
	QPTimeout        int    // -u --qp-timeout (14)
	PostList         int    // -l --post_list (1; BW tests)
	CQMod            int    // -Q --cq-mod (0: the tool's default, 100 or the TX depth; 1 for large messages, see ParsePerftestFlags)
	CQModRequested   bool   // -Q was given (perftest's req_cq_mod)
	Bidirectional    bool   // -b --bidirectional (BW tests)
	Events           bool   // -e --events (read, atomic, send)
	CPUFreq          bool   // -F --CPU-freq
	NoPeak           bool   // -N --noPeak (BW tests); forced on by -D
	ReportGbits      bool   // --report_gbits (BW tests)
	ReportBoth       bool   // --report-both (BW tests)
	ReportPerPort    bool   // --report-per-port (BW tests)
	ReportCycles     bool   // -C --report-cycles (latency tests)
	ReportHistogram  bool   // -H --report-histogram (latency tests)
	ReportUnsorted   bool   // -U --report-unsorted (latency tests)
	IPv6             bool   // --ipv6
	DontXchgVersions bool   // --dont_xchg_versions
	RDMACM           bool   // -R --rdma_cm (not supported by package oob)
	ComRDMACM        bool   // -z --com_rdma_cm (not supported by package oob)
	UseSRQ           bool   // --use-srq (send tests)
	PerformWarmUp    bool   // --perform_warm_up
	ODP              bool   // --odp: the buffers are on-demand paging MRs
	// Warnings are the lines (without newline) perftest's
	// force_dependecies prints on stdout, after a PerftestResultLine,
	// for this command line; nil if none. See PerftestConfig.WarningText.
	Warnings []string
}

// PerftestDefaults returns the defaults of test p's tool, as perftest's
// init_perftest_params sets them: before force_dependecies, so CQMod is 0
// where ParsePerftestFlags(p, nil) makes it 1 (BW tests of 65536 bytes).
func PerftestDefaults(p PerftestTest) PerftestConfig {
	c := PerftestConfig{
		Test: p, Port: DefaultPort, IBPort: 1, GIDIndex: -1, Size: 65536, Iters: 1000,
		Connection: "RC", TxDepth: 128, NumQP: 1, InlineSize: -1, QPTimeout: 14, PostList: 1, Margin: -1,
	}
	if !p.IsBW() {
		c.Size = 2
		c.TxDepth = 1
	}
	switch p {
	case PerftestWriteBW:
		c.Iters = 5000
	case PerftestAtomicBW, PerftestAtomicLat:
		c.Size = 8
	}
	if p.Verb() == VerbAtomic {
		c.AtomicType = "FETCH_AND_ADD"
	}
	if p.Verb() == VerbSend {
		c.RxDepth = 512
	}
	return c
}

// perftestConnections lists the -c values each verb takes (its --help).
func perftestConnections(p PerftestTest) []string {
	switch p.Verb() {
	case VerbSend:
		return []string{"RC", "XRC", "UC", "UD", "DC", "SRD"}
	case VerbWrite:
		return []string{"RC", "XRC", "UC", "DC"}
	}
	return []string{"RC", "XRC", "DC"}
}

// perftestOptions builds test p's option table from its --help.
func perftestOptions(p PerftestTest) []getopt.Option {
	o := []getopt.Option{
		{Short: 'p', Long: "port", HasArg: true, Key: "port"},
		{Short: 'd', Long: "ib-dev", HasArg: true, Key: "ib-dev"},
		{Short: 'i', Long: "ib-port", HasArg: true, Key: "ib-port"},
		{Short: 'x', Long: "gid-index", HasArg: true, Key: "gid-index"},
		{Short: 'n', Long: "iters", HasArg: true, Key: "iters"},
		{Short: 'D', Long: "duration", HasArg: true, Key: "duration"},
		{Short: 'f', Long: "margin", HasArg: true, Key: "margin"},
		{Short: 'b', Long: "bidirectional", HasArg: false, Key: "bidirectional"}, // in every tool's getopt table; refused by the latency tests
		{Short: 'c', Long: "connection", HasArg: true, Key: "connection"},
		{Short: 'm', Long: "mtu", HasArg: true, Key: "mtu"},
		{Short: 'S', Long: "sl", HasArg: true, Key: "sl"},
		{Short: 'u', Long: "qp-timeout", HasArg: true, Key: "qp-timeout"},
		{Short: 'F', Long: "CPU-freq", HasArg: false, Key: "CPU-freq"},
		{Short: 'R', Long: "rdma_cm", HasArg: false, Key: "rdma_cm"},
		{Short: 'z', Long: "com_rdma_cm", HasArg: false, Key: "com_rdma_cm"},
		{Short: 0, Long: "ipv6", HasArg: false, Key: "ipv6"},
		{Short: 0, Long: "dont_xchg_versions", HasArg: false, Key: "dont_xchg_versions"},
		{Short: 0, Long: "perform_warm_up", HasArg: false, Key: "perform_warm_up"},
		{Short: 0, Long: "odp", HasArg: false, Key: "odp"},
	}
	v := p.Verb()
	if v != VerbAtomic {
		o = append(o, getopt.Option{Short: 's', Long: "size", HasArg: true, Key: "size"}, getopt.Option{Short: 'a', Long: "all", HasArg: false, Key: "all"})
	} else {
		o = append(o, getopt.Option{Short: 'A', Long: "atomic_type", HasArg: true, Key: "atomic_type"})
	}
	if v == VerbRead || v == VerbAtomic {
		o = append(o, getopt.Option{Short: 'o', Long: "outs", HasArg: true, Key: "outs"})
	} else {
		o = append(o, getopt.Option{Short: 'I', Long: "inline_size", HasArg: true, Key: "inline_size"})
	}
	if v != VerbWrite {
		o = append(o, getopt.Option{Short: 'e', Long: "events", HasArg: false, Key: "events"})
	}
	if v == VerbSend {
		o = append(o, getopt.Option{Short: 'r', Long: "rx-depth", HasArg: true, Key: "rx-depth"}, getopt.Option{Short: 0, Long: "use-srq", HasArg: false, Key: "use-srq"})
	}
	if p.IsBW() {
		o = append(o,
			getopt.Option{Short: 't', Long: "tx-depth", HasArg: true, Key: "tx-depth"},
			getopt.Option{Short: 'q', Long: "qp", HasArg: true, Key: "qp"},
			getopt.Option{Short: 'l', Long: "post_list", HasArg: true, Key: "post_list"},
			getopt.Option{Short: 'Q', Long: "cq-mod", HasArg: true, Key: "cq-mod"},
			getopt.Option{Short: 'N', Long: "noPeak", HasArg: false, Key: "noPeak"},
			getopt.Option{Short: 0, Long: "report_gbits", HasArg: false, Key: "report_gbits"},
			getopt.Option{Short: 0, Long: "report-both", HasArg: false, Key: "report-both"},
			getopt.Option{Short: 0, Long: "report-per-port", HasArg: false, Key: "report-per-port"})
	} else {
		o = append(o,
			getopt.Option{Short: 'C', Long: "report-cycles", HasArg: false, Key: "report-cycles"},
			getopt.Option{Short: 'H', Long: "report-histogram", HasArg: false, Key: "report-histogram"},
			getopt.Option{Short: 'U', Long: "report-unsorted", HasArg: false, Key: "report-unsorted"})
	}
	return o
}

// ParsePerftestFlags parses the arguments (without argv[0]) of test p's
// tool into a config, starting from PerftestDefaults(p). Options the tool
// has but this parser does not are EINVAL like unknown ones; -R and -z
// parse but are for the caller to refuse (package oob speaks only the
// ethernet exchange). Range checks follow the help text: -n at least 5,
// -s 1..2^23 (not on atomic tests: "Message size cannot be changed for
// Atomic tests"), -m 256..4096 in powers of two, -c and -A from the
// listed sets, -p up to 65535, counts at least 1. Then it applies the
// rules of perftest's force_dependecies about -D, -f, -a, -e and the CQ
// moderation of large messages (see forceDependencies): the tool's own
// refusals are *PerftestFlagError, its warnings land in Warnings.
func ParsePerftestFlags(p PerftestTest, args []string) (PerftestConfig, error) {
	if !p.IsValid() {
		return PerftestConfig{}, fmt.Errorf("oob: perftest flags: invalid test %d: %w", int(p), unix.EINVAL)
	}
	tool := p.Tool()
	c := PerftestDefaults(p)
	opts, operands, err := getopt.Parse(tool, perftestOptions(p), args)
	if err != nil {
		return PerftestConfig{}, err
	}
	rangeErr := func(name string, v int64, lo, hi int64) error {
		return fmt.Errorf("%s: %s %d should be between %d and %d: %w", tool, name, v, lo, hi, unix.EINVAL)
	}
	intArg := func(o getopt.Opt, lo, hi int64) (int64, error) {
		v, err := parseCInt(tool, "--"+o.Key, o.Arg, 64)
		if err != nil {
			return 0, err
		}
		if v < lo || v > hi {
			return 0, rangeErr("--"+o.Key, v, lo, hi)
		}
		return v, nil
	}
	const maxInt = 1<<31 - 1
	for _, o := range opts {
		var v int64
		var err error
		switch o.Key {
		case "port":
			v, err = intArg(o, 0, 65535)
			c.Port = int(v)
		case "ib-dev":
			c.IBDev = o.Arg
		case "ib-port":
			v, err = intArg(o, 1, 255)
			c.IBPort = int(v)
		case "gid-index":
			v, err = intArg(o, 0, maxInt)
			c.GIDIndex = int(v)
		case "iters":
			v, err = intArg(o, 5, 100000000)
			c.Iters = uint64(v)
		case "duration":
			// CHECK_VALUE_POSITIVE(duration, int, "Duration period")
			if v, err = parseCInt(tool, "--"+o.Key, o.Arg, 64); err == nil && v <= 0 {
				err = perftestParserError(tool, " Duration period must be positive")
			} else if err == nil && v > maxInt {
				err = rangeErr("--"+o.Key, v, 1, maxInt)
			}
			c.Duration = int(v)
		case "margin":
			// CHECK_VALUE_NON_NEGATIVE(margin, int, "Margin")
			if v, err = parseCInt(tool, "--"+o.Key, o.Arg, 64); err == nil && v < 0 {
				err = perftestParserError(tool, " Margin must be non-negative")
			} else if err == nil && v > maxInt {
				err = rangeErr("--"+o.Key, v, 0, maxInt)
			}
			c.Margin = int(v)
		case "size":
			v, err = intArg(o, 1, 1<<23)
			c.Size, c.SizeRequested = uint64(v), true
		case "all":
			c.All = true
		case "connection":
			c.Connection = strings.ToUpper(o.Arg)
			ok := false
			for _, s := range perftestConnections(p) {
				ok = ok || s == c.Connection
			}
			if !ok {
				return PerftestConfig{}, fmt.Errorf("%s: connection type %q: want one of %v: %w", tool, o.Arg, perftestConnections(p), unix.EINVAL)
			}
		case "mtu":
			if v, err = parseCInt(tool, "--mtu", o.Arg, 64); err == nil {
				c.MTU, err = PingpongMTUFromBytes(v)
				if err != nil {
					err = fmt.Errorf("%s: Invalid MTU - %d: %w", tool, v, unix.EINVAL)
				}
			}
		case "sl":
			v, err = intArg(o, 0, 15)
			c.SL = int(v)
		case "qp-timeout":
			v, err = intArg(o, 0, 31)
			c.QPTimeout = int(v)
		case "CPU-freq":
			c.CPUFreq = true
		case "rdma_cm":
			c.RDMACM = true
		case "com_rdma_cm":
			c.ComRDMACM = true
		case "ipv6":
			c.IPv6 = true
		case "dont_xchg_versions":
			c.DontXchgVersions = true
		case "odp":
			c.ODP = true
		case "perform_warm_up":
			c.PerformWarmUp = true
		case "atomic_type":
			if o.Arg != "CMP_AND_SWAP" && o.Arg != "FETCH_AND_ADD" {
				return PerftestConfig{}, fmt.Errorf("%s: Invalid Atomic type %q! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}: %w", tool, o.Arg, unix.EINVAL)
			}
			c.AtomicType = o.Arg
		case "outs":
			v, err = intArg(o, 1, 65535)
			c.OutReads = int(v)
		case "inline_size":
			v, err = intArg(o, 0, maxInt)
			c.InlineSize = int(v)
		case "events":
			c.Events = true
		case "rx-depth":
			v, err = intArg(o, 1, maxInt)
			c.RxDepth = int(v)
		case "use-srq":
			c.UseSRQ = true
		case "bidirectional":
			if !p.IsBW() {
				err = perftestParserError(tool, " Bidirectional is only available in BW test")
			}
			c.Bidirectional = true
		case "tx-depth":
			v, err = intArg(o, 1, maxInt)
			c.TxDepth = int(v)
		case "qp":
			v, err = intArg(o, 1, maxInt)
			c.NumQP = int(v)
		case "post_list":
			v, err = intArg(o, 1, maxInt)
			c.PostList = int(v)
		case "cq-mod":
			v, err = intArg(o, 1, maxInt)
			c.CQMod, c.CQModRequested = int(v), true
		case "noPeak":
			c.NoPeak = true
		case "report_gbits":
			c.ReportGbits = true
		case "report-both":
			c.ReportBoth = true
		case "report-per-port":
			c.ReportPerPort = true
		case "report-cycles":
			c.ReportCycles = true
		case "report-histogram":
			c.ReportHistogram = true
		case "report-unsorted":
			c.ReportHistogram, c.ReportUnsorted = true, true
		}
		if err != nil {
			return PerftestConfig{}, err
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		c.Server = operands[0]
	default:
		return PerftestConfig{}, fmt.Errorf("%s: %d operands %q, want at most one server name: %w", tool, len(operands), operands, unix.EINVAL)
	}
	if err := c.forceDependencies(); err != nil {
		return PerftestConfig{}, err
	}
	return c, nil
}

// Constants of perftest's force_dependecies (perftest_parameters.h).
const (
	// PerftestDefDuration is DEF_DURATION, the duration in seconds
	// perftest's margin check assumes when -D is not given.
	PerftestDefDuration = 5
	// PerftestCQModSizeLimit is MSG_SIZE_CQ_MOD_LIMIT: above this many
	// bytes per message perftest turns CQ moderation off (cq_mod 1)
	// unless -Q was given.
	PerftestCQModSizeLimit = 8192
)

// Warning lines of force_dependecies.
const (
	perftestWarnLargeCQMod1 = "Warning: Large message requested and CQ moderation enabled"
	perftestWarnLargeCQMod2 = "Warning: It can lead to inaccurate results"
	perftestWarnPostList    = "Post List requested - CQ moderation will be the size of the post list"
)

// forceDependencies applies the parts of perftest's force_dependecies
// that concern -D, -f, -a, -e, -b and the CQ moderation of large
// messages, in its order:
//
//   - -D with -e: "Duration mode doesn't work with events."; -D with -a:
//     "Duration mode currently doesn't support running on all sizes."
//     (perftest prints RESULT_LINE on stdout first and exits 1); -D forces
//     noPeak on (the BW rows show a peak of 0.00) and leaves -n unused.
//   - a message above PerftestCQModSizeLimit, not UD, not -a, not -e:
//     without -Q the CQ moderation becomes 1; with -Q above 1 perftest
//     prints RESULT_LINE and the two "Warning: ..." lines (c.Warnings).
//   - -l above 1: in iterations mode -n must be a multiple of it ("Number
//     of iterations must be a multiple of post list size"); without -Q
//     the CQ moderation becomes the post list (and perftest says so on
//     stdout: "Post List requested - CQ moderation will be the size of
//     the post list"), with -Q the post list must be a multiple of it
//     ("Post list size must be a multiple of CQ moderation");
//   - --use-srq with more QPs than receives (-r as clamped to -n in
//     iterations mode): " Using SRQ depth should be greater than number
//     of QPs." (on stdout, after RESULT_LINE);
//   - --odp with an atomic test: " ODP does not support ATOMICS for
//     now"; with -c UC: " ODP does not support UC" (RESULT_LINE first);
//   - -D without -f: the margin becomes duration/4 (integer division: the
//     "(default=2sec)" of --help is not what perftest uses).
//   - in both modes: unless duration > 2*margin (duration
//     PerftestDefDuration without -D, margin -1 without -f),
//     "please check that DURATION > 2*MARGIN" (RESULT_LINE first, exit 1).
//
// -b on a latency test is refused earlier, in the option switch.
func (c *PerftestConfig) forceDependencies() error {
	tool := c.Test.Tool()
	if c.Duration > 0 {
		if c.Events {
			return perftestDependencyError(tool, "Duration mode doesn't work with events.")
		}
		if c.All {
			return perftestDependencyError(tool, "Duration mode currently doesn't support running on all sizes.")
		}
		c.NoPeak = true
	}
	if c.Size > PerftestCQModSizeLimit && c.Connection != "UD" && !c.All && !c.Events {
		if !c.CQModRequested {
			c.CQMod = 1
		} else if c.CQMod > 1 {
			c.Warnings = append(c.Warnings, perftestWarnLargeCQMod1, perftestWarnLargeCQMod2)
		}
	}
	if c.PostList > 1 {
		if c.Duration == 0 && c.Iters%uint64(c.PostList) != 0 {
			return perftestDependencyError(tool, "Number of iterations must be a multiple of post list size")
		}
		if !c.CQModRequested {
			c.CQMod = c.PostList
			c.Warnings = append(c.Warnings, perftestWarnPostList)
		} else if c.PostList%c.CQMod != 0 {
			return perftestDependencyError(tool, "Post list size must be a multiple of CQ moderation")
		}
	}
	if c.UseSRQ {
		// The receive depth as force_dependecies has clamped it by now.
		rx := c.RxDepth
		if c.Duration == 0 {
			rx = int(min(uint64(rx), c.Iters))
			if (c.Connection == "UC" || c.Connection == "UD") && rx == 512 {
				rx = int(min(c.Iters, 16000))
			}
		}
		if c.NumQP > rx {
			return &PerftestFlagError{Tool: tool, Msg: " Using SRQ depth should be greater than number of QPs.", ResultLine: true, Stdout: true}
		}
	}
	if c.ODP && c.Test.Verb() == VerbAtomic {
		return perftestDependencyError(tool, " ODP does not support ATOMICS for now")
	}
	if c.ODP && c.Connection == "UC" {
		return perftestDependencyError(tool, " ODP does not support UC")
	}
	duration := PerftestDefDuration
	if c.Duration > 0 {
		duration = c.Duration
		if c.Margin == -1 {
			c.Margin = c.Duration / 4
		}
	}
	if !(int64(duration) > 2*int64(c.Margin)) {
		return perftestDependencyError(tool, "please check that DURATION > 2*MARGIN")
	}
	return nil
}

// WarningText returns what perftest prints on stdout for c.Warnings:
// PerftestResultLine, then each line and a newline; "" if there are none.
func (c PerftestConfig) WarningText() string {
	if len(c.Warnings) == 0 {
		return ""
	}
	return PerftestResultLine + strings.Join(c.Warnings, "\n") + "\n"
}

// PerftestFlagError is a perftest command line the tool refuses after
// reading it: a value its parser checks (-D 0, -f -1, -b on a latency
// test) or a combination force_dependecies rejects (-D with -a or -e,
// DURATION <= 2*MARGIN). Unwrap returns EINVAL. Msg is the tool's
// stderr line verbatim, leading space included, without the newline.
type PerftestFlagError struct {
	Tool string // "ib_write_bw"
	Msg  string // " Duration period must be positive"
	// ResultLine: the tool printed PerftestResultLine on stdout before
	// Msg (force_dependecies' checks).
	ResultLine bool
	// ParserFailed: the tool printed " Parser function exited with
	// Error" on stderr after Msg (the checks in parser()'s option switch).
	ParserFailed bool
	// Stdout: the tool printed Msg on stdout (printf), not stderr.
	Stdout bool
}

// Error returns "ib_write_bw: Duration period must be positive: invalid
// argument".
func (e *PerftestFlagError) Error() string {
	return e.Tool + ": " + strings.TrimSpace(e.Msg) + ": " + unix.EINVAL.Error()
}

// Unwrap returns unix.EINVAL.
func (e *PerftestFlagError) Unwrap() error { return unix.EINVAL }

// Output returns what the tool writes before it exits with status 1.
func (e *PerftestFlagError) Output() (stdout, stderr string) {
	if e.ResultLine {
		stdout = PerftestResultLine
	}
	if e.Stdout {
		return stdout + e.Msg + "\n", ""
	}
	stderr = e.Msg + "\n"
	if e.ParserFailed {
		stderr += " Parser function exited with Error\n"
	}
	return stdout, stderr
}

func perftestParserError(tool, msg string) error {
	return &PerftestFlagError{Tool: tool, Msg: msg, ParserFailed: true}
}

func perftestDependencyError(tool, msg string) error {
	return &PerftestFlagError{Tool: tool, Msg: msg, ResultLine: true}
}

// FitUDSize applies check_mtu's rule for -c UD once the path MTU (in
// bytes) is settled: a UD message is one packet. A size above it that was
// not asked for with -s (the BW tests' 65536) becomes the MTU, and the
// tool says so on stderr (the returned text: " Max msg size in UD is MTU
// 4096" and " Changing to this MTU"); an -s above it is refused (" Max
// message size in UD cannot be greater than MTU ", after which the tool
// exits 1). Other transports and sizes that fit are left alone.
func (c *PerftestConfig) FitUDSize(mtuBytes int) (string, error) {
	if c.Connection != "UD" || c.Size <= uint64(mtuBytes) {
		return "", nil
	}
	if c.SizeRequested && !c.All {
		return "", &PerftestFlagError{Tool: c.Test.Tool(), Msg: " Max message size in UD cannot be greater than MTU "}
	}
	c.Size = uint64(mtuBytes)
	return fmt.Sprintf(" Max msg size in UD is MTU %d\n Changing to this MTU\n", mtuBytes), nil
}

// PerftestSynopsis returns the synopsis of test p's options, one bracketed
// entry per option of its getopt_long table ("[-s|--size SIZE]").
func PerftestSynopsis(p PerftestTest) []string { return getopt.Synopsis(perftestOptions(p)) }
