// Package testenv gates tests on their environment and makes their
// randomness replayable.
//
// Tests that need root (TAP devices, network namespaces) call RequireRoot:
// it skips with a reason on a developer machine but fails when CI=true, so
// CI never silently skips the real path. Randomized tests call Rand, which
// logs its seed and honours -seed to replay a failure exactly.
package testenv

import (
	"flag"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: a fresh seed, logged)")

// InCI reports whether the tests run under CI (the environment variable
// CI is "true" or "1").
func InCI() bool {
	v := os.Getenv("CI")
	return v == "true" || v == "1"
}

// RequireRoot skips t unless the process runs as root. Under CI it fails
// instead: the privileged tests are the ones that prove the real path.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatal("this test needs root, and CI=true: privileged tests must run in CI")
	}
	t.Skip("skipping: this test needs root (TAP devices and network namespaces); run the tests as root to include it")
}

// Require skips t with reason when ok is false, or fails it under CI.
// Use it for host features (a binary such as tshark, a kernel module) that
// CI installs and a developer machine may lack.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("CI=true but %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}

// Seed returns the seed for a randomized test: the -seed flag if set,
// otherwise one derived from the clock. It logs the seed so a failure can
// be replayed with -seed.
func Seed(t testing.TB) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("random seed %d (replay with -seed=%d)", s, s)
	return s
}

// Rand returns a generator seeded with Seed(t).
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	s := Seed(t)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}
