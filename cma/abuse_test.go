package cma

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
)

// objects is what a CM holds: IDs, connections by local and remote ID,
// service requests, bound ports, cached address handles, send slots in
// use and sends waiting for one.
func (c *CM) objects() [8]int {
	c.mu.Lock()
	o := [8]int{len(c.ids), len(c.conns), len(c.remotes), len(c.sidrs), len(c.ports)}
	c.mu.Unlock()
	c.ahMu.Lock()
	o[5] = len(c.ahs)
	c.ahMu.Unlock()
	c.slotMu.Lock()
	o[6], o[7] = numSends-len(c.freeSlots), len(c.overflow)
	c.slotMu.Unlock()
	return o
}

// waitGoroutines waits until no more goroutines run than before.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), before)
		}
	}
}

// rawREQ is a REQ from a to b as an rdma_cm Connect builds it, for
// service ID sid, with communication ID and QPN id.
func rawREQ(a, b *side, id uint32, sid uint64) mad.MAD {
	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: 0xc001, Src: a.ip, Dst: b.ip})
	m := mad.NewCM(mad.AttrREQ, uint64(id))
	mad.REQ(m).Encode(&mad.REQFields{LocalCommID: id, ServiceID: sid, LocalCAGUID: a.cm.guid,
		LocalQPN: id & 0xffffff, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: id & 0xffffff, LocalCMResponseTimeout: 20, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15, PrimaryLocalGID: emu.GIDFromAddr(a.ip), PrimaryRemoteGID: emu.GIDFromAddr(b.ip),
		PrimaryHopLimit: 64, PrimaryLocalACKTimeout: 19, PrivateData: pd})
	return m
}

// TestMalformedMADsToQP1: MADs sent to QP1 that the CM does not take are
// counted and answered as the kernel's MAD layer answers them: a Get or
// a Set no agent takes (CM ClassPortInfo, another class) gets a GetResp
// with status 0x000c, anything else nothing (another base version, a
// subnet management class, a CM message of another method, class version
// or attribute, a response); the answers are not answered in turn, and
// the CM still connects afterwards with nothing left behind.
func TestMalformedMADsToQP1(t *testing.T) {
	a, b := newPair(t, Config{Seed: 21}, Config{Seed: 22})
	established(t, a, b, 7300) // address handles cached both ways
	before := b.cm.objects()
	goroutines := runtime.NumGoroutine()
	bst, ast := b.cm.Stats(), a.cm.Stats()
	bgid := emu.GIDFromAddr(b.ip)
	bad := []struct {
		name     string
		spoil    func(mad.MAD)
		answered bool
	}{
		{"base version 2", func(m mad.MAD) { m[0] = 2 }, false},
		{"SubnMgt LID routed Get", func(m mad.MAD) { m[1], m[3] = 0x01, mad.MethodGet }, false},
		{"SubnMgt directed route Get", func(m mad.MAD) { m[1], m[3] = 0x81, mad.MethodGet }, false},
		{"CM class version 1", func(m mad.MAD) { m[2] = 1 }, false},
		{"CM Get of a REQ", func(m mad.MAD) { m[3] = mad.MethodGet }, false},
		{"CM response bit", func(m mad.MAD) { m[3] = 0x83 }, false},
		{"CM LAP", func(m mad.MAD) { m[17] = 0x19 }, false},
		{"CM APR", func(m mad.MAD) { m[17] = 0x1a }, false},
		{"CM unknown attribute", func(m mad.MAD) { m[17] = 0x99 }, false},
		{"CM Send ClassPortInfo", func(m mad.MAD) { m[16], m[17] = 0, 1 }, false},
		{"CM Get ClassPortInfo", func(m mad.MAD) { m[3], m[16], m[17] = mad.MethodGet, 0, 1 }, true},
		{"CM Set ClassPortInfo", func(m mad.MAD) { m[3], m[16], m[17] = mad.MethodSet, 0, 1 }, true},
		{"PerfMgt Get", func(m mad.MAD) { m[1], m[2], m[3] = 0x04, 1, mad.MethodGet }, true},
		{"PerfMgt GetResp", func(m mad.MAD) { m[1], m[2], m[3] = 0x04, 1, mad.MethodGetResp }, false},
		{"all ones", func(m mad.MAD) {
			for i := range m {
				m[i] = 0xff
			}
		}, false},
	}
	answered := 0
	for i, c := range bad {
		m := rawREQ(a, b, 0x1000+uint32(i), serviceID(PSTCP, 7301))
		c.spoil(m)
		if c.answered {
			answered++
		}
		a.cm.send(bgid, m)
	}
	waitFor(t, "the malformed MADs", func() bool { return b.cm.Stats().Received == bst.Received+uint64(len(bad)) })
	waitFor(t, "the answers", func() bool { return a.cm.Stats().Received == ast.Received+uint64(answered) })
	time.Sleep(20 * time.Millisecond)
	bs, as := b.cm.Stats(), a.cm.Stats()
	if bs.Malformed-bst.Malformed != uint64(len(bad)) || bs.Unsupported-bst.Unsupported != uint64(answered) ||
		bs.RejSent != bst.RejSent || bs.Unmatched != bst.Unmatched {
		t.Errorf("receiver's counters after %d malformed MADs (%d to answer): %+v, before %+v", len(bad), answered, bs, bst)
	}
	// The answers are GetResps: counted, not answered again.
	if as.Malformed-ast.Malformed != uint64(answered) || as.Unsupported != ast.Unsupported || as.Received-ast.Received != uint64(answered) {
		t.Errorf("sender's counters after the answers: %+v, before %+v", as, ast)
	}
	if bs.Received-bst.Received != uint64(len(bad)) {
		t.Errorf("the receiver got %d MADs, want %d (its answers were answered)", bs.Received-bst.Received, len(bad))
	}
	if after := b.cm.objects(); after != before {
		t.Errorf("objects %v after the malformed MADs, %v before", after, before)
	}
	waitGoroutines(t, goroutines)
	established(t, a, b, 7302)
}

