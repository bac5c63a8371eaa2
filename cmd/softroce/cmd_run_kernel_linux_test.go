package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/internal/debroot"
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

// TestFlushFromRDMACore56: testdata/verbs_flush.c, rdma-core 65's pyverbs
// test_qp_ex_rc_flush and test_qp_ex_rc_flush_type_violate in C, built
// against Debian 13's libibverbs (the first Debian one with ibv_wr_flush)
// and run as nobody in the trixie tree through a daemon, on the default
// personality and on --kernel 6.12: librxe's wr_flush WQE reaches the
// device as the FLUSH it is, whose range and whole-MR flushes complete,
// and a persistent flush into an MR without FLUSH_PERSISTENT is
// IBV_WC_REM_ACCESS_ERR.
func TestFlushFromRDMACore56(t *testing.T) {
	cfg := debroot.TrixieRDMA()
	cfg.Packages = append(cfg.Packages, "libibverbs-dev")
	for i, kernel := range [][]string{nil, {"--kernel", "6.12"}} {
		t.Run(fmt.Sprint(kernel), func(t *testing.T) {
			dev := fmt.Sprintf("rxe%d", 43+i)
			c := serveForTree(t, cfg, dev, append([]string{"--ip", fmt.Sprintf("10.78.%d.1/24", 43+i)}, kernel...)...)
			dir := userHome(t)
			prog := filepath.Join(dir, "verbs_flush")
			lib := filepath.Join(c.tree.Dir, "usr/lib/x86_64-linux-gnu")
			// --allow-shlib-undefined: Debian 13's libibverbs needs
			// symbols of its own glibc, which the host's linker cannot
			// see; the tree has that glibc.
			if out, err := exec.Command("cc", "-Wall", "-Werror", "-I", filepath.Join(c.tree.Dir, "usr/include"), "-o", prog,
				"testdata/verbs_flush.c", "-L"+lib, "-Wl,-rpath-link,"+lib, "-Wl,--allow-shlib-undefined", "-libverbs").CombinedOutput(); err != nil {
				t.Fatalf("cc verbs_flush.c: %v\n%s", err, out)
			}
			c.binds = append(c.binds, debroot.Bind{Host: dir, Path: "/run/prog"})
			out, errOut, err := c.run(t, "/run/prog/verbs_flush", dev)
			checkProgramOutput(t, err, out, errOut, []string{
				"a FLUSH of the range, global placement, completes",
				"a FLUSH of the MR, length 0, completes",
				"a persistent FLUSH into an MR without FLUSH_PERSISTENT is IBV_WC_REM_ACCESS_ERR",
			})
		})
	}
}
