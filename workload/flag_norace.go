//go:build !race

package workload

// raceEnabled reports a race-detector build (see flag_race.go).
const raceEnabled = false
