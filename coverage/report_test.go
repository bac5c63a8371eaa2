package coverage_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/coverage"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The report of a profile with every kind of cell (valid transitions
// taken and failed, a transition outside the table, a modify without
// IB_QP_STATE, error completions, events, failed verbs, transport
// counters) is exactly testdata/sample.report.
func TestReportGolden(t *testing.T) {
	p, err := coverage.ReadFiles(filepath.Join("testdata", "sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := coverage.NewReport(p).WriteText(&got); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "sample.report")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("report differs from %s (go test -update rewrites it):\n%s", golden, got.String())
	}
}
