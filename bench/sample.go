package bench

import (
	"cmp"
	"slices"
)

// rateSample is one RC WRITE rate with the baseline's rate around it:
// the mean of a baseline sample taken just before and one just after.
// On a shared machine rates move with the load from one second to the
// next, and only samples taken side by side compare.
type rateSample struct{ rc, raw float64 }

// medianSample returns the sample whose ratio is the median (the lower
// middle one of an even count).
func medianSample(s []rateSample) rateSample {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b rateSample) int { return cmp.Compare(ratio(a.rc, a.raw), ratio(b.rc, b.raw)) })
	return s[(len(s)-1)/2]
}
