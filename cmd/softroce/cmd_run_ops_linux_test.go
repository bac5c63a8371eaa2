package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
)

// buildVerbsProgram compiles testdata/NAME.c against the system's
// libibverbs into dir and returns the binary's path.
func buildVerbsProgram(t *testing.T, dir, name string) string {
	t.Helper()
	needCC(t)
	_, err := os.Stat("/usr/include/infiniband/verbs.h")
	testenv.Require(t, err == nil, "libibverbs' headers are not installed (Debian package libibverbs-dev)")
	bin := filepath.Join(dir, name)
	out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", name+".c"), "-libverbs").CombinedOutput()
	if err != nil {
		t.Fatalf("cc %s.c: %v\n%s", name, err, out)
	}
	return bin
}

// rxeOpsChecks are the checks verbs_rxe_ops.c makes,
// as it names them; each must print "ok".
var rxeOpsChecks = []string{
	"ibv_query_gid_table lists the device's 2 GIDs",
	"ibv_query_gid_ex of GID 1: RoCE v2, no kernel netdev",
	"ibv_query_gid_ex of an unused slot is ENODATA",
	"ibv_query_gid_table with room for 1 is EINVAL",
	"/sys/class/infiniband/DEV/ports/1/gid_attrs/types/1 reads RoCE v2",
	"the type of an unused GID slot fails its read: EINVAL",
	"/sys/class/infiniband_verbs/abi_version reads 6",
	"the command fd is O_RDWR|O_LARGEFILE",
	"the async event fd is O_RDONLY",
	"a completion channel's fd is O_RDONLY",
	"O_NONBLOCK on the command fd",
	"verbs on the O_NONBLOCK command fd",
	"create cq rounds 8 to 15",
	"resize below the 5 unpolled completions is EINVAL",
	"resize to 0 is EINVAL",
	"resize to 100",
	"the flushed completions moved to the new ring",
	"in order, flushed",
	"traffic completes on the resized CQ",
	"resize an empty CQ to 1",
	"ibv_modify_srq below the 3 posted WRs is EINVAL",
	"ibv_query_srq has the new size",
	"the SRQ's WRs, from before and after the resize, in order",
	"ibv_rereg_mr stops in librxe (no rereg_mr)",
	"REREG_MR without flags is EINVAL",
	"REREG_MR of the range is EOPNOTSUPP (rxe)",
	"REREG_MR to remote write without local write is EINVAL",
	"REREG_MR of the access keeps the keys",
	"a peer writes through the new access",
	"the new PD holds the MR (EBUSY)",
	"ibv_reg_mr of PROT_READ memory with local write is EFAULT",
	"ibv_reg_mr of PROT_READ and read-write memory with remote write is EFAULT",
	"ibv_reg_mr of private read-write memory with remote write",
	"ibv_reg_mr of PROT_NONE memory is EFAULT",
	"ibv_reg_mr over an unmapped page is EFAULT",
	"ibv_reg_mr of PROT_READ memory read-only",
	"REREG_MR of a read-only MR to remote write is EACCES",
	"ibv_bind_mw completes",
	"an RDMA WRITE through the window's rkey",
	"ibv_dealloc_mw",
	"ibv_create_qp_ex with send ops",
	"ibv_wr_* work requests complete",
	"ibv_wr_rdma_write moved the data",
	"ibv_wr_rdma_read moved the data",
	"ibv_wr_send moved the data",
	"ibv_wr_atomic_write stored its 8 bytes",
	"ibv_attach_mcast again",
	"ibv_attach_mcast of an RC QP is EINVAL",
	"ibv_detach_mcast of a group not attached is EINVAL",
	"ibv_destroy_qp while attached is EBUSY",
	"ibv_destroy_qp after the detach",
	"a UD SEND to the group reaches the attached QP",
	"after the detach only the send completes",
}

