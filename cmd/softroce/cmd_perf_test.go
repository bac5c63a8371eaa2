package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// latDurRow is a -D latency row: size, count, t_avg, tps.
var latDurRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$`)

var perfAddr = regexp.MustCompile(`(?m)^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4} PSN 0x[0-9a-f]+.*\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:09:00:0(\d)\n`)

func TestPerfCommand(t *testing.T) {
	for _, tc := range []struct {
		test string
		args []string
		nqp  int
	}{
		{"write_bw", []string{"-n", "200", "-s", "65536", "-q", "2"}, 2},
		{"write_bw", []string{"-n", "100", "-s", "100", "--report_gbits", "-m", "512"}, 1},
		{"read_bw", []string{"-n", "100", "-s", "8192", "-o", "4"}, 1},
		{"write_bw", []string{"-n", "5", "-a"}, 1},
		{"read_bw", []string{"-n", "5", "-a", "-q", "2"}, 2},
		{"send_bw", []string{"-n", "100", "-s", "3000", "-r", "64"}, 1},
		{"atomic_bw", []string{"-n", "100", "-q", "2"}, 2},
		{"write_lat", []string{"-n", "100", "-s", "64"}, 1},
		{"read_lat", []string{"-n", "100", "-s", "2048"}, 1},
		{"send_lat", []string{"-n", "100"}, 1},
		{"atomic_lat", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, 1},
		// Bidirectional (-b) and duration (-D; 1 s: margin 0).
		{"write_bw", []string{"-n", "100", "-b", "-q", "2"}, 2},
		{"read_bw", []string{"-n", "100", "-b", "-s", "4096"}, 1},
		{"send_bw", []string{"-n", "100", "-b", "-s", "3000"}, 1},
		{"atomic_bw", []string{"-n", "100", "-b"}, 1},
		{"write_bw", []string{"-D", "1", "-s", "4096", "-q", "2"}, 2},
		{"send_bw", []string{"-D", "1", "-s", "3000"}, 1},
		{"send_bw", []string{"-D", "1", "-b", "-s", "3000"}, 1},
		{"write_lat", []string{"-D", "1"}, 1},
		{"read_lat", []string{"-D", "1"}, 1},
		// Unreliable connected QPs (-c UC).
		{"write_bw", []string{"-n", "100", "-c", "UC", "-q", "2"}, 2},
		{"send_bw", []string{"-n", "100", "-c", "UC", "-s", "3000"}, 1},
		{"send_bw", []string{"-n", "100", "-c", "UC", "-b", "-s", "3000"}, 1},
		{"write_lat", []string{"-n", "100", "-c", "UC"}, 1},
		{"send_lat", []string{"-n", "100", "-c", "UC"}, 1},
		// Unreliable datagram QPs (-c UD): the default size becomes the MTU.
		{"send_bw", []string{"-n", "100", "-c", "UD", "-q", "2", "-m", "1024"}, 2},
		{"send_bw", []string{"-n", "100", "-c", "UD", "-b", "-s", "1000"}, 1},
		{"send_lat", []string{"-n", "100", "-c", "UD"}, 1},
		// A shared receive queue (--use-srq).
		{"send_bw", []string{"-n", "100", "--use-srq", "-q", "3", "-r", "30", "-s", "3000"}, 3},
		{"send_bw", []string{"-n", "100", "--use-srq", "-q", "2", "-b"}, 2},
		{"send_lat", []string{"-n", "100", "--use-srq"}, 1},
		// On-demand paging MRs (--odp).
		{"write_bw", []string{"-n", "100", "--odp", "-q", "2"}, 2},
		{"read_bw", []string{"-n", "100", "--odp", "-s", "8192"}, 1},
		{"send_bw", []string{"-n", "100", "--odp", "-c", "UD"}, 1},
		{"send_lat", []string{"-n", "100", "--odp"}, 1},
		// Post lists (-l).
		{"write_bw", []string{"-n", "800", "-l", "8", "-Q", "4", "-s", "64", "-q", "2"}, 2},
		{"send_bw", []string{"-n", "100", "-l", "4", "-s", "1024"}, 1},
		{"read_bw", []string{"-n", "100", "-l", "4", "--perform_warm_up", "-b"}, 1},
		// Events (-e): sleep on the CQ's completion handler.
		{"send_bw", []string{"-n", "200", "-e", "-q", "2", "-s", "3000"}, 2},
		{"send_bw", []string{"-n", "100", "-e", "-b"}, 1},
		{"read_bw", []string{"-n", "100", "-e", "-s", "65536"}, 1},
		{"atomic_bw", []string{"-n", "100", "-e"}, 1},
		{"send_lat", []string{"-n", "100", "-e"}, 1},
		{"read_lat", []string{"-n", "100", "-e"}, 1},
	} {
		t.Run(tc.test+"/"+strings.Join(tc.args, "_"), func(t *testing.T) {
			if tc.test == "write_lat" && raceEnabled {
				t.Skip("write_lat polls memory the device writes")
			}
			h := pipeNodes(t)
			joined := " " + strings.Join(tc.args, " ") + " "
			dur, bidi := strings.Contains(joined, " -D "), strings.Contains(joined, " -b ")
			iters := 0
			for i, a := range tc.args {
				if a == "-n" {
					iters, _ = strconv.Atoi(tc.args[i+1])
				}
			}
			common := append([]string{"perf", tc.test, "-p", port}, tc.args...)
			sv, cl := runPair(t, h,
				append(append([]string{}, common...), "-d", "b", "--ip", "10.9.0.2/24"),
				append(append([]string{}, common...), "-d", "a", "--ip", "10.9.0.1/24", "localhost"))
			for _, r := range []struct {
				name  string
				res   cmdResult
				local string
			}{{"server", sv, "2"}, {"client", cl, "1"}} {
				if r.res.code != 0 {
					t.Fatalf("%s: exit %d\n%s\n%s", r.name, r.res.code, r.res.out, r.res.errout)
				}
				for i, a := range tc.args {
					if a == "-l" && (!strings.Contains(r.res.out, " Post List       : "+tc.args[i+1]+"\n") ||
						!strings.Contains(r.res.out, " Post List BW Test\n")) {
						t.Errorf("%s: no post list lines:\n%s", r.name, r.res.out)
					}
				}
				as := perfAddr.FindAllStringSubmatch(r.res.out, -1)
				// All the local addresses, then all the peer's.
				for i, a := range as {
					if len(as) != 2*tc.nqp || (i < tc.nqp) != (a[1] == "local") || (a[1] == "local") != (a[2] == r.local) {
						t.Errorf("%s: address lines:\n%s", r.name, r.res.out)
						break
					}
				}
				var rows [][]string
				switch {
				case strings.HasSuffix(tc.test, "_bw"):
					rows = bwRow.FindAllStringSubmatch(r.res.out, -1)
				case dur:
					rows = latDurRow.FindAllStringSubmatch(r.res.out, -1)
					if want := " #bytes        #iterations       t_avg[usec]    tps average\n"; len(rows) > 0 && !strings.Contains(r.res.out, want) {
						t.Errorf("%s: no duration header %q:\n%s", r.name, want, r.res.out)
					}
				default:
					rows = latRow.FindAllStringSubmatch(r.res.out, -1)
				}
				want := 1
				if r.name == "server" && (tc.test == "read_lat" || tc.test == "atomic_lat") {
					want = 0 // the server measured nothing
					if strings.Contains(r.res.out, "#bytes") {
						t.Errorf("the %s server printed a header, the real one does not:\n%s", tc.test, r.res.out)
					}
				}
				if r.name == "client" && strings.Contains(strings.Join(tc.args, " "), "-a") {
					want = 23 // sizes 2..2^23
				}
				if len(rows) != want {
					t.Fatalf("%s: %d result rows:\n%s", r.name, len(rows), r.res.out)
				}
				if want == 1 {
					// perftest counts the messages of all QPs.
					if it, _ := strconv.Atoi(rows[0][2]); !dur && it != iters*tc.nqp || dur && it <= 0 {
						t.Errorf("%s: row %q", r.name, rows[0][0])
					}
					if dur && strings.HasSuffix(tc.test, "_bw") && rows[0][3] != "0.00" {
						t.Errorf("%s: row %q: a duration run has no BW peak", r.name, rows[0][0])
					}
					if v, _ := strconv.ParseFloat(rows[0][4], 64); v <= 0 && !strings.Contains(r.res.out, "Gb/sec") {
						t.Errorf("%s: row %q has no average", r.name, rows[0][0])
					}
				}
			}
			if bidi {
				// Each side prints its own count and both sides' rates
				// (summed from the report exchange; send_bw -b -D has
				// none and prints its own sends and receives).
				s, c := bwRow.FindStringSubmatch(sv.out), bwRow.FindStringSubmatch(cl.out)
				if !dur || tc.test != "send_bw" {
					if s[4] != c[4] || s[5] != c[5] {
						t.Errorf("server row %q, client row %q: the rates differ, want both sides' sum", s[0], c[0])
					}
				}
				return
			}
			// send_bw exchanges no report: its server prints what it
			// measured receiving; the other BW servers print the client's.
			if all := bwRow.FindAllString(cl.out, -1); strings.HasSuffix(tc.test, "_bw") && tc.test != "send_bw" && bwRow.FindString(sv.out) != all[len(all)-1] {
				t.Errorf("server printed %q, client %q: the server prints the client's report",
					bwRow.FindString(sv.out), bwRow.FindString(cl.out))
			}
		})
	}
}

// TestPerfCommandSRQDepth: --use-srq with fewer receives than QPs ends as
// the tool ends, its message on stdout after the rule, status 1.
func TestPerfCommandSRQDepth(t *testing.T) {
	code, out, errs := runCmd(t, "perf", "send_bw", "--use-srq", "-q", "4", "-r", "3")
	if want := "-\n Using SRQ depth should be greater than number of QPs.\n"; code != 1 || !strings.HasSuffix(out, want) || errs != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestPerfCommandRefuses(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"send_bw", "-a"},
		{"write_bw", "-D", "3", "-a"},
		{"write_bw", "-D", "4", "-f", "2"},
		{"write_lat", "-b"},
		{"write_bw", "-a", "-b"},
		{"read_bw", "-c", "UC"},
		{"write_bw", "-c", "XRC"},
		{"atomic_bw", "-s", "64"},
		{"write_bw", "--mtu"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"perf"}, args...)...)
			if code == 0 || errs == "" {
				t.Errorf("exit %d, stderr %q", code, errs)
			}
		})
	}
}

// TestPerfCommandUD: send_bw -c UD at path MTU 1024. The default size
// becomes the MTU with the tool's two lines on stderr, and both rows
// report 1024 bytes; an -s above the MTU ends both sides, the softroce
// one with the tool's message and status 1.
func TestPerfCommandUD(t *testing.T) {
	h := pipeNodes(t)
	common := []string{"perf", "send_bw", "-p", port, "-c", "UD", "-n", "50", "-m", "1024"}
	sv, cl := runPair(t, h,
		append(append([]string{}, common...), "-d", "b", "--ip", "10.9.0.2/24"),
		append(append([]string{}, common...), "-d", "a", "--ip", "10.9.0.1/24", "localhost"))
	for _, r := range []cmdResult{sv, cl} {
		row := bwRow.FindStringSubmatch(r.out)
		if r.code != 0 || row == nil || row[1] != "1024" || row[2] != "50" ||
			!strings.Contains(r.errout, " Max msg size in UD is MTU 1024\n Changing to this MTU\n") {
			t.Errorf("exit %d\n%s\n%s", r.code, r.out, r.errout)
		}
	}
	big := append(append([]string{}, common...), "-s", "2048")
	sv, cl = runPair(t, h,
		append(append([]string{}, big...), "-d", "b", "--ip", "10.9.0.2/24"),
		append(append([]string{}, big...), "-d", "a", "--ip", "10.9.0.1/24", "localhost"))
	for _, r := range []cmdResult{sv, cl} {
		if r.code != 1 || !strings.Contains(r.errout, " Max message size in UD cannot be greater than MTU \n") {
			t.Errorf("-s 2048: exit %d\n%s\n%s", r.code, r.out, r.errout)
		}
	}
}
