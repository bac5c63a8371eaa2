package layers

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

const module = "github.com/softroce/softroce/"

// layer gives each package of the module its layer. A package imports
// only packages of lower layers: the verbs vocabulary and the wire know
// nothing of the emulator, the emulator nothing of its links' kinds, the
// daemon and the command line sit at the edge. A new package gets a row
// here (the test fails until it has one).
var layer = map[string]int{
	// Vocabulary and leaves: no import from the module but each other's
	// layer below.
	"ib": 0, "clock": 0, "mad": 0, "preload": 0, "emu/dma": 0, "emu/internal/driver": 0,
	"internal/getopt": 0, "internal/elfdeps": 0, "internal/testenv": 0, "internal/layers": 0,
	"conformance/edge": 0, "deploy": 0,
	// The wire and the QP state machine.
	"wire": 1, "qpstate": 1, "internal/testutil": 1, "internal/debroot": 1,
	// Frames in and out; the verbs core.
	"link": 2, "emu": 2, "wire/gopacketlayer": 2,
	// Links of each kind, the host stack, the device, the CM and what
	// reads the core.
	"link/pcap": 3, "link/udp": 3, "tap": 3, "host": 3, "fault": 3,
	"emu/kverbs": 3, "emu/rxe": 3, "devinfo": 3, "coverage": 3, "check": 3, "cma": 3, "oob": 3,
	// A host on a link; the uverbs ABI; workloads over the verbs API.
	"node": 4, "emu/rxe/rxetest": 4, "uverbs": 4, "rping": 4, "workload": 4,
	// The rdma_cm ABI (beside uverbs').
	"ucma": 5,
	// The daemon.
	"uverbsd": 6,
	// The measurements.
	"bench": 7,
	// The edge: the command line and the suites against real peers.
	"cmd/softroce": 8, "conformance/peer": 8,
}

// TestLayers lists every package of the module with its imports (go list,
// test files excluded) and fails for a package without a layer and for an
// import of a package of the same or a higher layer.
func TestLayers(t *testing.T) {
	gotool, err := exec.LookPath("go")
	testenv.Require(t, err == nil, "the go command is not in PATH")
	cmd := exec.Command(gotool, "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		name, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		seen[name] = true
		l, ok := layer[name]
		if !ok {
			t.Errorf("package %s has no layer: give it one in the table", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if dl, ok := layer[dep]; ok && dl >= l {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", name, l, dep, dl)
			}
		}
	}
	for name := range layer {
		if !seen[name] {
			t.Errorf("the table's package %s is not in the module: remove its row", name)
		}
	}
}
