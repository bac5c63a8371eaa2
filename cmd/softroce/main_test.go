package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	register(command{name: "testecho", summary: "echo for tests", run: func(args []string, stdout, _ io.Writer) error {
		if len(args) > 0 && args[0] == "fail" {
			return &exitError{code: 3}
		}
		_, err := io.WriteString(stdout, strings.Join(args, " "))
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
