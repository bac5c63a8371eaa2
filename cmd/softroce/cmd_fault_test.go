package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/softroce/softroce/fault"
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

// TestFaultHelpNamesEveryAction: softroce fault -h describes every
// KIND:ACTION the rule parser knows.
func TestFaultHelpNamesEveryAction(t *testing.T) {
	var out, errb bytes.Buffer
	run([]string{"fault", "-h"}, &out, &errb)
	help := errb.String() + out.String()
	for _, ka := range fault.Actions() {
		kind, action, _ := strings.Cut(ka, ":")
		found := false
		for _, l := range strings.Split(help, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			head, _, _ := strings.Cut(f[0], ",")
			head, _, _ = strings.Cut(head, "[")
			if strings.HasPrefix(head, kind+":") &&
				slices.Contains(strings.Split(strings.TrimPrefix(head, kind+":"), "|"), action) {
				found = true
			}
		}
		if !found {
			t.Errorf("softroce fault -h does not describe %s", ka)
		}
	}
}
