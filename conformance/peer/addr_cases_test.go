package peer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// The kernel's answers to testdata/addr_cases.c (rdma_bind_addr,
// rdma_resolve_addr and rdma_resolve_route for each kind of address, port
// conflicts and reuse) on the 6.12 VM, and the listing of its rxe port's
// sysfs directory: kept in testdata, where cmd/softroce's tests compare
// softroce's answers with them. SOFTROCE_RECORD=1 writes them anew.
const (
	addrCasesKernel   = "testdata/addr_cases.kernel-6.12.txt"
	addrCasesKernel73 = "testdata/addr_cases.kernel-7.3.txt"
	fabricKernel73    = "testdata/fabric.kernel-7.3.txt"
	sysfsKernel       = "../../uverbsd/testdata/rxe_port_sysfs.kernel-6.12.txt"
	attrsKernel       = "../../uverbsd/testdata/rxe_port_attrs.kernel-6.12.txt"
)

// AddrCasesArgs is the command line of addr_cases on the VM: its own
// addresses (IPv4, IPv6 global and link-local with eth0's index), the
// lab's kernel host as the peer, an address of the subnet nobody answers
// for and one no route reaches.
const addrCasesVMArgs = `10.77.0.11 fd77::11 $(/usr/bin/ip -6 -o addr show dev eth0 scope link | sed -e 's/.*inet6 //' -e 's,/.*,,') $(cat /sys/class/net/eth0/ifindex) 10.77.0.1 fd77::1 10.77.0.99 10.99.0.1`

// sysfsListing lists a port directory's files (without the counters,
// whose names rxe's hw_counters and the IB MAD counters fix elsewhere).
const sysfsListing = `cd /sys/class/infiniband/rxe0/ports/1 && find . | grep -v -e '^./hw_counters/' -e '^./counters/' | sort`

// portAttrs prints the port's files whose content is not the host's
// (its addresses, its MAC): "NAME: CONTENT", an unreadable one as
// "NAME: <read fails>" (GID 3 is an unused slot).
const portAttrs = `cd /sys/class/infiniband/rxe0/ports/1 && for f in cap_mask lid lid_mask_count link_layer phys_state rate sm_lid sm_sl state pkeys/0 gid_attrs/types/0 gid_attrs/types/1 gid_attrs/types/3 gid_attrs/ndevs/3 gids/3; do if v=$(cat $f 2>/dev/null); then echo "$f: $v"; else echo "$f: <read fails>"; fi; done`

// fabricVM is what libfabric's verbs;ofi_rxm provider does on the VM's
// rxe: its version, the fabric and domain fi_info lists, and whether an
// fi_pingpong RDM pair connects and runs when the server gives no node
// and the client names the VM's address. On rxe 7.3 with forky's
// libfabric 2.1 it does not: once the client's control connection is
// there, the server's fi_enable of its RDM endpoint fails with EINVAL.
const fabricVM = `fi_info --version | head -1; ` +
	`fi_info -p 'verbs;ofi_rxm' | grep -E '^(provider|    fabric|    domain|    type|    protocol):' | sort -u; ` +
	`timeout 30 fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 10 -S 64 >/tmp/fs.out 2>&1 & sleep 3; ` +
	`timeout 30 fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 10 -S 64 10.77.0.11 >/tmp/fc.out 2>&1; echo "client exit $?"; ` +
	`wait $!; echo "server exit $?"; grep -h 'fi_enable' /tmp/fs.out; true`

// TestKernelAddrCases: testdata/addr_cases.c on the 6.12 VM and on the
// 7.3 VM answers as recorded for each, the 6.12 port's sysfs files are as
// recorded, and libfabric's verbs;ofi_rxm on 7.3 lists and connects as
// recorded.
func TestKernelAddrCases(t *testing.T) {
	testenv.RequireRoot(t)
	prog := buildAddrCases(t)
	for _, k := range []struct {
		name  string
		image Release
		files []struct{ file, cmd string }
	}{
		{"6.12", Trixie, []struct{ file, cmd string }{
			{addrCasesKernel, "addr_cases " + addrCasesVMArgs},
			{sysfsKernel, sysfsListing},
			{attrsKernel, portAttrs},
		}},
		{"7.3", Forky, []struct{ file, cmd string }{
			{addrCasesKernel73, "addr_cases " + addrCasesVMArgs},
			{fabricKernel73, fabricVM},
		}},
	} {
		t.Run(k.name, func(t *testing.T) { kernelAddrCases(t, prog, k.image, k.files) })
	}
}

