package testenv

import (
	"testing"
)

func TestRandReplays(t *testing.T) {
	*seedFlag = 42
	defer func() { *seedFlag = 0 }()
	a, b := Rand(t), Rand(t)
	for i := 0; i < 16; i++ {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("draw %d: same seed gave %d and %d", i, x, y)
		}
	}
}

func TestInCI(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tt.v)
		if got := InCI(); got != tt.want {
			t.Errorf("CI=%q: InCI() = %v, want %v", tt.v, got, tt.want)
		}
	}
}
