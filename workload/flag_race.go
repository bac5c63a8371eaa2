//go:build race

package workload

// raceEnabled reports a race-detector build. write_lat polls memory that
// the peer's RDMA WRITE fills, which no lock orders (the C tool uses a
// volatile load); the detector reports that poll, so tests of write_lat
// skip themselves under it.
const raceEnabled = true
