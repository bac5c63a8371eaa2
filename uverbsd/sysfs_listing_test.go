package uverbsd_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rxePortListing is the listing of port 1's directory of the kernel's rxe
// (Linux 6.12, conformance/peer's TestKernelAddrCases records it), without
// the counters' files.
const rxePortListing = "testdata/rxe_port_sysfs.kernel-6.12.txt"

// TestSysfsPortListingAsRxe: port 1's directory has the files of the
// kernel's rxe port, every GID slot with its gid, type and netdev, the
// CM's message counters and rxe's hw_counters, and the PMA's counters
// directory, which rxe has from Linux 7.2 (its process_mad: the sysfs
// core's pma_attrs_ext group) and 6.12's has not.
func TestSysfsPortListingAsRxe(t *testing.T) {
	b, err := os.ReadFile(rxePortListing)
	if err != nil {
		t.Fatal(err)
	}
	want := append(strings.Split(strings.TrimSpace(string(b)), "\n"), "./counters")
	h := newHarness(t)
	dir := filepath.Join(h.srv.SysfsPath(), "class/infiniband/rxe0/ports/1")
	var got []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
			got = append(got, ".")
		case strings.HasPrefix(rel, "hw_counters/"), strings.HasPrefix(rel, "counters/"):
			// Left out of the kernel's listing too.
		default:
			got = append(got, "./"+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// find | sort in the VM sorts bytewise, as slices.Sort.
	slices.Sort(got)
	slices.Sort(want)
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			t.Errorf("the kernel's rxe has %s, the daemon's tree has not", w)
		}
	}
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			t.Errorf("the daemon's tree has %s, the kernel's rxe has not", g)
		}
	}
	// rxe's counters are there, with lifespan (their files are left out
	// of the listings: the driver's set changes between kernels).
	for _, f := range []string{"sent_pkts", "rcvd_pkts", "lifespan"} {
		if _, err := os.Stat(filepath.Join(dir, "hw_counters", f)); err != nil {
			t.Errorf("hw_counters/%s: %v", f, err)
		}
	}
	// The PMA's, as the kernel's sysfs shows those of a PMA with
	// extended-width counters (pma_attrs_ext), at zero on a quiet port.
	for _, f := range []string{"symbol_error", "link_downed", "VL15_dropped", "port_xmit_data", "port_rcv_data",
		"port_xmit_packets", "port_rcv_packets", "port_xmit_wait", "unicast_xmit_packets", "multicast_rcv_packets"} {
		if c, err := os.ReadFile(filepath.Join(dir, "counters", f)); err != nil || string(c) != "0\n" {
			t.Errorf("counters/%s: %q, %v; want \"0\\n\"", f, c, err)
		}
	}
	// The CM's counters start at zero (cma counts, TestCMCounters).
	if c, err := os.ReadFile(filepath.Join(dir, "cm_tx_msgs", "req")); err != nil || string(c) != "0\n" {
		t.Errorf("cm_tx_msgs/req of a CM that sent nothing: %q, %v; want \"0\\n\"", c, err)
	}
}

// rxePortAttrs is the content of port 1's files of the kernel's rxe that
// are not the host's ("NAME: CONTENT", "<read fails>" where the read
// fails; GID 3 is an unused slot), recorded with rxePortListing.
const rxePortAttrs = "testdata/rxe_port_attrs.kernel-6.12.txt"

// TestSysfsPortAttrsAsRxe: those files read as the kernel's (an empty file
// of the tree is a read that fails, through the preload library), but for
// GID 1's type: the VM's GID 1 is its IPv4 address, the harness's device
// has none.
func TestSysfsPortAttrsAsRxe(t *testing.T) {
	b, err := os.ReadFile(rxePortAttrs)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	dir := filepath.Join(h.srv.SysfsPath(), "class/infiniband/rxe0/ports/1")
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, want, _ := strings.Cut(l, ": ")
		if name == "gid_attrs/types/1" {
			continue
		}
		c, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got := strings.TrimSuffix(string(c), "\n")
		if len(c) == 0 {
			got = "<read fails>"
		}
		if got != want {
			t.Errorf("%s = %q, the kernel's rxe %q", name, got, want)
		}
	}
}
