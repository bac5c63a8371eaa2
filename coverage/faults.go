package coverage

import (
	"cmp"
	"maps"
	"slices"
)

// FaultKey is one cell of fault coverage: an injected fault's rule, as
// written ("wire:drop,qp=0x11,nth=3"), and one action it took ("drop",
// "fail EAGAIN", "port down").
type FaultKey struct {
	Rule   string
	Action string
}

// FaultCount is a fault rule, an action it took and how many times.
type FaultCount struct {
	Rule   string `json:"rule"`
	Action string `json:"action"`
	Count  uint64 `json:"count"`
}

type fileFault struct {
	Rule   string `json:"rule"`
	Action string `json:"action"`
	Count  uint64 `json:"count"`
}

// Fault records that the fault rule took action once. It is safe for
// concurrent use and may be called while the device's locks are held.
func (r *Recorder) Fault(rule, action string) {
	r.mu.Lock()
	add(&r.p.Faults, FaultKey{rule, action}, 1)
	r.mu.Unlock()
}

func sortedFaults(m map[FaultKey]uint64) []FaultKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b FaultKey) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Action, b.Action))
	})
}