// checkProgramOutput fails the test unless the program exited 0 and
// printed "ok NAME" for each of checks.
func checkProgramOutput(t *testing.T, err error, out, errOut string, checks []string) {
	t.Helper()
	if err != nil {
		t.Fatalf("program: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, c := range checks {
		if !strings.Contains(out, "ok "+c+"\n") {
			t.Errorf("no %q in the program's output", "ok "+c)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
}

// TestRxeOpsThroughLibibverbs: a C program on Debian's libibverbs and
// librxe, run unprivileged through "softroce run", finds the kernel's file
// flags on its descriptors and goes on with its command fd O_NONBLOCK,
// resizes CQs
// (ibv_resize_cq: rxe's errnos, the unpolled completions in the new ring,
// traffic on it) and an SRQ (ibv_modify_srq), re-registers an MR (ibv_rereg_mr stops in librxe as on
// kernel rxe; the REREG_MR command changes access and PD), registers
// PROT_READ, PROT_NONE and unmapped memory (EFAULT where ib_umem_get could
// not pin the pages for the access), binds a memory
// window a peer then writes through, posts with the ibv_wr_* API, and
// attaches UD QPs to multicast groups (a SEND to the group reaches the
// member until it detaches), with the kernel's answers for the misuses.
func TestRxeOpsThroughLibibverbs(t *testing.T) {
	distroTool(t, "ibv_devices", "ibverbs-utils")
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_rxe_ops")
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe13", "--ip", "10.78.0.1/24", "--", prog, "rxe13")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	checkProgramOutput(t, cmd.Run(), out.String(), errb.String(), rxeOpsChecks)
}

// TestRegisteredPagesBehaveAsPinnedPages: testdata/verbs_shared_pages.c,
// through "softroce run" on Debian's libibverbs and librxe. By default the
// preload library moves a registering buffer's pages into memory the
// daemon maps: the bytes stay, RDMA WRITE and READ reach them (through a
// second MR too), a fork's child gets a private copy and no DONTFORK
// range, MADV_REMOVE is EINVAL, and MADV_DONTNEED leaves the MR its pinned
// pages while the program reads zeros, as the kernel's pinned pages
// behave. With SOFTROCE_NO_SHARED_PAGES the buffers stay private and the
// same holds but for MADV_DONTNEED.
func TestRegisteredPagesBehaveAsPinnedPages(t *testing.T) {
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_shared_pages")
	common := []string{
		"registered pages are shared as asked",
		"the bytes written before ibv_reg_mr stay",
		"an RDMA WRITE lands where the program reads",
		"an RDMA READ takes what the program wrote",
		"a second MR on the same pages reads them",
		"the child had the buffer as at the fork, private; not the DONTFORK range",
		"what the child wrote stays its own",
		"an RDMA WRITE after the fork lands",
		"MADV_REMOVE on registered private memory is EINVAL",
		"memory that is not whole pages stays private",
		"and works",
	}
	for _, c := range []struct {
		mode   string
		env    []string
		checks []string
	}{
		{"shared", nil, append(common[:len(common):len(common)],
			"MADV_DONTNEED gives the program zero pages",
			"the MR keeps the pages it pinned (an RDMA READ takes the old bytes)",
			"an RDMA WRITE there does not reach the program")},
		{"private", []string{"SOFTROCE_NO_SHARED_PAGES=1"}, common},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := userCommand(t, home, c.env, "softroce", "run", "-d", "rxe19", "--ip", "10.78.19.1/24", "--", prog, "rxe19", c.mode)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			checkProgramOutput(t, cmd.Run(), out.String(), errb.String(), c.checks)
		})
	}
}

// TestTrixieRxeOpsThroughDaemon: the same program on Debian 13's
// libibverbs and librxe (rdma-core 56) in the trixie chroot, through a
// daemon on the host (libibverbs keeps its ABI across the releases).
func TestTrixieRxeOpsThroughDaemon(t *testing.T) {
	c := serveForTrixie(t, "rxe14", "--ip", "10.78.0.1/24")
	dir := userHome(t)
	prog := buildVerbsProgram(t, dir, "verbs_rxe_ops")
	c.binds = append(c.binds, debroot.Bind{Host: dir, Path: "/run/prog"})
	out, errOut, err := c.run(t, "/run/prog/"+filepath.Base(prog), "rxe14")
	checkProgramOutput(t, err, out, errOut, rxeOpsChecks)
}

// TestVerbsCloseUnderWaitingThreads: testdata/verbs_close.c, through
// "softroce run", closes descriptors under threads waiting for events. A
// completion channel's descriptor closed while a thread waits in
// ibv_get_cq_event: the wait goes on (the read holds the file). The
// context's command descriptor closed: every waiter (CQ events, async
// events, the closed channel's) wakes with EIO and a later read is EIO,
// as ib_uverbs_close frees the context's event queues.
func TestVerbsCloseUnderWaitingThreads(t *testing.T) {
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_close")
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe18", "--ip", "10.78.18.1/24", "--", prog)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "done\n") {
		t.Fatalf("verbs_close: %v\n%s", err, out)
	}
}

// memlockChecks are the checks verbs_memlock.c makes, as it names them.
var memlockChecks = []string{
	"ibv_reg_mr of 4 MiB within the limit",
	"ibv_reg_mr of 3 MiB more within the limit",
	"ibv_reg_mr of 2 MiB more past the limit is ENOMEM",
	"ibv_reg_mr of 64 MiB is ENOMEM",
	"ibv_reg_mr of 1 GiB is ENOMEM",
	"ibv_dereg_mr of the 4 MiB MR",
	"ibv_reg_mr of 2 MiB after the deregistration",
	"ibv_reg_mr of 2^62 bytes is EINVAL",
	"ibv_reg_mr with RLIMIT_MEMLOCK 0 is EPERM",
	"an ODP MR of 1 GiB pins nothing: it registers with RLIMIT_MEMLOCK 0",
}

// TestRegMRChargesRLIMITMEMLOCK: a C program on Debian's libibverbs and
// librxe, run unprivileged through "softroce run" with `ulimit -l 8192`
// (prlimit), registers MRs within its RLIMIT_MEMLOCK and is refused
// (ENOMEM) past it, as the kernel's ib_umem_get charges the pinned pages
// to the caller; a deregistration gives them back; an MR of 2^62 bytes is
// EINVAL and, with a limit of 0, one of a page EPERM.
func TestRegMRChargesRLIMITMEMLOCK(t *testing.T) {
	distroTool(t, "ibv_devices", "ibverbs-utils")
	_, err := exec.LookPath("prlimit")
	testenv.Require(t, err == nil, "prlimit is not installed (util-linux)")
	var memlock syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_MEMLOCK, &memlock); err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, memlock.Max >= 8<<20,
		"the hard RLIMIT_MEMLOCK is below 8 MiB: the program cannot have the limit it checks")
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_memlock")
	// userCommand copies softroce into home for a PROGRAM "softroce".
	userCommand(t, home, nil, "softroce")
	cmd := userCommand(t, home, nil, "prlimit", "--memlock=8388608:8388608", "--",
		filepath.Join(home, "softroce"), "run", "-d", "rxe16", "--", prog, "rxe16")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	checkProgramOutput(t, cmd.Run(), out.String(), errb.String(), memlockChecks)
}
