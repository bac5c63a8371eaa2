package bench

import (
	"context"
	"testing"
)

// TestTAPSkippedWithoutRoot checks the TAP rows' form without root, also
// when the tests run as root (as in CI): the root check is replaced.
func TestTAPSkippedWithoutRoot(t *testing.T) {
	saved := euid
	euid = func() int { return 1000 }
	defer func() { euid = saved }()
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"tap"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no TAP rows")
	}
	for _, r := range rows {
		if r.Skipped != "needs root" {
			t.Errorf("row %q: skipped %q, want %q", r.Name, r.Skipped, "needs root")
		}
	}
}
