package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/bench"
)

// columns splits a table line on the tabwriter's padding (two or more
// spaces; names and targets contain single spaces only).
var columns = regexp.MustCompile(`\s{2,}`)

// TestBenchQuick runs `softroce bench --quick` and checks that every row
// is printed with a numeric value, baseline and ratio, or skipped for its
// reason: the TAP rows (groups tap and latency) need root to make the TAP
// devices, the daemon rows Debian's perftest and a C compiler, which a
// developer's machine may lack (CI has both). Every other row, the UDP
// link's included, measures for every user. It asserts nothing about
// speed.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every measurement (a few seconds)")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--quick"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("no rows:\n%s", out.String())
	}
	groups := map[string]int{}
	for _, l := range lines[1:] {
		f := columns.Split(strings.TrimSpace(l), -1)
		if len(f) != 10 {
			t.Errorf("row has %d columns, want 10: %q", len(f), l)
			continue
		}
		groups[f[0]]++
		if why, ok := strings.CutPrefix(f[9], "skipped: "); ok {
			daemonTools := f[0] == "daemon" && (strings.Contains(why, "perftest") || strings.Contains(why, "C compiler"))
			tapWithoutRoot := (f[0] == "tap" || f[0] == "latency") && os.Geteuid() != 0 && why == "needs root"
			if !daemonTools && !tapWithoutRoot {
				t.Errorf("row skipped for a reason it must not have here (euid %d): %q", os.Geteuid(), l)
			}
			continue
		}
		for _, i := range []int{2, 5, 7} {
			num := strings.Fields(f[i])[0]
			if v, err := strconv.ParseFloat(num, 64); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("column %d of %q is not a number: %q", i, l, f[i])
			}
		}
		if f[8] != "-" && !strings.HasPrefix(f[9], "PASS") && !strings.HasPrefix(f[9], "MISS") {
			t.Errorf("row with a target has result %q: %q", f[9], l)
		}
	}
	for _, g := range []string{"wire", "inproc", "scale", "udp", "tap", "latency", "daemon"} {
		if groups[g] == 0 {
			t.Errorf("no %s rows in:\n%s", g, out.String())
		}
	}
}

// TestBenchJSON checks --json on the cheapest group: rows decode, with
// their fields filled in.
func TestBenchJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--quick", "--json", "--group", "wire"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	var rows []bench.Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("output is not JSON rows: %v\n%s", err, out.String())
	}
	if len(rows) != 6 {
		t.Fatalf("%d wire rows, want 6 (ICRC, Parse, Build at two sizes)", len(rows))
	}
	for _, r := range rows {
		if r.Group != "wire" || r.Name == "" || r.Value <= 0 || r.BaseValue <= 0 || r.Ratio <= 0 || r.Unit == "" {
			t.Errorf("incomplete row %+v", r)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "extra"}, &out, &errb); code != 2 {
		t.Fatalf("bench with an argument: exit %d, want 2", code)
	}
	if code := run([]string{"bench", "--group", "nonesuch"}, &out, &errb); code != 1 {
		t.Fatalf("unknown group: exit %d, want 1 (stderr %q)", code, errb.String())
	}
}
