package qpstate

import "testing"

func BenchmarkModifyIsOK(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if !ModifyIsOK(StateRTR, StateRTS, TypeRC, 0x12E01) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkCheckOK(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if Check(StateRTR, StateRTS, TypeRC, 0x12E01) != nil {
			b.Fatal("refused")
		}
	}
}

func BenchmarkValidateRxe(b *testing.B) {
	lim := testLimits()
	qp := qpc(StateInit, TypeRC)
	for i := 0; i < b.N; i++ {
		a := goodAttr()
		a.QPState = StateRTR
		if _, err := PolicyRxe.Validate(qp, &a, rcRTR, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoAllocs guards the accepting paths: a modify that passes allocates
// nothing in ModifyIsOK, Check or Validate.
func TestNoAllocs(t *testing.T) {
	lim := testLimits()
	qp := qpc(StateInit, TypeRC)
	a := goodAttr()
	a.QPState = StateRTR
	for name, f := range map[string]func(){
		"ModifyIsOK": func() { ModifyIsOK(StateRTR, StateRTS, TypeRC, 0x12E01) },
		"Check":      func() { _ = Check(StateRTR, StateRTS, TypeRC, 0x12E01) },
		"Validate":   func() { _, _ = PolicyRxe.Validate(qp, &a, rcRTR, lim) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per accepted modify, want 0", name, n)
		}
	}
}
