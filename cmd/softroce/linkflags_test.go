package main

import (
	"bytes"
	"flag"
	"io"
	"testing"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu/rxe"
)

// TestUDPWildcardMACFollowsTheHostname: "--udp" without "--ip" is the same
// command line on every host (every pod of a manifest), so the MAC (and
// the node GUID and the link-local GID derived from it) folds in the
// host's name: two hosts get two MACs, one host always the same; with
// --ip the addresses tell hosts apart and the name does not enter.
func TestUDPWildcardMACFollowsTheHostname(t *testing.T) {
	mac := func(host string, args ...string) []byte {
		t.Helper()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		lf := addLinkFlags(fs)
		if err := fs.Parse(append(args, "--seed", "1")); err != nil {
			t.Fatal(err)
		}
		lf.hostname = func() (string, error) { return host, nil }
		cfg, err := lf.config()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.MAC
	}
	if a, b := mac("softroce-ring-0", "--udp"), mac("softroce-ring-1", "--udp"); bytes.Equal(a, b) {
		t.Errorf("two hosts bound to all their addresses share the MAC %v", a)
	}
	if a, b := mac("h", "--udp"), mac("h", "--udp"); !bytes.Equal(a, b) {
		t.Errorf("one host's MAC changed between runs: %v, %v", a, b)
	}
	if a, b := mac("h1", "--udp", "--ip", "10.0.0.1"), mac("h2", "--udp", "--ip", "10.0.0.1"); !bytes.Equal(a, b) {
		t.Errorf("with --ip the host name entered the MAC: %v, %v", a, b)
	}
}

// TestCoalesceACKsFlagReachesTheDevice: --coalesce-acks sets
// rxe.Config.CoalesceACKs of the device the link flags build, beside a
// recorder set by serve or run; without it the device answers as rxe.
func TestCoalesceACKsFlagReachesTheDevice(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rec  bool
		want bool
	}{{nil, false, false}, {nil, true, false}, {[]string{"--coalesce-acks"}, false, true}, {[]string{"--coalesce-acks"}, true, true}} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		lf := addLinkFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		rec := coverage.NewRecorder("rxe0")
		if tc.rec {
			lf.recorder = rec
		}
		cfg, err := lf.config()
		if err != nil {
			t.Fatal(err)
		}
		var rc rxe.Config
		if cfg.Rxe != nil {
			cfg.Rxe(&rc)
		}
		if rc.CoalesceACKs != tc.want || (rc.Device.Recorder != nil) != tc.rec {
			t.Errorf("%v (recorder %v): CoalesceACKs %v, recorder %v", tc.args, tc.rec, rc.CoalesceACKs, rc.Device.Recorder != nil)
		}
	}
}
