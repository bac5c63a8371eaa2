package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// TestUDPRowsMeasureOnTheLoopbackWithoutRoot: without root (the check is
// replaced, as for the TAP rows) the UDP rows still measure, between two
// loopback addresses: each names the loopback and carries a rate on both
// sides.
func TestUDPRowsMeasureOnTheLoopbackWithoutRoot(t *testing.T) {
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
		if !strings.HasSuffix(r.Name, " lo") || r.Skipped != "" || r.Value <= 0 || r.BaseValue <= 0 {
			t.Errorf("row %q: value %v baseline %v skipped %q, want a measured loopback row", r.Name, r.Value, r.BaseValue, r.Skipped)
		}
	}
}

// TestUDPRowsMeasure runs the UDP group for real as root, between two
// namespaces joined by a veth: both sides of each row carry a rate (the
// ratio's target is the bench's to report, not a test's).
func TestUDPRowsMeasure(t *testing.T) {
	testenv.RequireRoot(t)
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"udp"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if strings.HasSuffix(r.Name, " lo") || r.Skipped != "" || r.Value <= 0 || r.BaseValue <= 0 {
			t.Errorf("row %q: value %v baseline %v skipped %q", r.Name, r.Value, r.BaseValue, r.Skipped)
		}
	}
}
