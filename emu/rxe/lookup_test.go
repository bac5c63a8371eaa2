package rxe_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
)

// writeOK posts a signaled RDMA WRITE of n bytes from a's buffer to
// rkey at raddr and waits for its completion, which must be status.
func writeOK(t *testing.T, a *rxetest.QP, n int, raddr uint64, rkey uint32, status emu.WCStatus) {
	t.Helper()
	if _, err := a.PostSend([]emu.SendWR{{WRID: 7, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	wcs, err := rxetest.Wait(a.End.CQ, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if wcs[0].Status != status {
		t.Fatalf("WRITE completed with %v, want %v", wcs[0].Status, status)
	}
}

// connectedRC returns a link of two devices made with o and a connected RC
// pair on it with 64 KiB buffers; the link closes with the test.
func connectedRC(t *testing.T, o rxetest.Options) (*rxetest.Link, *rxetest.QP, *rxetest.QP) {
	t.Helper()
	l, err := rxetest.NewLink(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	a, b, err := l.Pair(qpstate.TypeRC, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	return l, a, b
}

// TestMRLookupAfterDeregAndReuse: the responder and the requester find an
// MR by its key's index through the MR they found last; after DeregMR the
// MR registered next over the same memory is the one found (its key
// places the WRITE), and the old key fails with a remote access error.
func TestMRLookupAfterDeregAndReuse(t *testing.T) {
	l, a, b := connectedRC(t, rxetest.Options{MTU: 4200})
	const n = 16 << 10
	for i := range a.Buf[:n] {
		a.Buf[i] = byte(i*7 + 1)
	}
	writeOK(t, a, n, b.Addr, b.MR.RKey(), emu.WCSuccess)
	old := b.MR.RKey()
	if err := b.MR.Dereg(); err != nil {
		t.Fatal(err)
	}
	m, err := l.B.PD.RegUserMR(b.Addr, uint64(len(b.Buf)), b.Addr, rxetest.Access)
	if err != nil {
		t.Fatal(err)
	}
	if m.RKey()>>8 != old>>8 || m.RKey() == old {
		t.Logf("new MR key %#x, old %#x: the index was not reused", m.RKey(), old)
	}
	clear(b.Buf)
	for i := range a.Buf[:n] {
		a.Buf[i] = byte(i*5 + 3)
	}
	writeOK(t, a, n, b.Addr, m.RKey(), emu.WCSuccess)
	if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Fatal("the WRITE to the new MR's key did not place its bytes")
	}
	writeOK(t, a, n, b.Addr, old, emu.WCRemAccessErr)
}

// TestQPLookupAfterDestroyAndReuse: the receive path finds a QP by its
// number through the QP it found last; after DestroyQP the packets of a
// new pair of QPs reach the new QP.
func TestQPLookupAfterDestroyAndReuse(t *testing.T) {
	l, a, b := connectedRC(t, rxetest.Options{MTU: 4200})
	const n = 8 << 10
	writeOK(t, a, n, b.Addr, b.MR.RKey(), emu.WCSuccess)
	qpnA, qpnB := a.QPNum(), b.QPNum()
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	a2, b2, err := l.Pair(qpstate.TypeRC, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if a2.QPNum() != qpnA || b2.QPNum() != qpnB {
		t.Logf("QPNs %#x, %#x after %#x, %#x: not reused", a2.QPNum(), b2.QPNum(), qpnA, qpnB)
	}
	if err := rxetest.Connect(a2, b2); err != nil {
		t.Fatal(err)
	}
	for i := range a2.Buf[:n] {
		a2.Buf[i] = byte(i*3 + 5)
	}
	writeOK(t, a2, n, b2.Addr, b2.MR.RKey(), emu.WCSuccess)
	if !bytes.Equal(b2.Buf[:n], a2.Buf[:n]) {
		t.Fatal("the WRITE between the new QPs did not place its bytes")
	}
}

// TestWriteDestinationLookedUpAgainAfterTheLock: the responder looks a
// WRITE's destination MR up once for the packets it processes under one
// hold of the device lock, and again after it: two WRITEs processed in
// one batch land at their own offsets, and after the MR loses
// IB_ACCESS_REMOTE_WRITE (a re-registration between two batches) the
// next WRITE fails with IB_WC_REM_ACCESS_ERR and places nothing.
func TestWriteDestinationLookedUpAgainAfterTheLock(t *testing.T) {
	l, a, b := syncLink(t)
	const n = 4096 // four packets at path MTU 1024
	for i := range a.Buf[:2*n] {
		a.Buf[i] = byte(i*11 + 1)
	}
	if _, err := a.PostSend([]emu.SendWR{
		{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled, SGList: []emu.SGE{a.SGE(0, n)},
			RemoteAddr: b.Addr + 3*n, RKey: b.MR.RKey()},
		{WRID: 2, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled, SGList: []emu.SGE{a.SGE(n, n)},
			RemoteAddr: b.Addr + n, RKey: b.MR.RKey()},
	}); err != nil {
		t.Fatal(err)
	}
	arrive(t, l.B, 8)
	for range 2 {
		if wc := drive(t, l); wc.Status != emu.WCSuccess {
			t.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
		}
	}
	if !bytes.Equal(b.Buf[3*n:4*n], a.Buf[:n]) || !bytes.Equal(b.Buf[n:2*n], a.Buf[n:2*n]) {
		t.Fatal("the two WRITEs of one batch were not placed at their offsets")
	}
	if err := b.MR.ReregUser(emu.MRReregAccess, nil, 0, 0, 0, ib.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	clear(b.Buf)
	if _, err := a.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr + n, RKey: b.MR.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := drive(t, l); wc.Status != emu.WCRemAccessErr {
		t.Fatalf("WRITE after the MR lost remote write: %v, want %v", wc.Status, emu.WCRemAccessErr)
	}
	if !bytes.Equal(b.Buf, make([]byte, len(b.Buf))) {
		t.Fatal("the refused WRITE placed bytes")
	}
}
