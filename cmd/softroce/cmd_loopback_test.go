package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/wire"
)

var (
	bwRow  = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$`)
	latRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	ppRes  = regexp.MustCompile(`(?m)^(?:server: )?(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n(?:server: )?(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter$`)
	cntRe  = regexp.MustCompile(`(?m)^rxe(\d) counters:(.*)$`)
)

// counters parses the "rxeN counters:" lines.
func counters(t *testing.T, out string) [2]map[string]uint64 {
	t.Helper()
	var cs [2]map[string]uint64
	for _, m := range cntRe.FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[1])
		cs[i] = map[string]uint64{}
		f := strings.Fields(m[2])
		for j := 0; j+1 < len(f); j += 2 {
			v, err := strconv.ParseUint(f[j+1], 10, 64)
			if err != nil {
				t.Fatalf("counter line %q", m[0])
			}
			cs[i][f[j]] = v
		}
	}
	if cs[0] == nil || cs[1] == nil {
		t.Fatalf("no counter lines in\n%s", out)
	}
	return cs
}

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		rows int // result rows (perftest) or result line pairs (pingpong)
	}{
		{"default", nil, 1},
		{"rc", []string{"--test", "rc", "-n", "100", "-c"}, 2},
		{"uc", []string{"--test", "uc", "-n", "100", "-s", "3000"}, 2},
		{"ud", []string{"--test", "ud", "-n", "100", "-s", "512", "-m", "4096"}, 2},
		{"srq", []string{"--test", "srq", "-n", "100", "-q", "4", "-r", "16"}, 2},
		{"write_bw", []string{"--test", "write_bw", "-n", "100", "-q", "2", "-m", "4096"}, 1},
		{"write_bw_all", []string{"--test", "write_bw", "-n", "5", "-a"}, 23},
		{"read_bw", []string{"--test", "read_bw", "-n", "100", "-s", "10000", "--report_gbits"}, 1},
		{"send_bw", []string{"--test", "send_bw", "-n", "100", "-s", "4096", "-m", "256"}, 1},
		{"atomic_bw", []string{"--test", "atomic_bw", "-n", "100", "-q", "3"}, 1},
		{"write_lat", []string{"--test", "write_lat", "-n", "100"}, 1},
		{"read_lat", []string{"--test", "read_lat", "-n", "100", "-s", "64"}, 1},
		{"send_lat", []string{"--test", "send_lat", "-n", "100", "-s", "100"}, 1},
		{"atomic_lat", []string{"--test", "atomic_lat", "-n", "100"}, 1},
		{"write_bw_bidi", []string{"--test", "write_bw", "-b", "-n", "100", "-q", "2"}, 1},
		{"send_bw_bidi_duration", []string{"--test", "send_bw", "-b", "-D", "1", "-s", "4096"}, 1},
		{"read_lat_duration", []string{"--test", "read_lat", "-D", "1"}, 1},
		{"rc_faults", []string{"--test", "rc", "-n", "100", "--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--corrupt", "0.05", "--seed", "7"}, 2},
		{"write_bw_faults", []string{"--test", "write_bw", "-n", "50", "-s", "8192", "--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--corrupt", "0.05", "--seed", "7"}, 1},
		{"send_lat_faults", []string{"--test", "send_lat", "-n", "50", "--loss", "0.05", "--corrupt", "0.05", "--seed", "3"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "write_lat" && raceEnabled {
				t.Skip("write_lat polls memory the device writes")
			}
			code, out, errs := runCmd(t, append([]string{"loopback"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			if !strings.Contains(out, "data check: ok") {
				t.Errorf("no data check line in\n%s", out)
			}
			if strings.Contains(strings.Join(tc.args, " "), "send_") && !strings.Contains(out, "data check: ok (every message received equals the one sent") {
				t.Errorf("a send test checked less than every message:\n%s", out)
			}
			var rows int
			switch {
			case ppRes.MatchString(out):
				rows = len(ppRes.FindAllString(out, -1))
			case strings.Contains(out, "t_typical"):
				rows = len(latRow.FindAllString(out, -1))
			case strings.Contains(out, "tps average"):
				rows = len(latDurRow.FindAllString(out, -1))
			default:
				rows = len(bwRow.FindAllString(out, -1))
				for _, m := range bwRow.FindAllStringSubmatch(out, -1) {
					// A few bytes in a slow run print as 0.00 MB/sec; the
					// message rate has six decimals.
					size, _ := strconv.Atoi(m[1])
					avg, _ := strconv.ParseFloat(m[4], 64)
					rate, _ := strconv.ParseFloat(m[5], 64)
					if rate <= 0 || size >= 4096 && avg <= 0 {
						t.Errorf("row %q: no bandwidth", m[0])
					}
				}
			}
			if rows != tc.rows {
				t.Errorf("%d result rows, want %d:\n%s", rows, tc.rows, out)
			}
			cs := counters(t, out)
			if cs[0]["sent_pkts"] == 0 || cs[1]["rcvd_pkts"] == 0 {
				t.Errorf("counters %v", cs)
			}
			if tc.name == "default" {
				// 1000 WRITEs of 64 KiB at MTU 1024: 64 packets each (more
				// only if a slow run let a retransmission timer fire), every
				// frame received on the other side.
				want := uint64(64000)
				if cs[0]["completer_retry_err"] > 0 {
					want = cs[0]["sent_pkts"]
				}
				if cs[0]["sent_pkts"] != want || cs[1]["rcvd_pkts"] != want || cs[1]["sent_pkts"] != cs[0]["rcvd_pkts"] ||
					cs[0]["sent_bytes"] != cs[1]["rcvd_bytes"] {
					t.Errorf("counters of the default run: %v", cs)
				}
			}
			if strings.Contains(tc.name, "faults") {
				if !strings.Contains(out, "rxe0 faults: frames") || cs[0]["softroce_icrc_err"]+cs[1]["softroce_icrc_err"] == 0 {
					t.Errorf("fault stats or ICRC drops missing:\n%s", out)
				}
			}
		})
	}
}

// TestLoopbackLossyUnreliable: UC and UD under loss stall and say why;
// RC under the same loss delivers.
func TestLoopbackLossyUnreliable(t *testing.T) {
	for _, mode := range []string{"uc", "ud"} {
		t.Run(mode, func(t *testing.T) {
			code, out, errs := runCmd(t, "loopback", "--test", mode, "-n", "1000", "-s", "256", "--loss", "0.2", "--timeout", "200ms")
			if code != 1 || !strings.Contains(errs, "does not retransmit") || !strings.Contains(errs, "connection timed out") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			if !strings.Contains(out, "faults: frames") || !strings.Contains(out, "lost: frames held back to be reordered") {
				t.Errorf("no fault stats, or no word on what they mean, in\n%s", out)
			}
		})
	}
}

func TestLoopbackBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--test", "nope"},
		{"-m", "1000"},
		{"--loss", "1.5"},
		{"--test", "atomic_bw", "-s", "16"},
		{"--test", "write_bw", "-n", "2"},
		{"--test", "rc", "-a"},
		{"--test", "ud", "-s", "5000"},
		{"extra"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			code, out, errs := runCmd(t, append([]string{"loopback"}, args...)...)
			if code == 0 || errs == "" {
				t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
			}
		})
	}
}

// TestLoopbackRefusals: a fault fraction that is not a number in [0, 1]
// (NaN passes "< 0 || > 1") and a zero message size are refused before
// anything runs, with the reason; perf refuses -s 0 the same way.
func TestLoopbackRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"loopback", "--loss", "NaN"}, "--loss NaN: not a fraction in [0, 1]"},
		{[]string{"loopback", "--dup", "nan"}, "--dup NaN: not a fraction in [0, 1]"},
		{[]string{"loopback", "--reorder", "+Inf"}, "--reorder +Inf: not a fraction in [0, 1]"},
		{[]string{"loopback", "--corrupt", "-Inf"}, "--corrupt -Inf: not a fraction in [0, 1]"},
		{[]string{"loopback", "--test", "rc", "--loss", "-0.1"}, "--loss -0.1: not a fraction in [0, 1]"},
		{[]string{"loopback", "-s", "0"}, "-s 0: the message size should be between 1 and 8388608"},
		{[]string{"loopback", "--test", "send_lat", "-s", "0"}, "-s 0: the message size should be between 1 and 8388608"},
		{[]string{"loopback", "--test", "rc", "-s", "0"}, "-s 0: the message size should be between 1 and 8388608"},
		{[]string{"perf", "write_bw", "-s", "0"}, "--size 0 should be between 1 and 8388608"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			code, out, errs := runCmd(t, tc.args...)
			if code == 0 || !strings.Contains(errs, tc.want) || strings.Contains(out, "data check") {
				t.Errorf("exit %d, stdout %q, stderr %q; want a refusal saying %q", code, out, errs, tc.want)
			}
		})
	}
}

// TestLoopbackPcap: the capture of a run (with loss, duplicates and
// reordering, which leave frames intact) parses with wire.Parse, every ICRC
// verifies, softroce decode agrees, and tshark reads it without a malformed frame.
func TestLoopbackPcap(t *testing.T) {
	dir := t.TempDir()
	for _, test := range []string{"rc", "ud", "write_bw", "read_bw", "send_bw", "atomic_bw"} {
		t.Run(test, func(t *testing.T) {
			file := filepath.Join(dir, test+".pcap")
			code, out, errs := runCmd(t, "loopback", "--test", test, "-n", "20", "-s", "1500", "--pcap", file,
				"--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--seed", "11")
			if test == "atomic_bw" {
				code, out, errs = runCmd(t, "loopback", "--test", test, "-n", "20", "--pcap", file, "--loss", "0.05", "--seed", "11")
			}
			if test == "ud" {
				code, out, errs = runCmd(t, "loopback", "--test", test, "-n", "20", "-s", "1000", "--pcap", file)
			}
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errs)
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := pcapgo.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for {
				data, _, err := r.ReadPacketData()
				if err != nil {
					break
				}
				n++
				p, err := wire.Parse(data)
				if err != nil {
					t.Fatalf("frame %d: %v", n, err)
				}
				if err := p.VerifyICRC(); err != nil {
					t.Fatalf("frame %d: %v", n, err)
				}
			}
			if n == 0 || !strings.Contains(out, "pcap "+file+": "+strconv.Itoa(n)+" frames") {
				t.Fatalf("%d frames read; output:\n%s", n, out)
			}
			if code, dout, derr := runCmd(t, "decode", file); code != 0 || strings.Count(dout, "icrc=ok") != n {
				t.Errorf("softroce decode: exit %d, %d of %d ICRCs ok\n%s", code, strings.Count(dout, "icrc=ok"), n, derr)
			}
			path, err := exec.LookPath("tshark")
			testenv.Require(t, err == nil, "tshark is not installed (apt-get install tshark)")
			cmd := exec.Command(path, "-r", file, "--disable-protocol", "rpcordma", "-Y", "_ws.malformed || _ws.expert.severity >= error")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			bad, err := cmd.Output()
			if err != nil {
				t.Fatalf("tshark: %v: %s", err, stderr.String())
			}
			if len(bytes.TrimSpace(bad)) != 0 {
				t.Errorf("tshark flags frames:\n%s", bad)
			}
			all, err := exec.Command(path, "-r", file, "-T", "fields", "-e", "frame.protocols").Output()
			if err != nil {
				t.Fatal(err)
			}
			c := 0
			for _, line := range strings.Split(string(all), "\n") {
				if strings.Contains(line, "infiniband") {
					c++
				}
			}
			if c != n {
				t.Errorf("tshark decoded %d of %d frames as InfiniBand", c, n)
			}
		})
	}
}

// TestLoopbackKernel: --kernel selects both devices' rxe: the byte
// counters of Linux 7.2 show on 7.3 (the default) and not on 6.12 or 6.1,
// whose devices move the same data.
func TestLoopbackKernel(t *testing.T) {
	for _, tc := range []struct {
		kernel []string
		bytes  bool
	}{{nil, true}, {[]string{"--kernel", "7.3"}, true}, {[]string{"--kernel", "6.12"}, false}, {[]string{"--kernel", "6.1"}, false}} {
		code, out, errs := runCmd(t, append([]string{"loopback", "-n", "20", "--seed", "7"}, tc.kernel...)...)
		if code != 0 || !strings.Contains(out, "data check: ok") {
			t.Fatalf("loopback %v: status %d\n%s%s", tc.kernel, code, out, errs)
		}
		if got := strings.Contains(out, " sent_bytes "); got != tc.bytes || !strings.Contains(out, "rxe0 counters: sent_pkts ") {
			t.Errorf("loopback %v: sent_bytes shown %v, want %v\n%s", tc.kernel, got, tc.bytes, out)
		}
	}
	if code, _, errs := runCmd(t, "loopback", "--kernel", "5.10"); code != 2 || !strings.Contains(errs, "not one of 7.3, 6.12, 6.1") {
		t.Errorf("loopback --kernel 5.10: status %d, stderr %q", code, errs)
	}
}
