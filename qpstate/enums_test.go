package qpstate

import (
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

func TestStateStringParse(t *testing.T) {
	tests := []struct {
		s     State
		str   string
		name  string
		valid bool
	}{
		{StateReset, "IB_QPS_RESET", "RESET", true},
		{StateInit, "IB_QPS_INIT", "INIT", true},
		{StateRTR, "IB_QPS_RTR", "RTR", true},
		{StateRTS, "IB_QPS_RTS", "RTS", true},
		{StateSQD, "IB_QPS_SQD", "SQD", true},
		{StateSQE, "IB_QPS_SQE", "SQE", true},
		{StateErr, "IB_QPS_ERR", "ERR", true},
		{7, "7", "7", false},
		{-1, "-1", "-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			if got := tt.s.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			if got := tt.s.Name(); got != tt.name {
				t.Errorf("Name() = %q, want %q", got, tt.name)
			}
			if got := tt.s.IsValid(); got != tt.valid {
				t.Errorf("IsValid() = %v, want %v", got, tt.valid)
			}
			for _, in := range []string{tt.str, tt.name, " " + tt.name + " "} {
				if got, err := ParseState(in); err != nil || got != tt.s {
					t.Errorf("ParseState(%q) = %v, %v; want %v", in, got, err, tt.s)
				}
			}
		})
	}
	for _, in := range []string{"rts", "Ib_Qps_Rts"} {
		if got, err := ParseState(in); err != nil || got != StateRTS {
			t.Errorf("ParseState(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "RUN", "IB_QPS_", "IB_QPT_RC"} {
		if _, err := ParseState(bad); err == nil {
			t.Errorf("ParseState(%q) succeeded", bad)
		}
	}
}

func TestTypeStringParse(t *testing.T) {
	want := map[Type]string{0: "IB_QPT_SMI", 1: "IB_QPT_GSI", 2: "IB_QPT_RC", 3: "IB_QPT_UC",
		4: "IB_QPT_UD", 5: "IB_QPT_RAW_IPV6", 6: "IB_QPT_RAW_ETHERTYPE", 8: "IB_QPT_RAW_PACKET",
		9: "IB_QPT_XRC_INI", 10: "IB_QPT_XRC_TGT"}
	if len(Types()) != len(want) {
		t.Fatalf("Types() has %d entries, want %d", len(Types()), len(want))
	}
	for ty := Type(-2); ty < 14; ty++ {
		str := ty.String()
		if w, ok := want[ty]; ok {
			if str != w || !ty.IsValid() {
				t.Errorf("Type(%d): String %q IsValid %v, want %q true", ty, str, ty.IsValid(), w)
			}
		} else if ty.IsValid() {
			t.Errorf("Type(%d).IsValid() = true", ty)
		}
		for _, in := range []string{str, ty.Name()} {
			if got, err := ParseType(in); err != nil || got != ty {
				t.Errorf("ParseType(%q) = %v, %v; want %d", in, got, err, ty)
			}
		}
	}
	if got, err := ParseType("xrc_tgt"); err != nil || got != TypeXRCTgt {
		t.Errorf("ParseType(xrc_tgt) = %v, %v", got, err)
	}
	if _, err := ParseType("RD"); err == nil {
		t.Error("ParseType(RD) succeeded")
	}
}

func TestAttrMaskString(t *testing.T) {
	tests := []struct {
		m     AttrMask
		str   string
		short string
	}{
		{0, "0", "0"},
		{AttrAV | AttrPathMTU, "IB_QP_AV|IB_QP_PATH_MTU", "AV|PATH_MTU"},
		{AttrState | 0x400000, "IB_QP_STATE|IB_QP_RESERVED2", "STATE|RESERVED2"},
		{AttrState | 1<<26 | 1<<31, "IB_QP_STATE|0x84000000", "STATE|0x84000000"},
		{0x12E01, "IB_QP_STATE|IB_QP_TIMEOUT|IB_QP_RETRY_CNT|IB_QP_RNR_RETRY|IB_QP_MAX_QP_RD_ATOMIC|IB_QP_SQ_PSN",
			"STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN"},
		{AttrRateLimit, "IB_QP_RATE_LIMIT", "RATE_LIMIT"},
		{1 << 30, "0x40000000", "0x40000000"},
	}
	for _, tt := range tests {
		t.Run(tt.short, func(t *testing.T) {
			if got := tt.m.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
			if got := tt.m.ShortString(); got != tt.short {
				t.Errorf("ShortString() = %q, want %q", got, tt.short)
			}
			for _, in := range []string{tt.str, tt.short} {
				if got, err := ParseAttrMask(in); err != nil || got != tt.m {
					t.Errorf("ParseAttrMask(%q) = %v, %v; want %v", in, got, err, tt.m)
				}
			}
		})
	}
}

func TestParseAttrMaskForms(t *testing.T) {
	tests := []struct {
		in   string
		want AttrMask
		ok   bool
	}{
		{"STATE,TIMEOUT,SQ_PSN", AttrState | AttrTimeout | AttrSQPSN, true},
		{"av,path_mtu", AttrAV | AttrPathMTU, true},
		{"IB_QP_AV|ib_qp_path_mtu", AttrAV | AttrPathMTU, true},
		{"PKEY PORT ACCESS", AttrPKeyIndex | AttrPort | AttrAccessFlags, true},
		{"0x12E01", 0x12E01, true},
		{"0x39", 0x39, true},
		{"57", 0x39, true},
		{"STATE+0x8", AttrState | AttrAccessFlags, true},
		{"CUR|MQRA|MDRA|MINRNR|DQPN|MIG|SQDN|ALT|RATE|MTU|RETRY|PKEY",
			AttrCurState | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic | AttrMinRNRTimer | AttrDestQPN |
				AttrPathMigState | AttrEnSQDAsyncNotify | AttrAltPath | AttrRateLimit | AttrPathMTU | AttrRetryCnt | AttrPKeyIndex, true},
		{"", 0, true},
		{"0", 0, true},
		{"STATE,NOPE", 0, false},
		{"0x1ffffffff", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAttrMask(tt.in)
			if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
				t.Errorf("ParseAttrMask(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestAttrMaskRoundTripRandom(t *testing.T) {
	rng := testenv.Rand(t)
	for i := 0; i < 2000; i++ {
		m := AttrMask(rng.Uint32())
		for _, s := range []string{m.String(), m.ShortString()} {
			if got, err := ParseAttrMask(s); err != nil || got != m {
				t.Fatalf("ParseAttrMask(%q) = %v, %v; want %#x", s, got, err, uint32(m))
			}
		}
	}
}

func FuzzParseAttrMask(f *testing.F) {
	f.Add("IB_QP_AV|IB_QP_PATH_MTU")
	f.Add("AV,PATH_MTU")
	f.Add("0x12e01")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseAttrMask(s)
		if err != nil {
			return
		}
		if back, err := ParseAttrMask(m.String()); err != nil || back != m {
			t.Fatalf("%q -> %v -> %v, %v", s, m, back, err)
		}
	})
}