// kernelAddrCases runs each command of files on a VM of image and
// compares its output with the file (SOFTROCE_RECORD=1: writes it).
func kernelAddrCases(t *testing.T, prog []byte, image Release, files []struct{ file, cmd string }) {
	img := buildTestImageFor(t, image)
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ip4, ip6 := lab.PeerAddr(1)
	vm := startTestVMWith(t, ctx, lab, dir, VMConfig{Image: img, Name: "vm1", IP: ip4, IP6: ip6, Timeout: 10 * time.Minute,
		Programs: map[string][]byte{"addr_cases": prog}})
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	for _, c := range files {
		r, err := vm.Run(ctx, c.cmd)
		if err != nil || r.Status != 0 {
			t.Fatalf("%s: %v, status %d\n%s", c.cmd, err, r.Status, r.Output)
		}
		got := strings.ReplaceAll(r.Output, "\r", "")
		if os.Getenv("SOFTROCE_RECORD") == "1" {
			if err := os.WriteFile(c.file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s: the kernel's answers changed:\n%s\nrecorded:\n%s", c.cmd, got, want)
		}
	}
}

// buildAddrCases compiles testdata/addr_cases.c against the host's
// librdmacm (it runs on the Debian 13 VM too, as cm_edge does) and returns
// the program.
func buildAddrCases(t *testing.T) []byte {
	t.Helper()
	_, err := exec.LookPath("cc")
	testenv.Require(t, err == nil, "cc is not installed")
	_, err = os.Stat("/usr/include/rdma/rdma_cma.h")
	testenv.Require(t, err == nil, "librdmacm's headers are not installed (Debian package librdmacm-dev)")
	out := filepath.Join(t.TempDir(), "addr_cases")
	if b, err := exec.Command("cc", "-O1", "-Wall", "-Werror", "-o", out, "testdata/addr_cases.c", "-lrdmacm", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("cc addr_cases.c: %v\n%s", err, b)
	}
	prog, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// TestSoftroceAddrCases: testdata/addr_cases.c through `softroce serve
// --tap` and `softroce run`, as nobody, in the lab where the VM ran it (the
// lab's kernel host the peer, softroce at 10.77.0.2 and fd77::2), answers
// case by case as the kernel's rdma_cm did (the recorded answers of 7.3,
// the default personality's kernel, and of 6.12, which answers alike).
func TestSoftroceAddrCases(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := os.Stat("/dev/net/tun")
	testenv.Require(t, err == nil, "no /dev/net/tun (the tun module)")
	prog := buildAddrCases(t)
	u := newVerbsUser(t, buildSoftroce(t))
	lab := newTestLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := addUserTAP(ctx, lab, softroceUserTAP, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	link := verbsLinks(lab)[0]
	path := filepath.Join(u.home, "addr_cases")
	if err := os.WriteFile(path, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	u.serve(t, ctx, lab, link)
	// The device's link-local address is its GID 0; the TAP's index is
	// the scope (any interface's index serves softroce).
	script := fmt.Sprintf(`exec %s %s %s $(cat $SYSFS_PATH/class/infiniband/%s/ports/1/gids/0) $(cat /sys/class/net/%s/ifindex) 10.77.0.1 fd77::1 10.77.0.99 10.99.0.1`,
		path, link.softAddr, link.softAddr6, link.dev, softroceUserTAP)
	cmd := u.command(ctx, lab, false, u.bin, "run", "-d", link.dev, "--", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("addr_cases through softroce run: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for _, file := range []string{addrCasesKernel73, addrCasesKernel} {
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		kernel := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
		if len(got) != len(kernel) {
			t.Errorf("%d answers, the kernel of %s gave %d:\n%s", len(got), file, len(kernel), out)
		}
		n := 0
		for i := range min(len(got), len(kernel)) {
			if got[i] != kernel[i] {
				t.Errorf("softroce %s\n    kernel %s (%s)", got[i], kernel[i], file)
				continue
			}
			n++
		}
		t.Logf("%d of %d cases as the kernel of %s", n, len(kernel), file)
	}
}
