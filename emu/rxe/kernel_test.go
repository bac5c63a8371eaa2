package rxe

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

func TestParseKernel(t *testing.T) {
	for _, k := range Kernels() {
		got, err := ParseKernel(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKernel(%q) = %v, %v", k.String(), got, err)
		}
	}
	for _, s := range []string{"", "6", "6.13", "7.3.4", "Kernel(0)"} {
		if _, err := ParseKernel(s); !errors.Is(err, unix.EINVAL) {
			t.Errorf("ParseKernel(%q): %v, want EINVAL", s, err)
		}
	}
	if Kernel(0).IsValid() || Kernel(9).IsValid() || Kernel(0).orDefault() != Kernel7_3 {
		t.Error("the zero Kernel must be invalid and mean 7.3")
	}
	if _, err := New(Config{Kernel: 9}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("New with Kernel(9): %v, want EINVAL", err)
	}
}

// kernelEnv is a device of kernel k.
func kernelEnv(t *testing.T, k Kernel) *env {
	cfg := testConfig()
	cfg.Kernel = k
	return newEnvWith(t, cfg)
}

// TestKernelAttributes: what each kernel's rxe reports: device_cap_flags
// without FLUSH and ATOMIC_WRITE before 6.2, the port's max_msg_sz
// 0x800000 before db03b70969aa (mainline 6.14, stable 6.12.y) and 2^31
// from it.
func TestKernelAttributes(t *testing.T) {
	const flushBits = 1<<38 | 1<<39 | 1<<40
	for _, tc := range []struct {
		k        Kernel
		flush    bool
		maxMsgSz uint32
	}{
		{Kernel7_3, true, 1 << 31},
		{0, true, 1 << 31},
		{Kernel6_12, true, 1 << 31},
		{Kernel6_1, false, 0x800000},
	} {
		t.Run(tc.k.orDefault().String(), func(t *testing.T) {
			e := kernelEnv(t, tc.k)
			a := e.dev.Query()
			if got := a.DeviceCapFlags&flushBits == flushBits; got != tc.flush || a.DeviceCapFlags&^flushBits != deviceCapFlags&^flushBits {
				t.Errorf("device_cap_flags %#x, FLUSH/ATOMIC_WRITE bits %v, want %v", a.DeviceCapFlags, got, tc.flush)
			}
			pa, err := e.dev.QueryPort(1)
			if err != nil || pa.MaxMsgSz != tc.maxMsgSz {
				t.Errorf("port max_msg_sz %#x (%v), want %#x", pa.MaxMsgSz, err, tc.maxMsgSz)
			}
		})
	}
}

// TestKernelCounters: sent_bytes and rcvd_bytes (Linux 7.2) exist on 7.3
// only, and the other counters keep their names and values in order.
func TestKernelCounters(t *testing.T) {
	for _, k := range Kernels() {
		t.Run(k.String(), func(t *testing.T) {
			e := kernelEnv(t, k)
			s, err := e.dev.AllocHWPortStats(1)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range s.Descs {
				names = append(names, d.Name)
			}
			hasBytes := slices.Contains(names, "sent_bytes") && slices.Contains(names, "rcvd_bytes")
			if hasBytes != (k == Kernel7_3) || len(names) != numCounters-map[bool]int{true: 0, false: 2}[hasBytes] {
				t.Fatalf("counters %v", names)
			}
			e.r.mu.Lock()
			for i := range e.r.counters {
				e.r.counters[i] = uint64(100 + i)
			}
			e.r.mu.Unlock()
			e.dev.GetHWStats(s, 1)
			for i, name := range names {
				j := slices.IndexFunc(statDescs[:], func(d emu.StatDesc) bool { return d.Name == name })
				if s.Value[i] != uint64(100+j) {
					t.Errorf("%s = %d, want %d", name, s.Value[i], 100+j)
				}
			}
		})
	}
}

