package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"sync"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/uverbsd"
)

// daemonFlags are the flags serve and run add to the link flags: where the
// coverage profile goes, and the faults to inject.
type daemonFlags struct {
	coverage string
	faults   faultFlag
	oneWay   bool
	// noMemlock: uverbsd.Config.NoMemlock.
	noMemlock bool
	// devices are the -d flags (nil: one device, the link flags').
	devices *deviceFlags
	check   *checkFlags
}

func addDaemonFlags(fs *flag.FlagSet) *daemonFlags {
	df := &daemonFlags{}
	fs.StringVar(&df.coverage, "coverage", "", "record what the programs make the device go through (transitions, completions, events, failed verbs and commands, faults) and write the profile to `FILE` when the daemon ends (read it with softroce coverage FILE)")
	fs.BoolVar(&df.oneWay, "one-way-doorbells", false, "let programs ring their send queues' doorbells without waiting for the daemon where the kernel's answer is known (a QP at RTS or later), and skip them while the daemon is still working on the queue (a watch page it shares): streams of posts run beside the daemon's work (ib_write_bw 4 to 5 times faster on a 2-vCPU VM), while a ping-pong waits longer for the daemon than with the default, which hands the program's CPU to the daemon at each doorbell")
	fs.BoolVar(&df.noMemlock, "no-memlock", false, "pin the programs' MR pages without charging them to their RLIMIT_MEMLOCK, as if each had CAP_IPC_LOCK; by default ibv_reg_mr past the limit (ulimit -l) fails with ENOMEM, as on the kernel")
	df.check = addCheckFlags(fs)
	fs.Var(&df.faults, "fault", "inject the fault `RULE` (repeatable; softroce fault -h shows the syntax), e.g. wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3 or verbs:fail,verb=create_qp,errno=ENOMEM; --seed replays the probabilistic ones")
	return df
}

// serverConfig applies the flags to the daemon's server, and has it warn
// of its clients' misbehaviour on stderr (rate-limited, see
// uverbsd.Config.Logf).
func (df *daemonFlags) serverConfig(cfg *uverbsd.Config, stderr io.Writer) {
	cfg.NoMemlock = df.noMemlock
	var mu sync.Mutex
	cfg.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "softroce: "+format+"\n", args...)
	}
}

// daemonCoverage is the coverage of a daemon: always recorded (softroce
// coverage --live asks for it), written to a file at the end when asked.
type daemonCoverage struct {
	col *coverage.Collector
	rec *coverage.Recorder
	dev string
}

func newDaemonCoverage(dev string) *daemonCoverage {
	col := coverage.NewCollector()
	return &daemonCoverage{col: col, rec: col.Recorder(dev), dev: dev}
}

// profile returns the profile so far, with the device's transport counters.
func (c *daemonCoverage) profile(d *emu.Device) *coverage.Profile {
	if d != nil {
		c.col.ReadCounters(d)
	}
	return c.col.Profile()
}

// serverConfig adds the coverage to the daemon's server: failed commands
// recorded, and the control command "coverage" (the profile so far, in
// the file format).
func (c *daemonCoverage) serverConfig(cfg *uverbsd.Config) {
	cfg.Recorder = c.rec
	if cfg.Control == nil {
		cfg.Control = map[string]uverbsd.ControlFunc{}
	}
	dev := cfg.Device
	cfg.Control["coverage"] = func(args []string) (string, error) {
		if len(args) != 0 {
			return "", fmt.Errorf("coverage takes no argument")
		}
		var b bytes.Buffer
		if err := coverage.Encode(&b, c.profile(dev)); err != nil {
			return "", err
		}
		return b.String(), nil
	}
}

// write writes the profile to path (nothing when path is "") and says so.
func (c *daemonCoverage) write(path string, d *emu.Device, stderr io.Writer) error {
	if path == "" {
		return nil
	}
	if err := coverage.WriteFile(path, c.profile(d)); err != nil {
		return fmt.Errorf("coverage: %w", err)
	}
	fmt.Fprintf(stderr, "softroce: coverage of %s written to %s (softroce coverage %s)\n", c.dev, path, path)
	return nil
}
