package bench

import "testing"

// TestPerftestResult reads the columns the daemon rows take from the
// tools' own output: ib_write_bw's average Gb/s and ib_send_lat's
// t_typical.
func TestPerftestResult(t *testing.T) {
	bw := ` Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             2.72               1.75   		   0.003338
---------------------------------------------------------------------------------------
`
	lat := `---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      1000          44.08          41520.73      3991.99  	       3262.61     	2455.74		9650.01 		41520.73
---------------------------------------------------------------------------------------
`
	for _, c := range []struct {
		name string
		out  string
		col  int
		want float64
	}{{"write_bw average", bw, 3, 1.75}, {"send_lat typical", lat, 4, 3991.99}} {
		got, err := perftestResult(c.out, c.col)
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "Couldn't connect to 127.0.0.1:18515\n", " #bytes #iterations\n 64 x\n"} {
		if v, err := perftestResult(bad, 1); err == nil {
			t.Errorf("perftestResult(%q) = %v, want an error", bad, v)
		}
	}
}

// TestDaemonRowsHoldEachDoorbellToItsTarget: the default doorbell's
// latency is judged against the floor, the one-way doorbells' bandwidth
// against the in-process WRITE, the checking daemon's against the
// default's; the other rows are informative.
func TestDaemonRowsHoldEachDoorbellToItsTarget(t *testing.T) {
	targets := map[string]string{}
	for _, r := range daemonRows("") {
		if r.Target != "" {
			targets[r.Name+" vs "+r.Baseline] = r.Target
		}
	}
	want := map[string]string{
		daemonLatName + " vs " + floorBase:               "ratio <= 1.5",
		daemonOneWayWriteName + " vs " + inprocWriteBase: "ratio >= 0.5",
		daemonCheckWriteName + " vs " + daemonWriteName:  "ratio >= 0.8",
		daemonCheckLatName + " vs " + daemonLatName:      "ratio <= 1.25",
	}
	if len(targets) != len(want) {
		t.Fatalf("targets %q, want %q", targets, want)
	}
	for k, v := range want {
		if targets[k] != v {
			t.Errorf("%s: target %q, want %q", k, targets[k], v)
		}
	}
}
