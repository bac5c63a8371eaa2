package rxe_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link/pcap"
	"github.com/softroce/softroce/wire"
)

// lockedBuffer is a bytes.Buffer safe for the capture's writer and the
// test's reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// TestFrameLeavingThePipeHasItsICRC: device A sits on a bare link.Pipe
// end, so it builds its frames without the ICRC and the pipe carries them
// marked (wire.Frame.NoICRC, link.PipeEnd.WriteNoICRC); device B reads its
// end through a pcap capture, where the frames become observable. Every
// frame in the capture, A's included, has its exact ICRC (the one
// wire.SealICRC computes), B counts no ICRC error, and the SENDs and
// WRITEs of every size arrive intact both ways. A's larger SENDs and
// WRITEs cross the pipe with their payload by reference
// (link.PipeEnd.WriteRef): the capture holds them with their payload, the
// last WRITE's packets the source's bytes. A's middle packets, whose
// headers A copies from the packet before (wire.BuildNext), cross as the
// rest: every captured frame is the frame wire.Build writes from its own
// fields, headers, IPv4 checksum and ICRC, and each device's IPv4
// identifications run on by one.
func TestFrameLeavingThePipeHasItsICRC(t *testing.T) {
	var capture lockedBuffer
	l, a, b := connectedRC(t, rxetest.Options{MTU: 4200, Rxe: func(i int, c *rxe.Config) {
		if i == 1 {
			cp, err := pcap.New(c.Link, &capture, clock.Real{})
			if err != nil {
				t.Fatal(err)
			}
			c.Link = cp
		}
	}})
	for i, size := range []int{1, 63, 1024, 4096, 5000, 1 << 16} {
		for k := range a.Buf[:size] {
			a.Buf[k] = byte(k*7 + i)
			b.Buf[k] = byte(k*5 + i)
		}
		for _, dir := range []struct{ from, to *rxetest.QP }{{a, b}, {b, a}} {
			if _, err := dir.to.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{dir.to.SGE(1<<15, 1<<15)}}}); err != nil {
				t.Fatal(err)
			}
			n := min(size, 1<<15)
			if _, err := dir.from.PostSend([]emu.SendWR{
				{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{dir.from.SGE(0, n)}},
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := rxetest.Wait(dir.from.End.CQ, 1, 5*time.Second); err != nil {
				t.Fatalf("size %d: send: %v", size, err)
			}
			if _, err := rxetest.Wait(dir.to.End.CQ, 1, 5*time.Second); err != nil {
				t.Fatalf("size %d: receive: %v", size, err)
			}
			if !bytes.Equal(dir.to.Buf[1<<15:1<<15+n], dir.from.Buf[:n]) {
				t.Fatalf("SEND of %d bytes: data differs", n)
			}
		}
		if _, err := a.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{a.SGE(0, size)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}}); err != nil {
			t.Fatal(err)
		}
		if _, err := rxetest.Wait(a.End.CQ, 1, 5*time.Second); err != nil {
			t.Fatalf("size %d: WRITE: %v", size, err)
		}
		if !bytes.Equal(b.Buf[:size], a.Buf[:size]) {
			t.Fatalf("WRITE of %d bytes: data differs", size)
		}
	}
	frames := testutil.ReadPcap(t, bytes.NewReader(capture.Bytes()))
	fromA, middles := 0, 0
	var lastWrite []byte // the payload of A's last RDMA WRITE, as captured
	lastID := map[[6]byte]uint16{}
	var fields wire.Frame
	built := make([]byte, 9000)
	for i, f := range frames {
		var p wire.Packet
		if err := p.Decode(f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		p.Fields(&fields)
		if n, err := wire.Build(built, &fields); err != nil || !bytes.Equal(built[:n], f) {
			t.Fatalf("frame %d (%v, PSN %d) is not the frame Build writes from its fields (%v):\n got % x\nwant % x",
				i, p.Opcode(), p.BTH().PSN(), err, f, built[:n])
		}
		mac := [6]byte(f[6:12])
		if id, ok := lastID[mac]; ok && p.IPID() != id+1 {
			t.Fatalf("frame %d from %x: IP identification %#x after %#x", i, mac, p.IPID(), id)
		}
		lastID[mac] = p.IPID()
		if p.Opcode() == wire.RCRDMAWriteMiddle || p.Opcode() == wire.RCSendMiddle {
			middles++
		}
		if err := p.VerifyICRC(); err != nil {
			t.Fatalf("frame %d (%v, PSN %d): %v", i, p.Opcode(), p.BTH().PSN(), err)
		}
		sealed := bytes.Clone(f)
		if err := wire.SealICRC(sealed, wire.EthernetSize); err != nil || !bytes.Equal(sealed, f) {
			t.Fatalf("frame %d: ICRC differs from a sealed copy (%v)", i, err)
		}
		if [6]byte(f[6:12]) == l.A.MAC {
			fromA++
			switch p.Opcode() {
			case wire.RCRDMAWriteFirst, wire.RCRDMAWriteOnly:
				lastWrite = append(lastWrite[:0], p.Payload()...)
			case wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast:
				lastWrite = append(lastWrite, p.Payload()...)
			}
		}
	}
	if fromA < 10 || middles < 20 {
		t.Fatalf("%d of %d captured frames came from A, %d were middle packets", fromA, len(frames), middles)
	}
	if !bytes.Equal(lastWrite, a.Buf[:1<<16]) {
		t.Errorf("the captured payload of A's last WRITE (%d bytes) is not its source's", len(lastWrite))
	}
	for _, e := range []*rxetest.End{l.A, l.B} {
		st, err := e.Dev.AllocHWPortStats(1)
		if err != nil {
			t.Fatal(err)
		}
		e.Dev.GetHWStats(st, 1)
		if n, _ := st.Counter("softroce_icrc_err"); n != 0 {
			t.Errorf("%s counted %d ICRC errors", e.Dev.Name(), n)
		}
		if n, _ := st.Counter("rcvd_pkts"); n == 0 {
			t.Errorf("%s received nothing", e.Dev.Name())
		}
	}
}
