package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // substrings of stdout
		wantErr  string   // substring of stderr
	}{
		{"rc_rtr_rts_missing", []string{"explain", "-type", "RC", "RTR", "RTS", "STATE,TIMEOUT,SQ_PSN"}, 1, []string{
			"modify QP: RTR->RTS (RC): missing IB_QP_RETRY_CNT|IB_QP_RNR_RETRY|IB_QP_MAX_QP_RD_ATOMIC: invalid argument",
			"fix: add IB_QP_RETRY_CNT|IB_QP_RNR_RETRY|IB_QP_MAX_QP_RD_ATOMIC",
			"try: softroce explain -type RC RTR RTS STATE,TIMEOUT,RETRY_CNT,RNR_RETRY,MAX_QP_RD_ATOMIC,SQ_PSN",
		}, ""},
		{"missing_and_forbidden", []string{"explain", "RTR", "RTS", "IB_QP_STATE|IB_QP_SQ_PSN|IB_QP_RNR_RETRY|IB_QP_MAX_QP_RD_ATOMIC|IB_QP_PORT"}, 1, []string{
			"modify QP: RTR->RTS (RC): missing IB_QP_TIMEOUT|IB_QP_RETRY_CNT; not allowed IB_QP_PORT: invalid argument",
			"fix: add IB_QP_TIMEOUT|IB_QP_RETRY_CNT, remove IB_QP_PORT",
		}, ""},
		{"ok_hex", []string{"explain", "-type", "RC", "RTR", "RTS", "0x12e01"}, 0, []string{
			"OK: modify QP RTR->RTS (RC)",
			"required: IB_QP_TIMEOUT|IB_QP_RETRY_CNT|IB_QP_RNR_RETRY|IB_QP_MAX_QP_RD_ATOMIC|IB_QP_SQ_PSN",
			"optional: IB_QP_CUR_STATE|IB_QP_ACCESS_FLAGS|IB_QP_ALT_PATH|IB_QP_MIN_RNR_TIMER|IB_QP_PATH_MIG_STATE",
		}, ""},
		{"ok_kernel_names_split_args", []string{"explain", "-type", "IB_QPT_UD", "IB_QPS_RESET", "IB_QPS_INIT", "IB_QP_STATE", "PKEY", "port", "QKEY"}, 0, []string{
			"OK: modify QP RESET->INIT (UD)"}, ""},
		{"invalid_pair", []string{"explain", "RESET", "RTR", "STATE"}, 1, []string{
			"modify QP: RESET->RTR (RC): transition not allowed: invalid argument",
			"from RESET the valid next states are RESET, INIT"}, ""},
		{"cur_from_init", []string{"explain", "INIT", "INIT", "STATE,CUR"}, 1, []string{
			"IB_QP_CUR_STATE may only be given from RTR, RTS, SQD or SQE", "fix: remove IB_QP_CUR_STATE"}, ""},
		{"no_state_note", []string{"explain", "-type", "UD", "RTS", "RTS", "QKEY"}, 0, []string{
			"OK", "without IB_QP_STATE, rxe since Linux 6.4 skips the table"}, ""},
		{"empty_required_is_none", []string{"explain", "ERR", "RESET", "STATE"}, 0, []string{"required: none", "optional: none"}, ""},
		{"unknown_type", []string{"explain", "-type", "RD", "RTR", "RTS"}, 2, nil, "unknown QP type"},
		{"unknown_state", []string{"explain", "RTR", "DONE"}, 2, nil, "unknown QP state"},
		{"unknown_attr", []string{"explain", "RTR", "RTS", "STATE,BOGUS"}, 2, nil, "unknown QP attribute"},
		{"flags_after_operands", []string{"explain", "RTR", "RTS", "STATE", "-type", "UD"}, 1, []string{
			"modify QP: RTR->RTS (UD): missing IB_QP_SQ_PSN"}, ""},
		{"mask_0_fix_adds_state", []string{"explain", "RESET", "INIT"}, 1, []string{
			"fix: add IB_QP_STATE|IB_QP_ACCESS_FLAGS|IB_QP_PKEY_INDEX|IB_QP_PORT",
			"try: softroce explain -type RC RESET INIT STATE,ACCESS_FLAGS,PKEY_INDEX,PORT"}, ""},
		{"too_few_args", []string{"explain", "RTR"}, 2, nil, "usage: softroce explain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errb.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			if tt.wantErr != "" && !strings.Contains(errb.String(), tt.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantErr, errb.String())
			}
		})
	}
}

// TestExplainTryLinePasses follows the "try:" suggestion of a refused
// modify and checks that it is accepted and, when the states differ,
// moves the QP (IB_QP_STATE in the mask, even when the mask was empty).
func TestExplainTryLinePasses(t *testing.T) {
	for _, args := range [][]string{
		{"explain", "-type", "XRC_TGT", "SQD", "SQD", "STATE,RETRY_CNT,TIMEOUT,CAP"},
		{"explain", "RESET", "INIT"},
		{"explain", "RTR", "RTS", "TIMEOUT"},
	} {
		t.Run(strings.Join(args[1:], "_"), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != 1 {
				t.Fatalf("exit %d, want 1: %s", code, out.String())
			}
			var try string
			for _, line := range strings.Split(out.String(), "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(line), "try: softroce "); ok {
					try = s
				}
			}
			if try == "" {
				t.Fatalf("no try line in:\n%s", out.String())
			}
			out.Reset()
			if code := run(strings.Fields(try), &out, &errb); code != 0 {
				t.Fatalf("suggested %q exits %d:\n%s", try, code, out.String())
			}
			if strings.Contains(out.String(), "IB_QP_STATE is not in the mask") {
				t.Errorf("suggested %q would not move the QP:\n%s", try, out.String())
			}
		})
	}
}
