package peer

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// devinfo73 is what `ibv_devinfo -v` (rdma-core 65) prints in the Forky
// VM (Linux 7.3.4's rxe) for rxe0 on eth0 with MTU 1500, 10.77.0.10/24
// and MAC 52:54:00:4d:00:0a (TestKernelDevinfoForky's VM).
const devinfo73 = "testdata/rxe-7.3.ibv_devinfo-v.txt"

// TestKernelDevinfoForky: the Forky VM's rxe prints devinfo73 for
// `ibv_devinfo -v`. SOFTROCE_RECORD=1 records it anew.
func TestKernelDevinfoForky(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, Forky)
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vm := startTestVMWith(t, ctx, lab, dir, VMConfig{Image: img, Name: "vm0", IP: netip.MustParsePrefix("10.77.0.10/24"),
		MTU: 1500, Timeout: 8 * time.Minute})
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	r, err := vm.Run(ctx, "ibv_devinfo -v")
	if err != nil || r.Status != 0 {
		t.Fatalf("ibv_devinfo -v: %v, status %d\n%s", err, r.Status, r.Output)
	}
	got := strings.ReplaceAll(r.Output, "\r", "")
	if os.Getenv("SOFTROCE_RECORD") == "1" {
		if err := os.WriteFile(devinfo73, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(devinfo73)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("ibv_devinfo -v on rxe 7.3 changed:\n%s\nrecorded:\n%s", got, want)
	}
}

// devinfoField is one field of ibv_devinfo's output: its value and the
// flag or capability lines printed under it.
type devinfoField struct {
	value  string
	items  []string
	indent int
}

// parseDevinfo reads ibv_devinfo output into its fields by name, in order,
// ignoring the indentation of the fields themselves (rdma-core 44 and 65
// indent max_tso differently). A line "name: value" (split at its first
// colon) is a field; a line without a colon (a flag, "NO SUPPORT") is an
// item of the field before it when indented deeper than that field, and a
// field of its own ("core clock not supported") otherwise.
func parseDevinfo(s string) (names []string, fields map[string]*devinfoField) {
	fields = make(map[string]*devinfoField)
	var cur *devinfoField
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		raw := sc.Text()
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		indent := len(raw) - len(strings.TrimLeft(raw, "\t "))
		name, value, ok := strings.Cut(l, ":")
		if !ok && cur != nil && indent > cur.indent {
			cur.items = append(cur.items, l)
			continue
		}
		if !ok {
			name = l
		}
		cur = &devinfoField{value: strings.TrimSpace(value), indent: indent}
		names = append(names, name)
		fields[name] = cur
	}
	return names, fields
}

// devinfo73Only are the fields rdma-core 65's ibv_devinfo prints that
// softroce devinfo, which follows rdma-core 44's layout, does not.
var devinfo73Only = map[string]bool{"num_comp_vectors": true}

// softroceOnly are the lines softroce devinfo adds.
var softroceOnly = map[string]bool{"softroce": true}

// TestDevinfoRxe73: `softroce devinfo -v` in the default personality, for
// a device set up as the recorded rxe 7.3 one (name, MAC, address, MTU),
// prints every field of devinfo73 with rxe's value and flags, the ODP caps
// included, and no field rxe lacks.
func TestDevinfoRxe73(t *testing.T) {
	bin := buildSoftroce(t)
	out, err := exec.Command(bin, "devinfo", "-v", "-d", "rxe0", "--mac", "52:54:00:4d:00:0a",
		"--ip", "10.77.0.10/24", "--mtu", "1500").Output()
	if err != nil {
		t.Fatalf("softroce devinfo -v: %v", err)
	}
	want, err := os.ReadFile(devinfo73)
	if err != nil {
		t.Fatal(err)
	}
	wantNames, wantFields := parseDevinfo(string(want))
	gotNames, gotFields := parseDevinfo(string(out))
	if len(wantNames) < 80 || !strings.Contains(string(want), "rc_odp_caps") {
		t.Fatalf("%s holds %d fields and no ODP caps: not a recording of ibv_devinfo -v", devinfo73, len(wantNames))
	}
	for _, n := range wantNames {
		w, g := wantFields[n], gotFields[n]
		if devinfo73Only[n] {
			if g != nil {
				t.Errorf("%s: softroce prints it now (%q): compare it (drop it from devinfo73Only)", n, g.value)
			}
			continue
		}
		if g == nil {
			t.Errorf("%s: rxe 7.3 prints %q %q, softroce nothing", n, w.value, w.items)
			continue
		}
		if g.value != w.value || strings.Join(g.items, "|") != strings.Join(w.items, "|") {
			t.Errorf("%s: softroce %q %q, rxe 7.3 %q %q", n, g.value, g.items, w.value, w.items)
		}
	}
	for _, n := range gotNames {
		if wantFields[n] == nil && !softroceOnly[n] {
			t.Errorf("%s: softroce prints %q %q, rxe 7.3 nothing", n, gotFields[n].value, gotFields[n].items)
		}
	}
}
