package qpstate

import (
	"testing"

	"github.com/softroce/softroce/ib"
)

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
		{"access", (ib.AccessLocalWrite | ib.AccessRemoteRead).String(), "IB_ACCESS_LOCAL_WRITE|IB_ACCESS_REMOTE_READ"},
		{"access_unknown", (ib.AccessRemoteWrite | 1<<21 | 1<<31).String(), "IB_ACCESS_REMOTE_WRITE|0x80200000"},
		{"access_zero", ib.AccessFlags(0).String(), "0"},
		{"access_relaxed", ib.AccessRelaxedOrdering.String(), "IB_ACCESS_RELAXED_ORDERING"},
		{"mig", MigArmed.String(), "IB_MIG_ARMED"},
		{"mig_bad", MigState(3).String(), "IB_MIG(3)"},
		{"gid", ib.GIDTypeRoCEv2.String(), "IB_GID_TYPE_ROCE_UDP_ENCAP"},
		{"ahtype", ib.AHAttrTypeRoCE.String(), "RDMA_AH_ATTR_TYPE_ROCE"},
		{"ahflags", ib.AHGRH.String(), "IB_AH_GRH"},
		{"ahflags_unknown", ib.AHFlags(3).String(), "IB_AH_GRH|0x2"},
		{"reason", ReasonPair.String(), "transition not allowed"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if !(ib.AccessSupported).IsValid() || (ib.AccessFlags(1 << 10)).IsValid() {
		t.Error("AccessFlags.IsValid wrong at the IB_ACCESS_SUPPORTED boundary")
	}
	if ib.AccessRxeQP&(ib.AccessZeroBased|ib.AccessHugeTLB) != 0 || ib.AccessRxeQP&ib.AccessRemote != ib.AccessRemote {
		t.Errorf("AccessRxeQP = %v", ib.AccessRxeQP)
	}
}
