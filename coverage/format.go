package coverage

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// FormatVersion is the version of the profile file format Encode writes
// and Decode reads.
const FormatVersion = 1

// maxDecode bounds a profile file (Decode refuses larger input).
const maxDecode = 64 << 20

type fileProfile struct {
	Version     int              `json:"version"`
	Runs        uint64           `json:"runs"`
	Devices     []string         `json:"devices"`
	Modify      []fileModify     `json:"modify"`
	Completions []fileCompletion `json:"completions"`
	Events      []fileEvent      `json:"events"`
	Verbs       []fileVerb       `json:"verbs"`
	Transport   []fileCounter    `json:"transport"`
	Faults      []fileFault      `json:"faults,omitempty"`
}

type fileModify struct {
	Type  string `json:"type"`
	Cur   string `json:"cur"`
	Next  string `json:"next"`
	Mask  string `json:"mask"`
	Errno string `json:"errno"`
	Count uint64 `json:"count"`
}

type fileCompletion struct {
	Opcode string `json:"opcode"`
	Status string `json:"status"`
	Count  uint64 `json:"count"`
}

type fileEvent struct {
	Event string `json:"event"`
	Count uint64 `json:"count"`
}

type fileVerb struct {
	Verb  string `json:"verb"`
	Errno string `json:"errno"`
	Count uint64 `json:"count"`
}

type fileCounter struct {
	Counter string `json:"counter"`
	Count   uint64 `json:"count"`
}

// Encode writes p to w in the file format (see the package comment). A
// cell holding a value outside the kernel's enums is an error.
func Encode(w io.Writer, p *Profile) error {
	f := fileProfile{Version: FormatVersion, Runs: p.Runs, Devices: slices.Sorted(slices.Values(p.Devices)),
		Modify: []fileModify{}, Completions: []fileCompletion{}, Events: []fileEvent{}, Verbs: []fileVerb{},
		Transport: []fileCounter{}}
	if f.Devices == nil {
		f.Devices = []string{}
	}
	for _, k := range sortedModify(p.Modify) {
		if !k.Type.IsValid() || !k.Cur.IsValid() || !k.Next.IsValid() {
			return fmt.Errorf("coverage: encode: modify cell %v %d->%d out of range", k.Type, k.Cur, k.Next)
		}
		f.Modify = append(f.Modify, fileModify{k.Type.Name(), k.Cur.Name(), k.Next.Name(), k.Mask.ShortString(),
			errnoName(k.Errno), p.Modify[k]})
	}
	for _, k := range sortedCompletions(p.Completions) {
		if !k.Opcode.IsValid() || !k.Status.IsValid() {
			return fmt.Errorf("coverage: encode: completion %v %v out of range", k.Opcode, k.Status)
		}
		f.Completions = append(f.Completions, fileCompletion{k.Opcode.String(), k.Status.String(), p.Completions[k]})
	}
	for _, e := range slices.Sorted(maps.Keys(p.Events)) {
		if !e.IsValid() {
			return fmt.Errorf("coverage: encode: event %v out of range", e)
		}
		f.Events = append(f.Events, fileEvent{e.String(), p.Events[e]})
	}
	for _, k := range sortedVerbs(p.Verbs) {
		if k.Verb == "" || errnoName(k.Errno) == "" {
			return fmt.Errorf("coverage: encode: failed verb %q errno %d", k.Verb, k.Errno)
		}
		f.Verbs = append(f.Verbs, fileVerb{k.Verb, errnoName(k.Errno), p.Verbs[k]})
	}
	for _, c := range slices.Sorted(maps.Keys(p.Transport)) {
		f.Transport = append(f.Transport, fileCounter{c, p.Transport[c]})
	}
	for _, k := range sortedFaults(p.Faults) {
		if k.Rule == "" || k.Action == "" {
			return fmt.Errorf("coverage: encode: fault %q action %q", k.Rule, k.Action)
		}
		f.Faults = append(f.Faults, fileFault{k.Rule, k.Action, p.Faults[k]})
	}
	b, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Decode reads a profile in the file format from r. It rejects another
// version, unknown fields and names, a zero count and two cells with the
// same key.
func Decode(r io.Reader) (*Profile, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDecode+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDecode {
		return nil, fmt.Errorf("coverage: profile larger than %d bytes", maxDecode)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileProfile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("coverage: profile: %w", err)
	}
	if dec.More() {
		return nil, errors.New("coverage: profile: data after the JSON object")
	}
	if f.Version != FormatVersion {
		return nil, fmt.Errorf("coverage: profile version %d, want %d", f.Version, FormatVersion)
	}
	p := &Profile{Runs: f.Runs}
	for _, d := range f.Devices {
		if i, found := slices.BinarySearch(p.Devices, d); found {
			return nil, fmt.Errorf("coverage: profile: device %q listed twice", d)
		} else {
			p.Devices = slices.Insert(p.Devices, i, d)
		}
	}
	for _, c := range f.Modify {
		t, err := qpstate.ParseType(c.Type)
		if err != nil || !t.IsValid() {
			return nil, fmt.Errorf("coverage: profile: QP type %q", c.Type)
		}
		cur, err1 := qpstate.ParseState(c.Cur)
		next, err2 := qpstate.ParseState(c.Next)
		if err1 != nil || err2 != nil || !cur.IsValid() || !next.IsValid() {
			return nil, fmt.Errorf("coverage: profile: transition %q -> %q", c.Cur, c.Next)
		}
		mask, err := qpstate.ParseAttrMask(c.Mask)
		if err != nil {
			return nil, fmt.Errorf("coverage: profile: %w", err)
		}
		errno, ok := parseErrno(c.Errno)
		if !ok {
			return nil, fmt.Errorf("coverage: profile: errno %q", c.Errno)
		}
		if err := put(&p.Modify, ModifyKey{t, cur, next, mask, errno}, c.Count); err != nil {
			return nil, err
		}
	}
	for _, c := range f.Completions {
		op, ok1 := wcOpcodeByName()[c.Opcode]
		st, ok2 := wcStatusByName()[c.Status]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("coverage: profile: completion %q %q", c.Opcode, c.Status)
		}
		if err := put(&p.Completions, CompletionKey{op, st}, c.Count); err != nil {
			return nil, err
		}
	}
	for _, c := range f.Events {
		e, ok := eventByName()[c.Event]
		if !ok {
			return nil, fmt.Errorf("coverage: profile: event %q", c.Event)
		}
		if err := put(&p.Events, e, c.Count); err != nil {
			return nil, err
		}
	}
	for _, c := range f.Verbs {
		errno, ok := parseErrno(c.Errno)
		if !ok || errno == 0 || c.Verb == "" {
			return nil, fmt.Errorf("coverage: profile: failed verb %q errno %q", c.Verb, c.Errno)
		}
		if err := put(&p.Verbs, VerbKey{c.Verb, errno}, c.Count); err != nil {
			return nil, err
		}
	}
	for _, c := range f.Faults {
		if c.Rule == "" || c.Action == "" {
			return nil, fmt.Errorf("coverage: profile: fault %q action %q", c.Rule, c.Action)
		}
		if err := put(&p.Faults, FaultKey{c.Rule, c.Action}, c.Count); err != nil {
			return nil, err
		}
	}
	for _, c := range f.Transport {
		if c.Counter == "" {
			return nil, errors.New("coverage: profile: transport counter without a name")
		}
		if err := put(&p.Transport, c.Counter, c.Count); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func put[K comparable](m *map[K]uint64, k K, n uint64) error {
	if n == 0 {
		return fmt.Errorf("coverage: profile: cell %v with count 0", k)
	}
	if _, dup := (*m)[k]; dup {
		return fmt.Errorf("coverage: profile: cell %v listed twice", k)
	}
	add(m, k, n)
	return nil
}

// ReadFiles decodes the profile files at paths and returns their merge.
func ReadFiles(paths ...string) (*Profile, error) {
	var p Profile
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		q, err := Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		p.Merge(q)
	}
	return &p, nil
}

// WriteFile writes p to the file at path (created or truncated).
func WriteFile(path string, p *Profile) error {
	var b bytes.Buffer
	if err := Encode(&b, p); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func sortedModify(m map[ModifyKey]uint64) []ModifyKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b ModifyKey) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Cur, b.Cur), cmp.Compare(a.Next, b.Next),
			cmp.Compare(a.Errno, b.Errno), cmp.Compare(a.Mask, b.Mask))
	})
}

