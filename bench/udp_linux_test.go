package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// TestUDPSkippedWithoutRoot checks the UDP rows' form without root (the
// root check is replaced, as for the TAP rows).
func TestUDPSkippedWithoutRoot(t *testing.T) {
	saved := euid
	euid = func() int { return 1000 }
	defer func() { euid = saved }()
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"udp"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(udpCases) {
		t.Fatalf("%d UDP rows, want %d", len(rows), len(udpCases))
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Skipped, "needs root") {
			t.Errorf("row %q: skipped %q, want needs root", r.Name, r.Skipped)
		}
	}
}

// TestUDPRowsMeasure runs the UDP group for real: both sides of each row
// carry a rate (the ratio's target is the bench's to report, not a test's).
func TestUDPRowsMeasure(t *testing.T) {
	testenv.RequireRoot(t)
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"udp"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Skipped != "" || r.Value <= 0 || r.BaseValue <= 0 {
			t.Errorf("row %q: value %v baseline %v skipped %q", r.Name, r.Value, r.BaseValue, r.Skipped)
		}
	}
}
