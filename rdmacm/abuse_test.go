package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// objects returns what a CM holds for connections and replies: its
// connections, passive index, cached and transient address handles, and
// send slots in use.
func (c *CM) objects() [5]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [5]int{len(c.conns), len(c.remote), len(c.ahs), len(c.slotAH), numSends - len(c.freeSlots)}
}

// testREQ builds a REQ from a to b's port as Connect does, with
// communication ID id.
func testREQ(lb *workload.Loopback, a *side, id uint32, port uint16) mad.MAD {
	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{SrcPort: 0xc001, Src: lb.A.IP, Dst: lb.B.IP})
	m := mad.NewCM(mad.AttrREQ, uint64(id))
	mad.REQ(m).Encode(&mad.REQFields{LocalCommID: id, ServiceID: mad.ServiceID(mad.PortSpaceTCP, port), LocalCAGUID: a.cm.guid,
		LocalQPN: a.qp.QPNum(), ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: id & 0xffffff, LocalCMResponseTimeout: 20, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: emu.GIDFromAddr(lb.A.IP), PrimaryRemoteGID: emu.GIDFromAddr(lb.B.IP), PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: 19, PrivateData: pd})
	return m
}

// TestMalformedMADsToQP1: MADs QP1 must not act on (another base
// version, class or class version, a Get or a response, LAP, APR,
// ClassPortInfo, an unknown attribute) are counted and dropped without an
// answer, and the CM still connects afterwards.
func TestMalformedMADsToQP1(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 21}, Config{Seed: 22})
	bgid := emu.GIDFromAddr(lb.B.IP)
	bad := map[string]func(mad.MAD){
		"base version 2":  func(m mad.MAD) { m[0] = 2 },
		"class 0x04":      func(m mad.MAD) { m[1] = 0x04 },
		"class version 1": func(m mad.MAD) { m[2] = 1 },
		"method Get":      func(m mad.MAD) { m[3] = 0x01 },
		"response bit":    func(m mad.MAD) { m[3] = 0x83 },
		"LAP":             func(m mad.MAD) { m[17] = 0x19 },
		"APR":             func(m mad.MAD) { m[17] = 0x1a },
		"ClassPortInfo":   func(m mad.MAD) { m[16], m[17] = 0, 1 },
		"unknown attr":    func(m mad.MAD) { m[17] = 0x99 },
		"all ones": func(m mad.MAD) {
			copy(m, make([]byte, 256))
			for i := range m {
				m[i] = 0xff
			}
		},
	}
	for name, spoil := range bad {
		m := testREQ(lb, a, 0x1000, 7500)
		spoil(m)
		if err := a.cm.reply(bgid, m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	waitFor(t, "the malformed MADs", func() bool { return b.cm.Stats().Malformed == uint64(len(bad)) })
	time.Sleep(20 * time.Millisecond)
	if s := b.cm.Stats(); len(s.Sent) != 0 || len(s.Received) != 0 || s.Malformed != uint64(len(bad)) {
		t.Errorf("stats after malformed MADs %+v; want them all counted malformed, nothing sent", s)
	}
	ca, cb := connect(t, lb, a, b, 7501, rpingParam, rpingParam)
	if ca.State() != StateEstablished || cb.State() != StateEstablished {
		t.Errorf("connection after the abuse: %v %v", ca.State(), cb.State())
	}
}

// TestREQFloodNoLeak: a flood of REQs for service IDs nobody listens on
// gets one REJ "invalid service ID" each and leaves no state; a flood of
// REQs to a listener whose consumer does not accept fills its backlog,
// the rest dropped silently and counted; duplicates of a queued REQ get an
// MRA; closing the listener rejects the queued ones with "consumer
// defined". Afterwards the CM holds what it held before and no goroutine
// is left.
func TestREQFloodNoLeak(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 23}, Config{Seed: 24})
	bgid := emu.GIDFromAddr(lb.B.IP)
	before := b.cm.objects()
	goroutines := runtime.NumGoroutine()

	// QP1 has 64 receives posted: send in bursts of 32, each once the
	// previous one arrived, so that no REQ is lost for want of a receive
	// (the counts below are then exact).
	burst := func(from, n int, m func(i int) mad.MAD) {
		for i := from; i < from+n; i += 32 {
			for j := i; j < min(i+32, from+n); j++ {
				a.cm.reply(bgid, m(j))
			}
			want := uint64(min(i+32, from+n))
			waitFor(t, "a burst", func() bool { return b.cm.Stats().Received[mad.AttrREQ] >= want })
		}
	}
	const unknown = 300
	burst(0, unknown, func(i int) mad.MAD { return testREQ(lb, a, uint32(0x10000+i), uint16(8000+i%50)) })
	waitFor(t, "the REJs", func() bool { return a.cm.Stats().Received[mad.AttrREJ] == unknown })
	if s := b.cm.Stats(); s.Sent[mad.AttrREJ] != unknown || s.Received[mad.AttrREQ] != unknown || len(s.Sent) != 1 {
		t.Errorf("after %d REQs for unknown service IDs: %+v", unknown, s)
	}
	if s := a.cm.Stats(); s.Unmatched != unknown {
		t.Errorf("the REJs matched something on the requester: %+v", s)
	}

	l, err := b.cm.Listen(7600)
	if err != nil {
		t.Fatal(err)
	}
	const flood = 200
	burst(unknown, flood, func(i int) mad.MAD { return testREQ(lb, a, uint32(0x20000+i-unknown), 7600) })
	waitFor(t, "the flood", func() bool { return b.cm.Stats().Received[mad.AttrREQ] == unknown+flood })
	backlog := cap(l.reqs)
	if s := b.cm.Stats(); s.BacklogDrops != flood-uint64(backlog) || s.Sent[mad.AttrREJ] != unknown {
		t.Errorf("after a flood of %d REQs at a backlog of %d: %+v", flood, backlog, s)
	}
	if o := b.cm.objects(); o[0] != backlog || o[1] != backlog {
		t.Errorf("objects %v, want %d pending requests", o, backlog)
	}
	// A retransmission of a queued REQ: the consumer is late, MRA.
	a.cm.reply(bgid, testREQ(lb, a, 0x20000, 7600))
	waitFor(t, "the MRA", func() bool { return a.cm.Stats().Received[mad.AttrMRA] == 1 })
	if s := b.cm.Stats(); s.Duplicates != 1 || s.Sent[mad.AttrMRA] != 1 {
		t.Errorf("after a duplicate REQ: %+v", s)
	}
	l.Close()
	waitFor(t, "the REJs of the closed listener", func() bool {
		return a.cm.Stats().Received[mad.AttrREJ] == unknown+uint64(backlog)
	})
	for deadline := time.Now().Add(5 * time.Second); b.cm.objects() != before && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if o := b.cm.objects(); o != before {
		t.Fatalf("CM objects (conns, passive index, AHs, transient AHs, busy send slots) %v after the flood, %v before", o, before)
	}
	waitFor(t, "the goroutines", func() bool { return runtime.NumGoroutine() <= goroutines })

	// The CM still works.
	ca, _ := connect(t, lb, a, b, 7601, rpingParam, rpingParam)
	if ca.State() != StateEstablished {
		t.Errorf("state %v", ca.State())
	}
}

