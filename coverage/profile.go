package coverage

import (
	"maps"
	"slices"
	"sync"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// ModifyKey is one cell of modify QP coverage: a QP type, the transition
// asked for (Next equals Cur when the mask lacks IB_QP_STATE), the exact
// attribute mask and the result (0 on success).
type ModifyKey struct {
	Type  qpstate.Type
	Cur   qpstate.State
	Next  qpstate.State
	Mask  qpstate.AttrMask
	Errno unix.Errno
}

// CompletionKey is one cell of completion coverage: a work completion's
// opcode and status.
type CompletionKey struct {
	Opcode emu.WCOpcode
	Status emu.WCStatus
}

// VerbKey is one failed verb ("post_send") and the errno it returned.
type VerbKey struct {
	Verb  string
	Errno unix.Errno
}

// Profile is the coverage of one or more devices over one or more runs:
// how many times each cell was hit. The zero value is an empty profile of
// no run; the maps are allocated on first use.
type Profile struct {
	// Runs is the number of runs merged into the profile: 1 for a
	// Recorder's, the sum after Merge.
	Runs uint64
	// Devices are the names of the devices recorded, sorted and distinct.
	Devices []string
	// Modify counts modify QP calls.
	Modify map[ModifyKey]uint64
	// Completions counts work completions the driver queued.
	Completions map[CompletionKey]uint64
	// Events counts async events dispatched.
	Events map[emu.EventType]uint64
	// Verbs counts failed verbs by errno.
	Verbs map[VerbKey]uint64
	// Transport holds the transport counters of TransportCounters that
	// are not zero, by name.
	Transport map[string]uint64
	// Faults counts what injected faults did (package fault): each rule
	// with each action it took.
	Faults map[FaultKey]uint64
}

// TransportCounter names an rxe hw_counters entry that counts a transport
// event (a NAK, an RNR, a retry, a timeout) and says what it counts.
type TransportCounter struct {
	Name string // the hw_counters name
	Desc string // what it counts, for the report
}

// TransportCounters are the counters of the device (rxe_hw_counters.c
// names) a profile keeps: the transport's NAK, RNR, retry and timeout
// occurrences.
var TransportCounters = []TransportCounter{
	{"rcvd_rnr_err", "RNR NAKs received (requester waits min_rnr_timer and retries)"},
	{"send_rnr_err", "RNR NAKs sent (responder had no receive WQE)"},
	{"retry_rnr_exceeded_err", "RNR retries exhausted (IB_WC_RNR_RETRY_EXC_ERR)"},
	{"rcvd_seq_err", "PSN sequence error NAKs received"},
	{"out_of_seq_request", "sequence error NAKs sent (a request arrived out of sequence)"},
	{"duplicate_request", "duplicate requests received (a peer's retransmission)"},
	{"completer_retry_err", "transport retries started (ACK timeout or sequence error NAK)"},
	{"retry_exceeded_err", "transport retries exhausted (IB_WC_RETRY_EXC_ERR)"},
	{"link_downed", "link down events"},
}

// Merge adds q into p: run counts and cell counts add, devices and cells
// are the union.
func (p *Profile) Merge(q *Profile) {
	p.Runs += q.Runs
	for _, d := range q.Devices {
		p.addDevice(d)
	}
	addAll(&p.Modify, q.Modify)
	addAll(&p.Completions, q.Completions)
	addAll(&p.Events, q.Events)
	addAll(&p.Verbs, q.Verbs)
	addAll(&p.Transport, q.Transport)
	addAll(&p.Faults, q.Faults)
}

func (p *Profile) addDevice(name string) {
	i, found := slices.BinarySearch(p.Devices, name)
	if !found {
		p.Devices = slices.Insert(p.Devices, i, name)
	}
}

func addAll[K comparable](dst *map[K]uint64, src map[K]uint64) {
	for k, n := range src {
		add(dst, k, n)
	}
}

func add[K comparable](m *map[K]uint64, k K, n uint64) {
	if n == 0 {
		return
	}
	if *m == nil {
		*m = map[K]uint64{}
	}
	(*m)[k] += n
}

// Clone returns a deep copy of p.
func (p *Profile) Clone() *Profile {
	return &Profile{Runs: p.Runs, Devices: slices.Clone(p.Devices), Modify: maps.Clone(p.Modify),
		Completions: maps.Clone(p.Completions), Events: maps.Clone(p.Events), Verbs: maps.Clone(p.Verbs),
		Transport: maps.Clone(p.Transport), Faults: maps.Clone(p.Faults)}
}

// Recorder records one device's run into a Profile. It implements
// emu.Recorder: set it in emu.Config.Recorder. It is safe for concurrent
// use.
type Recorder struct {
	mu sync.Mutex
	p  Profile
}

var _ emu.Recorder = (*Recorder)(nil)

// NewRecorder returns a recorder for the device called name: its profile
// counts one run of that device.
func NewRecorder(name string) *Recorder {
	return &Recorder{p: Profile{Runs: 1, Devices: []string{name}}}
}

// Modify implements emu.Recorder.
func (r *Recorder) Modify(t qpstate.Type, cur, next qpstate.State, mask qpstate.AttrMask, errno unix.Errno) {
	r.mu.Lock()
	add(&r.p.Modify, ModifyKey{t, cur, next, mask, errno}, 1)
	r.mu.Unlock()
}

// Completion implements emu.Recorder.
func (r *Recorder) Completion(op emu.WCOpcode, status emu.WCStatus) {
	r.mu.Lock()
	add(&r.p.Completions, CompletionKey{op, status}, 1)
	r.mu.Unlock()
}

// Event implements emu.Recorder.
func (r *Recorder) Event(t emu.EventType) {
	r.mu.Lock()
	add(&r.p.Events, t, 1)
	r.mu.Unlock()
}

// VerbFailed implements emu.Recorder.
func (r *Recorder) VerbFailed(verb string, errno unix.Errno) {
	r.mu.Lock()
	add(&r.p.Verbs, VerbKey{verb, errno}, 1)
	r.mu.Unlock()
}

// ReadCounters sets the profile's transport counters from d's port 1
// hw_counters (the values since the device was created); a device without
// counters leaves them empty. Call it at the end of the run.
func (r *Recorder) ReadCounters(d *emu.Device) error {
	s, err := d.AllocHWPortStats(1)
	if err != nil {
		return err
	}
	d.GetHWStats(s, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range TransportCounters {
		if v, ok := s.Counter(c.Name); ok && v != 0 {
			if r.p.Transport == nil {
				r.p.Transport = map[string]uint64{}
			}
			r.p.Transport[c.Name] = v
		}
	}
	return nil
}

// Profile returns a copy of what the recorder has seen so far.
func (r *Recorder) Profile() *Profile {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p.Clone()
}
