package coverage

import (
	"bytes"
	"strings"
	"testing"
)

// TestFaultsRoundTripMergeAndReport: the faults a recorder saw survive
// Encode/Decode, add up in a merge (the union of the cells), and the
// report lists them; a profile without faults encodes no "faults" key.
func TestFaultsRoundTripMergeAndReport(t *testing.T) {
	a, b := NewRecorder("rxe0"), NewRecorder("rxe1")
	a.Fault("wire:drop,nth=3", "drop")
	a.Fault("wire:drop,nth=3", "drop")
	b.Fault("wire:drop,nth=3", "drop")
	b.Fault("port:down", "port down")
	p := a.Profile()
	p.Merge(b.Profile())
	var buf bytes.Buffer
	if err := Encode(&buf, p); err != nil {
		t.Fatal(err)
	}
	q, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Faults[FaultKey{"wire:drop,nth=3", "drop"}]; got != 3 {
		t.Errorf("drop count %d, want 3", got)
	}
	if got := q.Faults[FaultKey{"port:down", "port down"}]; got != 1 || len(q.Faults) != 2 {
		t.Errorf("faults %v", q.Faults)
	}
	var text strings.Builder
	if err := NewReport(q).WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "faults injected:\n  port:down: port down 1\n  wire:drop,nth=3: drop 3\n") {
		t.Errorf("report:\n%s", text.String())
	}
	buf.Reset()
	if err := Encode(&buf, NewRecorder("rxe0").Profile()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "faults") {
		t.Errorf("a profile without faults encodes them:\n%s", buf.String())
	}
}

// TestResetForgetsTheCellsButNotTheRun: after Reset a recorder's profile
// is one run of its device with no cell; later cells count from zero.
func TestResetForgetsTheCellsButNotTheRun(t *testing.T) {
	r := NewRecorder("rxe0")
	r.Fault("port:down", "port down")
	r.VerbFailed("create_qp", 12)
	r.Reset()
	r.Fault("port:up", "port up")
	p := r.Profile()
	if p.Runs != 1 || len(p.Devices) != 1 || len(p.Verbs) != 0 || len(p.Faults) != 1 || p.Faults[FaultKey{"port:up", "port up"}] != 1 {
		t.Errorf("after Reset: %+v", p)
	}
}
