package rxe

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// TestDataPathImports checks that the emulated device and everything it
// imports stay free of the pcap and packet-decoding libraries: pcap
// writing lives in link/pcap, at the edge.
func TestDataPathImports(t *testing.T) {
	gotool, err := exec.LookPath("go")
	testenv.Require(t, err == nil, "the go command is not in PATH")
	out, err := exec.Command(gotool, "list", "-deps", "-json=ImportPath", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		n++
		for _, banned := range []string{"github.com/google/gopacket", "golang.org/x/net/bpf"} {
			if p.ImportPath == banned || strings.HasPrefix(p.ImportPath, banned+"/") {
				t.Errorf("emu/rxe depends on %s", p.ImportPath)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list -deps listed %d packages; want the whole closure", n)
	}
}
