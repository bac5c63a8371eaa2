package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBadFaultRulesAreUsageErrors: a malformed --fault on serve or run, or
// a malformed fault command, is refused before anything starts, with the
// parser's reason and exit status 2.
func TestBadFaultRulesAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--fault", "wire:lose"}, `unknown action "lose" for wire`},
		{[]string{"run", "--fault", "verbs:fail,verb=create_qp", "--", "true"}, "needs verb=NAME and errno=ENAME"},
		{[]string{"serve", "--fault", "qp:silent,qp=0x1000000"}, "a QP number is 24 bits"},
		{[]string{"fault", "add"}, "add RULE | del ID | list"},
		{[]string{"fault", "frob", "x"}, "add RULE | del ID | list"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("softroce %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errb.String(), tc.want)
		}
	}
}
