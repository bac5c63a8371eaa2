package check

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// WriteReport writes the findings as the short report softroce run
// prints at a program's end: per finding its name, object, count, first
// occurrence and WR id, then once per name the explanation with the fix.
func WriteReport(w io.Writer, found []Finding) error {
	if len(found) == 0 {
		_, err := fmt.Fprintln(w, "softroce check: no findings")
		return err
	}
	fmt.Fprintf(w, "softroce check: %d findings\n", len(found))
	seen := map[Name]bool{}
	var names []Name
	for _, f := range found {
		wr := ""
		if f.WRID != nil {
			wr = fmt.Sprintf(" wr_id %#x", *f.WRID)
		}
		fmt.Fprintf(w, "  %s: %s (pid %d %s): %s%s; %d times, first at %s\n", f.Name, f.Object, f.PID, f.Program,
			f.Detail, wr, f.Count, f.First.UTC().Format(time.RFC3339Nano))
		if !seen[f.Name] {
			seen[f.Name] = true
			names = append(names, f.Name)
		}
	}
	for _, n := range names {
		info, _ := Lookup(n)
		fmt.Fprintf(w, "%s (%s): %s (--check-ignore %s to suppress)\n", n, info.Rule, info.Explain, n)
	}
	return nil
}

// Report is the JSON form of a run's findings (--check-out).
type Report struct {
	Findings []Finding `json:"findings"`
}

// WriteJSON writes the findings as a Report.
func WriteJSON(w io.Writer, found []Finding) error {
	if found == nil {
		found = []Finding{}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(Report{Findings: found})
}

// ReadJSON reads a Report.
func ReadJSON(r io.Reader) ([]Finding, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("check: reading a report: %w", err)
	}
	return rep.Findings, nil
}
