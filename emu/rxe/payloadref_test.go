package rxe_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/qpstate"
)

// syncLink is an rxetest.Link of two synchronous devices on a bare
// link.Pipe (MTU 4200), with an RC pair connected at path MTU 1024.
func syncLink(t *testing.T) (l *rxetest.Link, a, b *rxetest.QP) {
	t.Helper()
	return syncLinkOf(t, qpstate.TypeRC)
}

// syncLinkOf is syncLink with a pair of QPs of type typ.
func syncLinkOf(t *testing.T, typ qpstate.Type) (l *rxetest.Link, a, b *rxetest.QP) {
	t.Helper()
	l, err := rxetest.NewLink(rxetest.Options{MTU: 4200, Rxe: func(_ int, c *rxe.Config) { c.Synchronous = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if a, b, err = l.Pair(typ, 1<<16); err != nil {
		t.Fatal(err)
	}
	if err := rxetest.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	return l, a, b
}

// arrive waits until e's device has read n frames from its link (its
// reading goroutine moves them to the inbox that Poll processes).
func arrive(t *testing.T, e *rxetest.End, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Dev.Received() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s read %d frames, want %d", e.Dev.Name(), e.Dev.Received(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWritePayloadCrossesThePipeByReference: between two devices on bare
// pipe ends, an RDMA WRITE's and a SEND's packets carry their payload by
// reference, and the responder copies it straight from the source MR: the
// bytes placed are the source's when the responder processes the packets
// (here changed after the post, which verbs leave undefined), where a
// gathered frame would hold the bytes at the post. Small payloads are
// gathered into the frame. The ACKs complete both sends.
func TestWritePayloadCrossesThePipeByReference(t *testing.T) {
	l, a, b := syncLink(t)
	fill := func(buf []byte, seed byte) {
		for i := range buf {
			buf[i] = byte(i*13) + seed
		}
	}
	const n = 4096 // four packets at path MTU 1024
	fill(a.Buf[:n], 1)
	fill(a.Buf[n:n+100], 3)
	if _, err := b.PostRecv([]emu.RecvWR{{WRID: 9, SGList: []emu.SGE{b.SGE(1<<15, n)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PostSend([]emu.SendWR{
		{WRID: 1, Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()},
		{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{a.SGE(0, n)}},
		{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled, SGList: []emu.SGE{a.SGE(n, 100)},
			RemoteAddr: b.Addr + n, RKey: b.MR.RKey()},
	}); err != nil {
		t.Fatal(err)
	}
	arrive(t, l.B, 9)
	fill(a.Buf[:n+100], 2) // after the post, before the responder runs
	l.B.Dev.Poll()
	arrive(t, l.A, 1)
	l.A.Dev.Poll()
	wcs, err := rxetest.Wait(l.A.CQ, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, wc := range wcs {
		if wc.Status != emu.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	if wcs, err := rxetest.Wait(l.B.CQ, 1, time.Second); err != nil || wcs[0].Status != emu.WCSuccess || wcs[0].ByteLen != n {
		t.Fatalf("receive completion %+v, %v", wcs, err)
	}
	want := make([]byte, n+100)
	fill(want, 2)
	fill(want[n:], 3)
	if !bytes.Equal(b.Buf[:n], want[:n]) || !bytes.Equal(b.Buf[1<<15:1<<15+n], want[:n]) {
		t.Errorf("WRITE or SEND of %d bytes: not the source's bytes when the responder copied them", n)
	}
	if !bytes.Equal(b.Buf[n:n+100], want[n:n+100]) {
		t.Errorf("WRITE of 100 bytes: not the bytes gathered at the post")
	}
}

// TestWriteByReferenceAfterDeregMR: the source MR is deregistered while
// the WRITE's packets, which carry their payload by reference, wait in the
// pipe: the responder still places the bytes the packets were sent with
// (as the kernel's rxe, whose packets hold a copy) and the WRITE completes.
func TestWriteByReferenceAfterDeregMR(t *testing.T) {
	l, a, b := syncLink(t)
	const n = 8192
	for i := range a.Buf[:n] {
		a.Buf[i] = byte(i * 31)
	}
	if _, err := a.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if err := a.MR.Dereg(); err != nil {
		t.Fatal(err)
	}
	arrive(t, l.B, 8)
	l.B.Dev.Poll()
	arrive(t, l.A, 1)
	l.A.Dev.Poll()
	if wcs, err := rxetest.Wait(l.A.CQ, 1, time.Second); err != nil || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("WRITE completion %+v, %v", wcs, err)
	}
	if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Error("the WRITE's bytes were not placed")
	}
}

// drive polls both synchronous devices of l until a completion arrives on
// A's CQ, and returns it.
func drive(t *testing.T, l *rxetest.Link) emu.WC {
	t.Helper()
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		l.B.Dev.Poll()
		l.A.Dev.Poll()
		if l.A.CQ.Poll(wc) == 1 {
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return emu.WC{}
}

// TestFreedMemoryFaultsAfterCachedLookups: the devices look a user MR's
// memory up once and reuse it until a buffer of the Memory is freed: a
// WRITE from a freed source then completes with IB_WC_LOC_PROT_ERR, and
// one into a freed destination with IB_WC_REM_ACCESS_ERR, as when every
// access looked the memory up.
func TestFreedMemoryFaultsAfterCachedLookups(t *testing.T) {
	for _, tc := range []struct {
		name     string
		freeDest bool
		want     emu.WCStatus
	}{
		{"source", false, emu.WCLocProtErr},
		{"destination", true, emu.WCRemAccessErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, a, b := syncLink(t)
			write := func(id uint64) emu.WC {
				t.Helper()
				if _, err := a.PostSend([]emu.SendWR{{WRID: id, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
					SGList: []emu.SGE{a.SGE(0, 8192)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
					t.Fatal(err)
				}
				return drive(t, l)
			}
			if wc := write(1); wc.Status != emu.WCSuccess {
				t.Fatalf("first WRITE: %v", wc.Status)
			}
			e, q := l.A, a
			if tc.freeDest {
				e, q = l.B, b
			}
			if err := e.Dev.Memory().Free(q.Addr); err != nil {
				t.Fatal(err)
			}
			if wc := write(2); wc.Status != tc.want {
				t.Fatalf("WRITE after the free: %v, want %v", wc.Status, tc.want)
			}
		})
	}
}

// TestUCWriteCarriesItsBytes: a UC RDMA WRITE completes when its last
// packet is sent, so the application may change its buffer before the
// peer has placed anything: its packets carry the bytes as they were when
// sent, never a reference to the buffer.
func TestUCWriteCarriesItsBytes(t *testing.T) {
	l, a, b := syncLinkOf(t, qpstate.TypeUC)
	const n = 4096
	for i := range a.Buf[:n] {
		a.Buf[i] = byte(i * 3)
	}
	want := bytes.Clone(a.Buf[:n])
	if _, err := a.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wcs, err := rxetest.Wait(l.A.CQ, 1, time.Second); err != nil || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("UC WRITE completion %+v, %v", wcs, err)
	}
	clear(a.Buf[:n]) // the WR completed: the buffer is the application's again
	arrive(t, l.B, 4)
	l.B.Dev.Poll()
	if !bytes.Equal(b.Buf[:n], want) {
		t.Error("the UC WRITE placed the buffer's later bytes, not those it was sent with")
	}
}
