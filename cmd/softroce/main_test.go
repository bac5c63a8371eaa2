package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

func TestRunDispatch(t *testing.T) {
	register(command{name: "testecho", summary: "echo for tests", run: func(e *env) error {
		if len(e.args) > 0 && e.args[0] == "fail" {
			return &exitError{code: 3}
		}
		_, err := io.WriteString(e.stdout, strings.Join(e.args, " "))
		return err
	}})
	defer delete(commands, "testecho")

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"no args prints usage", nil, 2, "usage: softroce"},
		{"help", []string{"help"}, 0, "testecho"},
		{"unknown", []string{"nonesuch"}, 2, ""},
		{"dispatch", []string{"testecho", "a", "b"}, 0, "a b"},
		{"exit status", []string{"testecho", "fail"}, 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != tt.wantCode {
				t.Fatalf("run(%q) = %d, want %d (stderr %q)", tt.args, code, tt.wantCode, errb.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("run(%q) stdout = %q, want it to contain %q", tt.args, out.String(), tt.wantOut)
			}
		})
	}
}

// TestRunWCError: a run ended by a failed completion prints the real
// tool's text alone (no "softroce NAME:" prefix, no Go error suffix) and
// exits 1, as ibv_rc_pingpong does ("Failed status Work Request Flushed
// Error (5) for wr_id 1") and perftest does.
func TestRunWCError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"test-wcerr-pingpong", &workload.WCError{Status: emu.WCWRFlushErr, WRID: 1},
			"Failed status Work Request Flushed Error (5) for wr_id 1\n"},
		{"test-wcerr-wrapped", fmt.Errorf("context: %w", &workload.WCError{Status: emu.WCRetryExcErr, WRID: 2}),
			"Failed status transport retry counter exceeded (12) for wr_id 2\n"},
		{"test-wcerr-perf", &workload.WCError{Status: emu.WCRemAccessErr, WRID: 0, Perftest: true},
			" Completion with error at client\n Failed status 10: wr_id 0 syndrom 0x0\n"},
		{"test-wcerr-perf-recv", &workload.WCError{Status: emu.WCWRFlushErr, WRID: 3, Perftest: true, Recv: true},
			" Completion with error at server\n Failed status 5: wr_id 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err
			register(command{name: tc.name, run: func(*env) error { return err }})
			defer delete(commands, tc.name)
			code, out, errs := runCmd(t, tc.name)
			if code != 1 || out != "" || errs != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 1, \"\", %q", code, out, errs, tc.want)
			}
			if !errors.Is(err, unix.EIO) {
				t.Errorf("%v is not EIO", err)
			}
		})
	}
}
