package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/uverbsd"
)

// useServing applies run's --fault and --coverage to a daemon another
// softroce serves: the rules are added live for the program's lifetime,
// and the profile the daemon has recorded by the program's end (its
// whole run so far, other programs' included) is written to the file.
// The returned function is called when the program has ended.
func useServing(dir string, df *daemonFlags, stderr io.Writer) (func() error, error) {
	if df.oneWay {
		return nil, fmt.Errorf("--one-way-doorbells: a serving daemon's doorbells are its own (softroce serve --one-way-doorbells)")
	}
	if df.noMemlock {
		return nil, fmt.Errorf("--no-memlock: a serving daemon's accounting is its own (softroce serve --no-memlock)")
	}
	var ids []string
	done := func() error {
		var firstErr error
		for _, id := range ids {
			if _, err := uverbsd.Control(dir, "fault", "del", id); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("fault del %s: %w", id, err)
			}
		}
		if df.coverage == "" {
			return firstErr
		}
		out, err := uverbsd.Control(dir, "coverage")
		if err != nil {
			return fmt.Errorf("--coverage: the serving daemon: %w", err)
		}
		p, err := coverage.Decode(strings.NewReader(out))
		if err != nil {
			return fmt.Errorf("--coverage: %w", err)
		}
		if err := coverage.WriteFile(df.coverage, p); err != nil {
			return fmt.Errorf("--coverage: %w", err)
		}
		fmt.Fprintf(stderr, "softroce: coverage of the serving daemon written to %s\n", df.coverage)
		return firstErr
	}
	for _, r := range df.faults.rules {
		out, err := uverbsd.Control(dir, "fault", "add", r.String())
		if err != nil {
			done()
			return nil, fmt.Errorf("--fault %s on the serving daemon: %w", r, err)
		}
		id, _, _ := strings.Cut(out, " ")
		ids = append(ids, id)
	}
	return done, nil
}
