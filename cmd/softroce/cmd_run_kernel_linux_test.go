package main

import (
	"bytes"
	"fmt"
	"testing"
)

// TestAccessErrEventByKernel: testdata/verbs_access_err.c, on Debian's
// libibverbs and librxe, run unprivileged through "softroce run": an RC
// responder's R_Key violation completes the requester's RDMA WRITE with
// IBV_WC_REM_ACCESS_ERR on every kernel, and gives the responder's QP
// IBV_EVENT_QP_ACCESS_ERR on the 7.3 personality (the default, and
// --kernel 7.3), none on --kernel 6.12 (the event came with Linux 7.1).
func TestAccessErrEventByKernel(t *testing.T) {
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_access_err")
	for i, tc := range []struct {
		name   string
		kernel []string
		want   string
		check  string
	}{
		{"default", nil, "event", "the responder's QP gets IBV_EVENT_QP_ACCESS_ERR"},
		{"7.3", []string{"--kernel", "7.3"}, "event", "the responder's QP gets IBV_EVENT_QP_ACCESS_ERR"},
		{"6.12", []string{"--kernel", "6.12"}, "none", "no async event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := fmt.Sprintf("rxe%d", 40+i)
			args := append([]string{"run", "-d", dev, "--ip", fmt.Sprintf("10.78.%d.1/24", 40+i)}, tc.kernel...)
			cmd := userCommand(t, home, nil, "softroce", append(args, "--", prog, dev, tc.want)...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			checkProgramOutput(t, cmd.Run(), out.String(), errb.String(),
				[]string{"the WRITE with a bad rkey completes IBV_WC_REM_ACCESS_ERR", tc.check})
		})
	}
}