// TestKernelQueryCurState: from 775e6d3c8fda (mainline 6.13, stable
// 6.12.y) query_qp returns the QP's state as cur_qp_state; before (6.1),
// the stored attribute, which no modify without IB_QP_CUR_STATE sets
// (RESET, 0).
func TestKernelQueryCurState(t *testing.T) {
	for _, tc := range []struct {
		k    Kernel
		want qpstate.State
	}{{Kernel7_3, qpstate.StateInit}, {Kernel6_12, qpstate.StateInit}, {Kernel6_1, qpstate.StateReset}} {
		t.Run(tc.k.String(), func(t *testing.T) {
			e := kernelEnv(t, tc.k)
			q := e.qp(qpstate.TypeRC, nil)
			if err := q.Modify(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1},
				qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			a, _, err := q.Query(qpstate.AttrState | qpstate.AttrCurState)
			if err != nil || a.QPState != qpstate.StateInit || a.CurQPState != tc.want {
				t.Errorf("query: qp_state %v cur_qp_state %v (%v), want INIT %v", a.QPState, a.CurQPState, err, tc.want)
			}
		})
	}
}

// TestKernelPolicy: rxe before 6.4 checks modify_qp with the older order
// (qpstate.PolicyRxePre64), from 6.4 with qpstate.PolicyRxe; an explicit
// Config.Policy stands.
func TestKernelPolicy(t *testing.T) {
	for k, want := range map[Kernel]qpstate.Policy{Kernel7_3: qpstate.PolicyRxe, Kernel6_12: qpstate.PolicyRxe, Kernel6_1: qpstate.PolicyRxePre64} {
		if got := kernelEnv(t, k).r.cfg.Policy; got != want {
			t.Errorf("%v: policy %v, want %v", k, got, want)
		}
	}
	cfg := testConfig()
	cfg.Kernel, cfg.Policy = Kernel6_1, qpstate.PolicyHardware
	if got := newEnvWith(t, cfg).r.cfg.Policy; got != qpstate.PolicyHardware {
		t.Errorf("6.1 with PolicyHardware: policy %v", got)
	}
}

// TestAccessErrEvent: an R_Key violation at an RC responder is NAK 0x62,
// the requester's IB_WC_REM_ACCESS_ERR and the responder QP in ERR on
// every kernel; from 7.1 the responder's client also gets
// IB_EVENT_QP_ACCESS_ERR, except for a packet with immediate data
// (RDMA WRITE with immediate: the error rides on its receive WQE).
func TestAccessErrEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		k     Kernel
		op    emu.WROpcode
		event bool
	}{
		{"7.3/write", Kernel7_3, emu.WRRDMAWrite, true},
		{"7.3/read", Kernel7_3, emu.WRRDMARead, true},
		{"7.3/atomic", Kernel7_3, emu.WRAtomicFetchAndAdd, true},
		{"7.3/flush", Kernel7_3, emu.WRFlush, true},
		{"7.3/write-with-imm", Kernel7_3, emu.WRRDMAWriteWithImm, false},
		{"default/write", 0, emu.WRRDMAWrite, true},
		{"6.12/write", Kernel6_12, emu.WRRDMAWrite, false},
		{"6.12/read", Kernel6_12, emu.WRRDMARead, false},
		{"6.12/flush", Kernel6_12, emu.WRFlush, false},
		{"6.1/write", Kernel6_1, emu.WRRDMAWrite, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{kernel: tc.k})
			c := p.connect(qpOpts{accessB: allAccess | ib.AccessFlushGlobal})
			src, _, mra := p.a.buf(64, 1)
			dst, _, mrb := p.b.buf(64, 2)
			if tc.op == emu.WRRDMAWriteWithImm {
				rb, _, mrr := p.b.buf(64, 3)
				if _, err := c.qb.PostRecv([]emu.RecvWR{{WRID: 9, SGList: []emu.SGE{{Addr: rb, Length: 64, LKey: mrr.LKey()}}}}); err != nil {
					t.Fatal(err)
				}
			}
			wr := emu.SendWR{WRID: 1, Opcode: tc.op, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 64, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey() ^ 0xff}
			switch tc.op {
			case emu.WRAtomicFetchAndAdd:
				wr.SGList[0].Length = 8
			case emu.WRFlush:
				wr.SGList, wr.FlushLen, wr.FlushType, wr.FlushLevel = nil, 64, emu.FlushGlobal, emu.FlushRange
			}
			p.b.takeEvents()
			p.a.postSend(c.qa, wr)
			p.settle()
			wantSyndrome(t, p.b.rec.take(t), nakRemAccess)
			wantWC(t, "send", poll(p.a.scq), emu.WCRemAccessErr)
			if a, _, err := c.qb.Query(qpstate.AttrState); err != nil || a.QPState != qpstate.StateErr {
				t.Errorf("responder QP %v (%v), want ERR", a.QPState, err)
			}
			ev := p.b.takeEvents()
			if got := slices.Contains(ev, emu.EventQPAccessErr); got != tc.event {
				t.Errorf("responder events %v: IB_EVENT_QP_ACCESS_ERR %v, want %v", ev, got, tc.event)
			}
			if ev := p.a.takeEvents(); slices.Contains(ev, emu.EventQPAccessErr) {
				t.Errorf("requester events %v: the event is the responder's", ev)
			}
		})
	}
}

