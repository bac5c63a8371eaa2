package oob

import (
	"fmt"
	"github.com/softroce/softroce/internal/getopt"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// PingpongConfig is the command line of an ibv_*_pingpong tool, with the
// tool's defaults (rdma-core 44.0, libibverbs/examples/*_pingpong.c main).
type PingpongConfig struct {
	Mode       PingpongMode
	Server     string // the one operand: connect to it (client); "" is the server
	Port       int    // -p --port: TCP port (18515)
	IBDev      string // -d --ib-dev: device ("" = first found)
	IBPort     int    // -i --ib-port: port of the device (1)
	Size       uint32 // -s --size: message size (4096; ud 1024, see PingpongDefaults)
	MTU        ib.MTU // -m --mtu: path MTU code (IB_MTU_1024); not on ud
	RxDepth    uint32 // -r --rx-depth: receives posted at a time (500)
	Iters      uint32 // -n --iters: exchanges (1000; per QP for srq)
	SL         int    // -l --sl: service level (0)
	Events     bool   // -e --events: sleep on CQ events instead of polling
	GIDIndex   int    // -g --gid-idx: local GID index (-1: none, LID only)
	NumQP      uint32 // -q --num-qp: srq only (16)
	Check      bool   // -c --chk: validate the received buffer (see CheckPattern)
	ODP        bool   // -o --odp: rc, srq
	ImplicitOD bool   // -O --iodp: rc (implies ODP)
	Prefetch   bool   // -P --prefetch: rc (needs ODP)
	Timestamps bool   // -t --ts: rc
	DM         bool   // -j --dm: rc (device memory)
	NewSend    bool   // -N --new_send: rc (ibv_wr_* API)
}

// PingpongDefaults returns the defaults of mode m's tool. Note ud: its
// usage text says "default 2048" but ud_pingpong.c initialises size to
// 1024 (checked in the Debian 12 binary too), and it has no -m.
func PingpongDefaults(m PingpongMode) PingpongConfig {
	c := PingpongConfig{
		Mode:     m,
		Port:     DefaultPort,
		IBPort:   1,
		Size:     4096,
		MTU:      ib.MTU1024,
		RxDepth:  500,
		Iters:    1000,
		GIDIndex: -1,
	}
	switch m {
	case PingpongUD:
		c.Size = 1024
		c.MTU = 0
	case PingpongSRQ:
		c.NumQP = 16
	}
	return c
}

// pingpongOptions returns the getopt_long table of mode m's tool:
// rc "p:d:i:s:m:r:n:l:eg:oOPtcjN", uc "p:d:i:s:m:r:n:l:eg:c",
// ud "p:d:i:s:r:n:l:eg:c", srq "p:d:i:s:m:q:r:n:l:eog:c".
func pingpongOptions(m PingpongMode) []getopt.Option {
	o := []getopt.Option{
		{Short: 'p', Long: "port", HasArg: true, Key: "p"},
		{Short: 'd', Long: "ib-dev", HasArg: true, Key: "d"},
		{Short: 'i', Long: "ib-port", HasArg: true, Key: "i"},
		{Short: 's', Long: "size", HasArg: true, Key: "s"},
		{Short: 'r', Long: "rx-depth", HasArg: true, Key: "r"},
		{Short: 'n', Long: "iters", HasArg: true, Key: "n"},
		{Short: 'l', Long: "sl", HasArg: true, Key: "l"},
		{Short: 'e', Long: "events", HasArg: false, Key: "e"},
		{Short: 'g', Long: "gid-idx", HasArg: true, Key: "g"},
		{Short: 'c', Long: "chk", HasArg: false, Key: "c"},
	}
	if m != PingpongUD {
		o = append(o, getopt.Option{Short: 'm', Long: "mtu", HasArg: true, Key: "m"})
	}
	switch m {
	case PingpongRC:
		o = append(o,
			getopt.Option{Short: 'o', Long: "odp", HasArg: false, Key: "o"},
			getopt.Option{Short: 'O', Long: "iodp", HasArg: false, Key: "O"},
			getopt.Option{Short: 'P', Long: "prefetch", HasArg: false, Key: "P"},
			getopt.Option{Short: 't', Long: "ts", HasArg: false, Key: "t"},
			getopt.Option{Short: 'j', Long: "dm", HasArg: false, Key: "j"},
			getopt.Option{Short: 'N', Long: "new_send", HasArg: false, Key: "N"})
	case PingpongSRQ:
		o = append(o,
			getopt.Option{Short: 'q', Long: "num-qp", HasArg: true, Key: "q"},
			getopt.Option{Short: 'o', Long: "odp", HasArg: false, Key: "o"})
	}
	return o
}

// PingpongMTUFromBytes is pp_mtu_to_enum (pingpong.c): 256, 512, 1024,
// 2048 or 4096 to its IB_MTU code, anything else EINVAL. (rdma-core 44.0
// compares the result with 0 instead of -1, so the real tools accept a bad
// -m and fail later in ibv_modify_qp; softroce rejects it up front.)
func PingpongMTUFromBytes(n int64) (ib.MTU, error) {
	switch n {
	case 256:
		return ib.MTU256, nil
	case 512:
		return ib.MTU512, nil
	case 1024:
		return ib.MTU1024, nil
	case 2048:
		return ib.MTU2048, nil
	case 4096:
		return ib.MTU4096, nil
	}
	return 0, fmt.Errorf("oob: path MTU %d: want 256, 512, 1024, 2048 or 4096: %w", n, unix.EINVAL)
}

// ParsePingpongFlags parses the arguments (without argv[0]) of mode m's
// tool into a config, starting from PingpongDefaults(m). It follows the
// tool's getopt_long table and its checks: -p above 65535, -i below 1, a
// bad -m, more than one operand, srq's -s 0, -q above -r or -q of 256 or
// more, rc's -o with -j and -P without -o are all EINVAL (the tools print
// usage or a message and exit 1). Numbers take C's 0x/0 prefixes.
func ParsePingpongFlags(m PingpongMode, args []string) (PingpongConfig, error) {
	if !m.IsValid() {
		return PingpongConfig{}, fmt.Errorf("oob: pingpong flags: invalid mode %d: %w", int(m), unix.EINVAL)
	}
	tool := m.Tool()
	c := PingpongDefaults(m)
	opts, operands, err := getopt.Parse(tool, pingpongOptions(m), args)
	if err != nil {
		return PingpongConfig{}, err
	}
	for _, o := range opts {
		flag := "-" + o.Key
		switch o.Key {
		case "p":
			v, err := parseCUint(tool, flag, o.Arg, 32)
			if err != nil {
				return PingpongConfig{}, err
			}
			if v > 65535 {
				return PingpongConfig{}, fmt.Errorf("%s: -p %d: port above 65535: %w", tool, v, unix.EINVAL)
			}
			c.Port = int(v)
		case "d":
			c.IBDev = o.Arg
		case "i":
			v, err := parseCInt(tool, flag, o.Arg, 32)
			if err != nil {
				return PingpongConfig{}, err
			}
			if v < 1 {
				return PingpongConfig{}, fmt.Errorf("%s: -i %d: IB port below 1: %w", tool, v, unix.EINVAL)
			}
			c.IBPort = int(v)
		case "s":
			v, err := parseCUint(tool, flag, o.Arg, 32)
			if err != nil {
				return PingpongConfig{}, err
			}
			if m == PingpongSRQ && v < 1 {
				return PingpongConfig{}, fmt.Errorf("%s: -s 0: size below 1: %w", tool, unix.EINVAL)
			}
			c.Size = uint32(v)
		case "m":
			v, err := parseCInt(tool, flag, o.Arg, 64)
			if err != nil {
				return PingpongConfig{}, err
			}
			mtu, err := PingpongMTUFromBytes(v)
			if err != nil {
				return PingpongConfig{}, fmt.Errorf("%s: -m: %w", tool, err)
			}
			c.MTU = mtu
		case "r", "n", "q":
			v, err := parseCUint(tool, flag, o.Arg, 32)
			if err != nil {
				return PingpongConfig{}, err
			}
			switch o.Key {
			case "r":
				c.RxDepth = uint32(v)
			case "n":
				c.Iters = uint32(v)
			default:
				c.NumQP = uint32(v)
			}
		case "l", "g":
			v, err := parseCInt(tool, flag, o.Arg, 32)
			if err != nil {
				return PingpongConfig{}, err
			}
			if o.Key == "l" {
				c.SL = int(v)
			} else {
				c.GIDIndex = int(v)
			}
		case "e":
			c.Events = true
		case "c":
			c.Check = true
		case "o":
			c.ODP = true
		case "O":
			c.ODP, c.ImplicitOD = true, true
		case "P":
			c.Prefetch = true
		case "t":
			c.Timestamps = true
		case "j":
			c.DM = true
		case "N":
			c.NewSend = true
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		c.Server = operands[0]
	default:
		return PingpongConfig{}, fmt.Errorf("%s: %d operands %q, want at most one server name: %w", tool, len(operands), operands, unix.EINVAL)
	}
	if m == PingpongRC {
		if c.ODP && c.DM {
			return PingpongConfig{}, fmt.Errorf("%s: DM memory region can't be on demand: %w", tool, unix.EINVAL)
		}
		if !c.ODP && c.Prefetch {
			return PingpongConfig{}, fmt.Errorf("%s: prefetch is valid only with on-demand memory region: %w", tool, unix.EINVAL)
		}
	}
	if m == PingpongSRQ {
		if c.NumQP > c.RxDepth {
			return PingpongConfig{}, fmt.Errorf("%s: rx_depth %d is too small for %d QPs -- must have at least one receive per QP: %w", tool, c.RxDepth, c.NumQP, unix.EINVAL)
		}
		if c.NumQP >= SRQMaxQP {
			return PingpongConfig{}, fmt.Errorf("%s: num_qp %d must be less than %d: %w", tool, c.NumQP, SRQMaxQP-1, unix.EINVAL)
		}
	}
	return c, nil
}

// PingpongSynopsis returns the synopsis of mode m's options, one bracketed
// entry per option of its getopt_long table ("[-p|--port PORT]"), so that a
// command's usage follows the table it parses with.
func PingpongSynopsis(m PingpongMode) []string { return getopt.Synopsis(pingpongOptions(m)) }