// TestREQsForUnknownServiceIDs: REQs whose service ID names no listener
// (outside the rdma_cm space, a port space nobody uses, a port nobody
// listens on) get one REJ "invalid service ID" each, as from ib_cm's
// cm_req_handler, and leave nothing behind; a REQ for a listened port
// whose rdma_cm header is bad gets REJ "consumer defined".
func TestREQsForUnknownServiceIDs(t *testing.T) {
	type rej struct {
		remote uint32
		reason mad.RejReason
	}
	rejs := make(chan rej, 64)
	tap := func(m mad.MAD) bool {
		if m.AttributeID() == mad.AttrREJ {
			f := mad.REJ(m).Fields()
			rejs <- rej{f.RemoteCommID, f.Reason}
		}
		return false
	}
	a, b := newPair(t, Config{Seed: 31}, Config{Seed: 32, DropTx: tap})
	established(t, a, b, 7400)
	l := b.id(PSTCP)
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7401)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	before := b.cm.objects()
	goroutines := runtime.NumGoroutine()
	bst, ast := b.cm.Stats(), a.cm.Stats()
	bgid := emu.GIDFromAddr(b.ip)
	sids := []uint64{
		0x1000000000000001,          // not an rdma_cm service ID
		0xffffffffffffffff,          // all ones
		serviceID(0x0555, 7401),     // a port space nobody uses
		serviceID(PSUDP, 7401),      // the UDP port space of the listened port
		serviceID(PSTCP, 7402),      // a port nobody listens on
		serviceID(PSTCP, 0),         // port 0
		serviceID(PSIB, 7401),       // the IB port space
		serviceID(PSTCP, 7401) << 1, // shifted
	}
	want := map[uint32]mad.RejReason{}
	for i, sid := range sids {
		id := 0x2000 + uint32(i)
		want[id] = mad.RejInvalidServiceID
		a.cm.send(bgid, rawREQ(a, b, id, sid))
	}
	// A listened port, its rdma_cm header of version 9: ib_cm matches
	// the listener, rdma_cm refuses the request.
	badHdr := rawREQ(a, b, 0x3000, serviceID(PSTCP, 7401))
	badHdr[mad.Size-mad.REQPrivateDataSize] = 9
	want[0x3000] = mad.RejConsumerDefined
	a.cm.send(bgid, badHdr)
	for range want {
		select {
		case r := <-rejs:
			if w, ok := want[r.remote]; !ok || w != r.reason {
				t.Errorf("REJ %v for the REQ of communication ID %#x, want %v", r.reason, r.remote, w)
			}
			delete(want, r.remote)
		case <-time.After(10 * time.Second):
			t.Fatalf("no REJ for %v", want)
		}
	}
	waitFor(t, "the REJs", func() bool { return a.cm.Stats().Received == ast.Received+uint64(len(sids)+1) })
	bs, as := b.cm.Stats(), a.cm.Stats()
	if bs.RejSent-bst.RejSent != uint64(len(sids)+1) || bs.Received-bst.Received != uint64(len(sids)+1) || bs.Malformed != bst.Malformed {
		t.Errorf("the receiver's counters: %+v, before %+v", bs, bst)
	}
	// The REJs name no ID of the sender's: counted, nothing answered.
	if as.Unmatched-ast.Unmatched != uint64(len(sids)+1) || as.RejSent != ast.RejSent {
		t.Errorf("the sender's counters: %+v, before %+v", as, ast)
	}
	if after := b.cm.objects(); after != before {
		t.Errorf("objects %v after the REQs, %v before", after, before)
	}
	waitGoroutines(t, goroutines)
}
