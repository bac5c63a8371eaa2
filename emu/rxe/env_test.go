package rxe

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// env is one emulated device with a PD, two CQs and an event log.
type env struct {
	t        testing.TB
	dev      *emu.Device
	r        *device
	pd       *emu.PD
	scq, rcq *emu.CQ

	mu     sync.Mutex
	events []emu.Event
}

// testConfig is a device on tap0 with 10.0.0.1 (GID 1) and fd00::1 (GID 2).
func testConfig() Config {
	return Config{Seed: 1, Device: emu.Config{NetDev: emu.NetDev{Name: "tap0",
		Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}}}}
}

func newEnv(t testing.TB) *env { return newEnvWith(t, testConfig()) }

func newEnvWith(t testing.TB, cfg Config) *env {
	t.Helper()
	dev, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dev: dev.Device, r: dev.r}
	dev.RegisterEventHandler(e.record)
	if e.pd, err = dev.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	e.scq = e.cq(64)
	e.rcq = e.cq(64)
	return e
}

func (e *env) record(ev emu.Event) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
}

// takeEvents returns and clears the events seen so far.
func (e *env) takeEvents() []emu.EventType {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []emu.EventType
	for _, ev := range e.events {
		ts = append(ts, ev.Type)
	}
	e.events = nil
	return ts
}

func (e *env) cq(n int) *emu.CQ {
	e.t.Helper()
	cq, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: n, EventHandler: e.record})
	if err != nil {
		e.t.Fatal(err)
	}
	return cq
}

// qp creates a QP of type t with 16 WRs and 4 SGEs each way.
func (e *env) qp(t qpstate.Type, srq *emu.SRQ) *emu.QP {
	e.t.Helper()
	init := &emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq, QPType: t, SQSigType: emu.SignalReqWR,
		EventHandler: e.record, Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}}
	qp, err := e.pd.CreateQP(init)
	if err != nil {
		e.t.Fatal(err)
	}
	return qp
}

// av is a RoCEv2 path from GID 1 (10.0.0.1) to 10.0.0.2.
func av() ib.AHAttr {
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
		GRH:  ib.GlobalRoute{DGID: emu.GIDFromAddr(netip.MustParseAddr("10.0.0.2")), SGIDIndex: 1, HopLimit: 64},
		DMAC: [6]byte{2, 0, 0, 0, 0, 2}}
}

func (e *env) modify(qp *emu.QP, a qpstate.Attr, mask qpstate.AttrMask) {
	e.t.Helper()
	if err := qp.Modify(&a, mask); err != nil {
		e.t.Fatalf("modify %v: %v", mask, err)
	}
}

// toInit, toRTR and toRTS walk a QP up the state machine with the
// attributes its type requires.
func (e *env) toInit(qp *emu.QP) {
	e.t.Helper()
	a := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QKey: 0x1234,
		QPAccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessLocalWrite}
	m := qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort
	if qp.QPType == qpstate.TypeUD || qp.QPType == qpstate.TypeGSI {
		m |= qpstate.AttrQKey
	} else {
		m |= qpstate.AttrAccessFlags
	}
	e.modify(qp, a, m)
}

func (e *env) toRTR(qp *emu.QP) {
	e.t.Helper()
	e.toInit(qp)
	a := qpstate.Attr{QPState: qpstate.StateRTR, AHAttr: av(), PathMTU: ib.MTU1024, DestQPNum: 0x22,
		RQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: 12}
	m := qpstate.AttrState
	switch qp.QPType {
	case qpstate.TypeRC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN |
			qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
	case qpstate.TypeUC:
		m |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN
	}
	e.modify(qp, a, m)
}

func (e *env) toRTS(qp *emu.QP) {
	e.t.Helper()
	e.toRTR(qp)
	a := qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 200, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
	m := qpstate.AttrState | qpstate.AttrSQPSN
	if qp.QPType == qpstate.TypeRC {
		m |= qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
	}
	e.modify(qp, a, m)
}

func (e *env) state(qp *emu.QP) qpstate.State {
	e.t.Helper()
	a, _, err := qp.Query(0)
	if err != nil {
		e.t.Fatal(err)
	}
	return a.QPState
}

// buf allocates n bytes of memory registered as a user MR with
// LOCAL_WRITE and MW_BIND, and returns an SGE covering it.
func (e *env) buf(n int) (emu.SGE, *emu.MR) {
	e.t.Helper()
	addr, _ := e.dev.Memory().Alloc(n)
	mr, err := e.pd.RegUserMR(addr, uint64(n), addr, ib.AccessLocalWrite|ib.AccessMWBind|ib.AccessRemoteWrite)
	if err != nil {
		e.t.Fatal(err)
	}
	return emu.SGE{Addr: addr, Length: uint32(n), LKey: mr.LKey()}, mr
}

func (e *env) poll(cq *emu.CQ) []emu.WC {
	var all []emu.WC
	wc := make([]emu.WC, 8)
	for {
		n := cq.Poll(wc)
		all = append(all, wc[:n]...)
		if n < len(wc) {
			return all
		}
	}
}

func send(id uint64, sge emu.SGE, flags emu.SendFlags) emu.SendWR {
	return emu.SendWR{WRID: id, Opcode: emu.WRSend, SendFlags: flags, SGList: []emu.SGE{sge}}
}

func recv(id uint64, sge emu.SGE) emu.RecvWR { return emu.RecvWR{WRID: id, SGList: []emu.SGE{sge}} }

// wantErrno fails unless err wraps want (nil: no error).
func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// statuses lists the (WRID, status) pairs of completions.
type idStatus struct {
	id uint64
	st emu.WCStatus
}

func statuses(wcs []emu.WC) []idStatus {
	var out []idStatus
	for _, w := range wcs {
		out = append(out, idStatus{w.WRID, w.Status})
	}
	return out
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bindType2 allocates a type-2 MW and a 4 KiB buffer and returns a BIND_MW
// WR binding its first length bytes with access under a new key (the
// low byte incremented), with the MW, the MR and the buffer's SGE.
func (e *env) bindType2(id uint64, flags emu.SendFlags, length uint64, access ib.AccessFlags) (emu.SendWR, *emu.MW, *emu.MR, emu.SGE) {
	e.t.Helper()
	sge, mr := e.buf(4096)
	mw, err := e.pd.AllocMW(emu.MWType2)
	if err != nil {
		e.t.Fatal(err)
	}
	return emu.SendWR{WRID: id, Opcode: emu.WRBindMW, SendFlags: flags, MW: mw, Key: kverbs.IncRKey(mw.RKey()),
		Bind: emu.MWBind{MR: mr, Addr: sge.Addr, Length: length, Access: access}}, mw, mr, sge
}
