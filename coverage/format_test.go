package coverage_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// sampleProfile is a profile with a cell of every kind.
func sampleProfile(dev string, n uint64) *coverage.Profile {
	r := coverage.NewRecorder(dev)
	for range n {
		r.Modify(qpstate.TypeRC, qpstate.StateReset, qpstate.StateInit,
			qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags, 0)
		r.Completion(emu.WCSend, emu.WCSuccess)
		r.Event(emu.EventCommEst)
	}
	r.Modify(qpstate.TypeUD, qpstate.StateReset, qpstate.StateRTS, qpstate.AttrState, unix.EINVAL)
	r.Completion(emu.WCRecv, emu.WCWRFlushErr)
	r.VerbFailed("modify_qp", unix.EINVAL)
	p := r.Profile()
	p.Transport = map[string]uint64{"rcvd_rnr_err": n}
	return p
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	p := sampleProfile("rxe0", 3)
	var b bytes.Buffer
	if err := coverage.Encode(&b, p); err != nil {
		t.Fatal(err)
	}
	q, err := coverage.Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(p, q) {
		t.Errorf("round trip changed the profile:\n got %+v\nwant %+v", q, p)
	}
	var b2 bytes.Buffer
	if err := coverage.Encode(&b2, q); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), b2.Bytes()) {
		t.Errorf("encoding is not stable:\n%s\n%s", b.String(), b2.String())
	}
}

// Two files merge like go tool covdata merge: the union of the cells, the
// counts of common cells added, the runs added.
func TestMergeFilesIsUnionWithCountsAdded(t *testing.T) {
	dir := t.TempDir()
	a, b := sampleProfile("rxe0", 2), sampleProfile("rxe1", 5)
	b.Modify[coverage.ModifyKey{Type: qpstate.TypeRC, Cur: qpstate.StateInit, Next: qpstate.StateRTR,
		Mask: qpstate.AttrState | qpstate.AttrAV}] = 4 // only in b
	delete(a.Events, emu.EventCommEst) // only in b
	pa, pb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	for path, p := range map[string]*coverage.Profile{pa: a, pb: b} {
		if err := coverage.WriteFile(path, p); err != nil {
			t.Fatal(err)
		}
	}
	m, err := coverage.ReadFiles(pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Runs != 2 || !reflect.DeepEqual(m.Devices, []string{"rxe0", "rxe1"}) {
		t.Errorf("runs %d devices %v, want 2 [rxe0 rxe1]", m.Runs, m.Devices)
	}
	keys := map[coverage.ModifyKey]bool{}
	for k := range maps.Keys(a.Modify) {
		keys[k] = true
	}
	for k := range maps.Keys(b.Modify) {
		keys[k] = true
	}
	if len(m.Modify) != len(keys) {
		t.Errorf("merged modify cells %d, want the union's %d", len(m.Modify), len(keys))
	}
	for k := range keys {
		if m.Modify[k] != a.Modify[k]+b.Modify[k] {
			t.Errorf("%+v: %d, want %d+%d", k, m.Modify[k], a.Modify[k], b.Modify[k])
		}
	}
	if m.Events[emu.EventCommEst] != 5 || m.Transport["rcvd_rnr_err"] != 7 ||
		m.Verbs[coverage.VerbKey{Verb: "modify_qp", Errno: unix.EINVAL}] != 2 ||
		m.Completions[coverage.CompletionKey{Opcode: emu.WCSend}] != 7 {
		t.Errorf("merged counts wrong: %+v", m)
	}
	// Merging is order-independent.
	m2, err := coverage.ReadFiles(pb, pa)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Errorf("merge depends on the order:\n%+v\n%+v", m, m2)
	}
}

func TestDecodeRejectsBadFiles(t *testing.T) {
	good := `{"version":1,"runs":1,"devices":["rxe0"],"modify":[{"type":"RC","cur":"RESET","next":"INIT","mask":"STATE","errno":"","count":1}],"completions":[],"events":[],"verbs":[],"transport":[]}`
	if _, err := coverage.Decode(strings.NewReader(good)); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"version", `"version":1`, `"version":2`},
		{"unknown field", `"runs":1`, `"runs":1,"extra":0`},
		{"QP type", `"type":"RC"`, `"type":"RD"`},
		{"type 7", `"type":"RC"`, `"type":"7"`},
		{"state", `"cur":"RESET"`, `"cur":"DRAINING"`},
		{"mask", `"mask":"STATE"`, `"mask":"STATE|NOPE"`},
		{"errno", `"errno":""`, `"errno":"EWHAT"`},
		{"zero count", `"count":1}]`, `"count":0}]`},
		{"duplicate cell", `"count":1}]`, `"count":1},{"type":"RC","cur":"RESET","next":"INIT","mask":"STATE","errno":"","count":1}]`},
		{"duplicate device", `["rxe0"]`, `["rxe0","rxe0"]`},
		{"event", `"events":[]`, `"events":[{"event":"IB_EVENT_NOPE","count":1}]`},
		{"status", `"completions":[]`, `"completions":[{"opcode":"IB_WC_SEND","status":"IB_WC_STATUS(99)","count":1}]`},
		{"verb without errno", `"verbs":[]`, `"verbs":[{"verb":"post_send","errno":"","count":1}]`},
		{"trailing data", `"transport":[]}`, `"transport":[]} {}`},
		{"truncated", `"transport":[]}`, `"transport":[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.old, tc.new, 1)
			if bad == good {
				t.Fatal("mutation did not apply")
			}
			if p, err := coverage.Decode(strings.NewReader(bad)); err == nil {
				t.Errorf("Decode(%s) = %+v, want an error", bad, p)
			}
		})
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes and decodes
// back to the same profile.
func FuzzDecode(f *testing.F) {
	var b bytes.Buffer
	if err := coverage.Encode(&b, sampleProfile("rxe0", 2)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"modify":[{"type":"UD","cur":"RTS","next":"SQD","mask":"0x4000000","errno":"EINVAL","count":18446744073709551615}]}`))
	if golden, err := os.ReadFile(filepath.Join("testdata", "sample.json")); err == nil {
		f.Add(golden)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := coverage.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := coverage.Encode(&out, p); err != nil {
			t.Fatalf("decoded profile does not encode: %v", err)
		}
		q, err := coverage.Decode(&out)
		if err != nil {
			t.Fatalf("re-encoded profile does not decode: %v\n%s", err, out.String())
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the profile:\n%+v\n%+v", p, q)
		}
		var sink bytes.Buffer
		if err := coverage.NewReport(p).WriteText(&sink); err != nil {
			t.Fatal(err)
		}
	})
}