func sortedCompletions(m map[CompletionKey]uint64) []CompletionKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b CompletionKey) int {
		return cmp.Or(cmp.Compare(a.Opcode, b.Opcode), cmp.Compare(a.Status, b.Status))
	})
}

func sortedVerbs(m map[VerbKey]uint64) []VerbKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b VerbKey) int {
		return cmp.Or(cmp.Compare(a.Verb, b.Verb), cmp.Compare(a.Errno, b.Errno))
	})
}

// errnoName is the errno's name ("EINVAL"), "" for 0 or an unnamed value.
func errnoName(e unix.Errno) string {
	if e == 0 {
		return ""
	}
	return unix.ErrnoName(e)
}

// maxErrno bounds the errnos a profile names (Linux's end below 140).
const maxErrno = 256

// parseErrno is errnoName's inverse.
func parseErrno(s string) (unix.Errno, bool) {
	if s == "" {
		return 0, true
	}
	e, ok := errnoByName()[s]
	return e, ok
}

var errnoByName = sync.OnceValue(func() map[string]unix.Errno {
	m := map[string]unix.Errno{}
	for e := unix.Errno(1); e < maxErrno; e++ {
		if n := unix.ErrnoName(e); n != "" {
			if _, dup := m[n]; !dup {
				m[n] = e
			}
		}
	}
	return m
})

// WCStatuses returns every completion status of emu's enum, in value order.
func WCStatuses() []emu.WCStatus {
	var out []emu.WCStatus
	for s := emu.WCStatus(0); s.IsValid(); s++ {
		out = append(out, s)
	}
	return out
}

// WCOpcodes returns every completion opcode of emu's enum, in value order.
func WCOpcodes() []emu.WCOpcode {
	var out []emu.WCOpcode
	for o := emu.WCOpcode(0); o < 256; o++ {
		if o.IsValid() {
			out = append(out, o)
		}
	}
	return out
}

// EventTypes returns every async event of emu's enum, in value order.
func EventTypes() []emu.EventType {
	var out []emu.EventType
	for e := emu.EventType(0); e.IsValid(); e++ {
		out = append(out, e)
	}
	return out
}

func byName[T interface {
	comparable
	String() string
}](vals []T) map[string]T {
	m := make(map[string]T, len(vals))
	for _, v := range vals {
		m[v.String()] = v
	}
	return m
}

var (
	wcStatusByName = sync.OnceValue(func() map[string]emu.WCStatus { return byName(WCStatuses()) })
	wcOpcodeByName = sync.OnceValue(func() map[string]emu.WCOpcode { return byName(WCOpcodes()) })
	eventByName    = sync.OnceValue(func() map[string]emu.EventType { return byName(EventTypes()) })
)
