package ib

import "testing"

func TestMTU(t *testing.T) {
	tests := []struct {
		m     MTU
		bytes int
		str   string
	}{
		{0, -1, "0"}, {MTU256, 256, "IB_MTU_256"}, {MTU512, 512, "IB_MTU_512"},
		{MTU1024, 1024, "IB_MTU_1024"}, {MTU2048, 2048, "IB_MTU_2048"}, {MTU4096, 4096, "IB_MTU_4096"},
		{OPAMTU8192, -1, "OPA_MTU_8192"}, {OPAMTU10240, -1, "OPA_MTU_10240"}, {-1, -1, "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			if got := tt.m.Bytes(); got != tt.bytes {
				t.Errorf("Bytes() = %d, want %d", got, tt.bytes)
			}
			if got := tt.m.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			if tt.m.IsValid() && MTUFromBytes(tt.bytes) != tt.m {
				t.Errorf("MTUFromBytes(%d) = %v", tt.bytes, MTUFromBytes(tt.bytes))
			}
		})
	}
	for _, c := range []struct {
		n    int
		want MTU
	}{{-5, MTU256}, {0, MTU256}, {511, MTU256}, {512, MTU512}, {1500, MTU1024}, {2047, MTU1024}, {4095, MTU2048}, {9000, MTU4096}} {
		if got := MTUFromBytes(c.n); got != c.want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}