// TestAccessErrEventUC: an unreliable connection's R_Key violation raises
// no event on any kernel (rxe raises it for RC only).
func TestAccessErrEventUC(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{typ: qpstate.TypeUC})
	src, _, mra := p.a.buf(64, 1)
	dst, _, mrb := p.b.buf(64, 2)
	p.b.takeEvents()
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 64, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey() ^ 0xff})
	p.settle()
	if ev := p.b.takeEvents(); slices.Contains(ev, emu.EventQPAccessErr) {
		t.Errorf("UC responder events %v", ev)
	}
}

// TestFlushPyverbsRange reproduces the first FLUSH of rdma-core 65's
// pyverbs test_qp_ex_rc_flush (tests/test_qpex.py, QpExRCFlush): QPs with
// REMOTE_WRITE|READ|ATOMIC|FLUSH_GLOBAL|FLUSH_PERSISTENT access, a
// 1024-byte MR registered LOCAL_WRITE|FLUSH_GLOBAL|REMOTE_WRITE (no
// REMOTE_READ), a FLUSH of global placement over the MR's whole range,
// then one of selectivity MR with length 0: both complete with success on
// every kernel that has FLUSH.
func TestFlushPyverbsRange(t *testing.T) {
	for _, k := range []Kernel{Kernel7_3, Kernel6_12} {
		t.Run(k.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{kernel: k})
			qpAccess := ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic | ib.AccessFlushGlobal | ib.AccessFlushPersistent
			c := p.connect(qpOpts{accessB: qpAccess})
			dst, mrb := flushBuf(t, p.b, 1024, ib.AccessLocalWrite|ib.AccessFlushGlobal|ib.AccessRemoteWrite)
			p.a.postSend(c.qa,
				emu.SendWR{WRID: 0x123, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled, RemoteAddr: dst, RKey: mrb.RKey(),
					FlushLen: 1024, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushRange},
				emu.SendWR{WRID: 0x123, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled, RemoteAddr: dst, RKey: mrb.RKey(),
					FlushLen: 0, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushMR})
			p.settle()
			wantOps(t, "responses", p.b.rec.take(t), wire.RCRDMAReadResponseOnly, wire.RCRDMAReadResponseOnly)
			wcs := poll(p.a.scq)
			wantWC(t, "flush", wcs, emu.WCSuccess, emu.WCSuccess)
			if wcs[0].Opcode != emu.WCFlush || wcs[0].ByteLen != 1024 {
				t.Errorf("first FLUSH WC %+v", wcs[0])
			}
		})
	}
}

