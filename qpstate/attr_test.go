package qpstate

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

func TestRoundUpPow2(t *testing.T) {
	for _, c := range [][2]uint32{{0, 0}, {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {127, 128}, {128, 128}, {129, 256}, {255, 256}} {
		if got := RoundUpPow2(c[0]); got != c[1] {
			t.Errorf("RoundUpPow2(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"access", (AccessLocalWrite | AccessRemoteRead).String(), "IB_ACCESS_LOCAL_WRITE|IB_ACCESS_REMOTE_READ"},
		{"access_unknown", (AccessRemoteWrite | 1<<21 | 1<<31).String(), "IB_ACCESS_REMOTE_WRITE|0x80200000"},
		{"access_zero", AccessFlags(0).String(), "0"},
		{"access_relaxed", AccessRelaxedOrdering.String(), "IB_ACCESS_RELAXED_ORDERING"},
		{"mig", MigArmed.String(), "IB_MIG_ARMED"},
		{"mig_bad", MigState(3).String(), "IB_MIG(3)"},
		{"gid", GIDTypeRoCEv2.String(), "IB_GID_TYPE_ROCE_UDP_ENCAP"},
		{"ahtype", AHAttrTypeRoCE.String(), "RDMA_AH_ATTR_TYPE_ROCE"},
		{"ahflags", AHGRH.String(), "IB_AH_GRH"},
		{"ahflags_unknown", AHFlags(3).String(), "IB_AH_GRH|0x2"},
		{"reason", ReasonPair.String(), "transition not allowed"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if !(AccessSupported).IsValid() || (AccessFlags(1 << 10)).IsValid() {
		t.Error("AccessFlags.IsValid wrong at the IB_ACCESS_SUPPORTED boundary")
	}
	if AccessRxeQP&(AccessZeroBased|AccessHugeTLB) != 0 || AccessRxeQP&AccessRemote != AccessRemote {
		t.Errorf("AccessRxeQP = %v", AccessRxeQP)
	}
}
