package devinfo

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/softroce/softroce/node"
)

// TestWrite: the device block and port block of ibv_devinfo, with the GID
// table only when verbose.
func TestWrite(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{MAC: net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, verbose := range []bool{false, true} {
		var b bytes.Buffer
		if err := Write(&b, n.Device(), verbose, 0); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"hca_id:\tsoftroce0\n", "\ttransport:\t\t\tInfiniBand (0)\n",
			"\tnode_guid:\t\t\t5054:00ff:fe12:3456\n", "\t\tport:\t1\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("verbose %v: no %q in\n%s", verbose, want, out)
			}
		}
		if strings.Contains(out, "GID[  0]") != verbose {
			t.Errorf("verbose %v: GID table present %v:\n%s", verbose, !verbose, out)
		}
	}
}