// TestKernelFlushOps: 6.1's rxe has neither FLUSH nor ATOMIC_WRITE
// (6.2): posting them is EINVAL and registering an MR with FLUSH access
// is refused, as the device has no FLUSH capability; 6.12 and 7.3 take
// both.
func TestKernelFlushOps(t *testing.T) {
	for _, k := range Kernels() {
		t.Run(k.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{kernel: k})
			c := p.connect(qpOpts{accessB: allAccess | ib.AccessFlushGlobal})
			src, _, mra := p.a.buf(8, 1)
			dst, _, mrb := p.b.buf(8, 2)
			has := k != Kernel6_1
			for _, wr := range []emu.SendWR{
				{WRID: 1, Opcode: emu.WRFlush, SendFlags: emu.SendSignaled, RemoteAddr: dst, RKey: mrb.RKey(),
					FlushLen: 8, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushRange},
				{WRID: 2, Opcode: emu.WRAtomicWrite, SendFlags: emu.SendSignaled | emu.SendInline, RemoteAddr: dst, RKey: mrb.RKey(),
					SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}},
			} {
				_, err := c.qa.PostSend([]emu.SendWR{wr})
				if has && err != nil || !has && !errors.Is(err, unix.EINVAL) {
					t.Errorf("post %v: %v (FLUSH in this kernel: %v)", wr.Opcode, err, has)
				}
			}
			addr, _ := p.b.dev.Memory().Alloc(64)
			_, err := p.b.pd.RegUserMR(addr, 64, addr, ib.AccessLocalWrite|ib.AccessFlushGlobal)
			if has && err != nil || !has && err == nil {
				t.Errorf("reg MR with FLUSH_GLOBAL: %v (FLUSH in this kernel: %v)", err, has)
			}
		})
	}
}

// TestProcessMADFromKernel72: the device answers a PMA Get of
// PortCountersExtended itself from Linux 7.2 (rxe's process_mad), with
// the port's packet counter in PortXmitPkts; before 7.2 it leaves every
// MAD to the MAD layer.
func TestProcessMADFromKernel72(t *testing.T) {
	for _, tc := range []struct {
		k       Kernel
		answers bool
	}{{Kernel7_3, true}, {Kernel6_12, false}, {Kernel6_1, false}} {
		t.Run(tc.k.String(), func(t *testing.T) {
			e := kernelEnv(t, tc.k)
			e.r.lock()
			e.r.counters[cntSentPkts] = 4242
			e.r.unlock()
			req := make(mad.MAD, mad.Size)
			req.EncodeHeader(&mad.HeaderFields{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassPerfMgmt,
				ClassVersion: 1, Method: mad.MethodGet, AttributeID: mad.AttrPortCountersExtended})
			req[mad.HeaderSize+41] = 1 // PortSelect
			r, ok := e.dev.ProcessMAD(1, req)
			if ok != tc.answers {
				t.Fatalf("ProcessMAD answered %v, want %v", ok, tc.answers)
			}
			if !ok {
				return
			}
			if r[3] != mad.MethodGetResp {
				t.Fatalf("reply method %#x, want GetResp", r[3])
			}
			// PortXmitPkts: 64 bits at byte 24 of the attribute data.
			if got := binary.BigEndian.Uint64(r[mad.HeaderSize+40+24:]); got != 4242 {
				t.Errorf("PortXmitPkts %d, want 4242", got)
			}
			if _, ok := e.dev.ProcessMAD(2, req); ok {
				t.Error("ProcessMAD answered for port 2, which the device does not have")
			}
		})
	}
}

// TestODPByKernel: on-demand paging from Linux 6.15 only: a 7.3 device
// reports odp_caps and registers an ON_DEMAND MR; 6.12 and 6.1 report
// none and refuse it with EOPNOTSUPP, as the core does for a device
// without IBK_ON_DEMAND_PAGING.
func TestODPByKernel(t *testing.T) {
	for _, tc := range []struct {
		k   Kernel
		odp bool
	}{{Kernel7_3, true}, {Kernel6_12, false}, {Kernel6_1, false}} {
		t.Run(tc.k.String(), func(t *testing.T) {
			e := kernelEnv(t, tc.k)
			if got := e.dev.Query().ODPCaps != (emu.ODPCaps{}); got != tc.odp {
				t.Errorf("odp caps reported: %v, want %v", got, tc.odp)
			}
			a, _ := e.dev.Memory().Alloc(odpSize)
			_, err := e.pd.RegUserMR(a, odpSize, a, allAccess|ib.AccessOnDemand)
			if tc.odp && err != nil {
				t.Errorf("ON_DEMAND MR: %v", err)
			}
			if !tc.odp && !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("ON_DEMAND MR: %v, want EOPNOTSUPP", err)
			}
		})
	}
}