// TestStatelessReplies: a SIDR_REQ gets SIDR_REP "unsupported" with the
// request and service IDs echoed (no UD listener); a REP naming no REQ
// gets REJ "invalid communication ID"; a DREQ for another QP is dropped
// while the connection stays up.
func TestStatelessReplies(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 25}, Config{Seed: 26})
	bgid := emu.GIDFromAddr(lb.B.IP)
	sidr := mad.NewCM(mad.AttrSIDRREQ, 0x77)
	pd := make([]byte, mad.SIDRREQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{SrcPort: 0xc002, Src: lb.A.IP, Dst: lb.B.IP})
	mad.SIDRREQ(sidr).Encode(&mad.SIDRREQFields{RequestID: 0xabcd, PartitionKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174), PrivateData: pd})
	var mu sync.Mutex
	var sent []mad.MAD
	b.cm.cfg.dropTx = func(m mad.MAD) bool {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, append(mad.MAD(nil), m...))
		return false
	}
	nth := func(i int) mad.MAD { mu.Lock(); defer mu.Unlock(); return sent[i] }
	a.cm.reply(bgid, sidr)
	waitFor(t, "the SIDR_REP", func() bool { return a.cm.Stats().Received[mad.AttrSIDRREP] == 1 })
	rep := mad.SIDRREP(nth(0)).Fields()
	if nth(0).TransactionID() != 0x77 || rep.RequestID != 0xabcd || rep.Status != mad.SIDRUnsupported ||
		rep.ServiceID != mad.ServiceID(mad.PortSpaceUDP, 7174) || rep.QPN != 0 || rep.QKey != 0 {
		t.Errorf("SIDR_REP %+v tid %#x", rep, nth(0).TransactionID())
	}

	r := mad.NewCM(mad.AttrREP, 0x78)
	mad.REP(r).Encode(&mad.REPFields{LocalCommID: 0x1111, RemoteCommID: 0x2222, LocalQPN: 0x33})
	a.cm.reply(bgid, r)
	waitFor(t, "the REJ", func() bool { return a.cm.Stats().Received[mad.AttrREJ] == 1 })
	rej := mad.REJ(nth(1)).Fields()
	if rej.LocalCommID != 0x2222 || rej.RemoteCommID != 0x1111 || rej.MessageREJected != mad.MsgREP || rej.Reason != mad.RejInvalidCommID {
		t.Errorf("REJ of an unknown REP %+v", rej)
	}
	ca, cb := connect(t, lb, a, b, 7700, rpingParam, rpingParam)
	d := mad.NewCM(mad.AttrDREQ, 0x79)
	mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: ca.localID, RemoteCommID: cb.localID, RemoteQPN: b.qp.QPNum() + 1})
	a.cm.reply(bgid, d)
	waitFor(t, "the DREQ", func() bool { return b.cm.Stats().Received[mad.AttrDREQ] == 1 })
	time.Sleep(20 * time.Millisecond)
	if cb.State() != StateEstablished || b.cm.Stats().Sent[mad.AttrDREP] != 0 {
		t.Errorf("a DREQ for another QP: state %v, stats %+v", cb.State(), b.cm.Stats())
	}
}

