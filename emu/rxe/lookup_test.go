package rxe_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe/rxetest"
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

// TestMRLookupAfterDeregAndReuse: the responder and the requester find an
// MR by its key's index through the MR they found last; after DeregMR the
// MR registered next over the same memory is the one found (its key
// places the WRITE), and the old key fails with a remote access error.
func TestMRLookupAfterDeregAndReuse(t *testing.T) {
	l, err := rxetest.NewLink(rxetest.Options{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, b, err := l.Pair(qpstate.TypeRC, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
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
	l, err := rxetest.NewLink(rxetest.Options{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, b, err := l.Pair(qpstate.TypeRC, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
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
