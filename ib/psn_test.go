package ib

import "testing"

// TestPSN checks PSN arithmetic (24-bit, modulo 2^24, compared as rxe's
// psn_compare does) on worked examples, wrap-around included.
func TestPSN(t *testing.T) {
	for _, tt := range []struct {
		a, b uint32
		want int
	}{
		{0, 0xffffff, 1},
		{0x800000, 0, -1},
		{0x7fffff, 0, 1},
		{0, 0x7fffff, -1},
		{5, 5, 0},
		{0x1000005, 5, 0}, // only 24 bits count
		{1, 0, 1},
		{0, 1, -1},
	} {
		if got := PSNCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("PSNCompare(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	if got := PSNAdd(0xffffff, 1); got != 0 {
		t.Errorf("PSNAdd(0xffffff, 1) = %#x", got)
	}
	if got := PSNAdd(0xfffffe, 5); got != 3 {
		t.Errorf("PSNAdd(0xfffffe, 5) = %#x", got)
	}
}

// TestPSNSub: the distance from b to a wraps at 2^24 and undoes PSNAdd.
func TestPSNSub(t *testing.T) {
	for _, c := range [][3]uint32{{5, 3, 2}, {2, 0xfffffe, 4}, {7, 7, 0}, {0, 1, 0xffffff}} {
		if got := PSNSub(c[0], c[1]); got != c[2] {
			t.Errorf("PSNSub(%#x, %#x) = %#x, want %#x", c[0], c[1], got, c[2])
		}
		if got := PSNAdd(c[1], PSNSub(c[0], c[1])); got != c[0]&PSNMask {
			t.Errorf("PSNAdd(%#x, PSNSub) = %#x, want %#x", c[1], got, c[0])
		}
	}
}