// TestPrivateDataLimits: Connect, Accept and Reject refuse more private
// data than the kernel's cm sends (56 bytes in a REQ after the rdma_cm
// header, 196 in a REP, 148 in a REJ) with EINVAL, before anything goes
// out; at the limits the data arrives whole.
func TestPrivateDataLimits(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 27}, Config{Seed: 28})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := rpingParam
	p.PrivateData = make([]byte, 57)
	if _, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7900, p); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Connect with 57 bytes: %v, want EINVAL", err)
	}
	if s := a.cm.Stats(); len(s.Sent) != 0 {
		t.Errorf("sent %v", s.Sent)
	}
	l, err := b.cm.Listen(7900)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pa, pb := rpingParam, rpingParam
	pa.PrivateData = bytes.Repeat([]byte{0xa5}, 56)
	pb.PrivateData = bytes.Repeat([]byte{0x5a}, 196)
	errc := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			big := pb
			big.PrivateData = make([]byte, 197)
			if _, err := r.Accept(ctx, b.qp, big); !errors.Is(err, unix.EINVAL) {
				errc <- fmt.Errorf("Accept with 197 bytes: %v, want EINVAL", err)
				return
			}
			if err := r.Reject(make([]byte, 149)); !errors.Is(err, unix.EINVAL) {
				errc <- fmt.Errorf("Reject with 149 bytes: %v, want EINVAL", err)
				return
			}
			if !bytes.Equal(r.Param.PrivateData, pa.PrivateData) {
				errc <- fmt.Errorf("REQ private data %x", r.Param.PrivateData)
				return
			}
			_, err = r.Accept(ctx, b.qp, pb)
		}
		errc <- err
	}()
	ca, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7900, pa)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := ca.PeerParam().PrivateData; !bytes.Equal(got, pb.PrivateData) {
		t.Errorf("REP private data %x", got)
	}
}
