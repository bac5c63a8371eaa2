package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// floorPeersRunning counts this process's children whose environment
// names a floor role.
func floorPeersRunning(t *testing.T) int {
	t.Helper()
	envs, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range envs {
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if err != nil {
			continue
		}
		// The parent's pid is the fourth field, after the ")" that ends
		// the command name.
		f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(f) < 2 || string(f[1]) != strconv.Itoa(os.Getpid()) {
			continue
		}
		if env, err := os.ReadFile(p); err == nil && bytes.Contains(env, []byte(floorRoleEnv+"=")) {
			n++
		}
	}
	return n
}

// TestSocketFloorRoundTrips: the floor is measured through an echo process
// (a round trip takes time, and not a second), with and without the busy
// pollers, and no peer process outlives the measurement.
func TestSocketFloorRoundTrips(t *testing.T) {
	for _, spinners := range []int{0, 2} {
		d, err := socketFloor(200, spinners)
		if err != nil {
			t.Fatalf("%d spinners: %v", spinners, err)
		}
		if d <= 0 || d > time.Second {
			t.Errorf("%d spinners: round trip p50 %v", spinners, d)
		}
		t.Logf("%d spinners: round trip p50 %v", spinners, d)
	}
	if n := floorPeersRunning(t); n != 0 {
		t.Errorf("%d floor peer processes still running", n)
	}
}
