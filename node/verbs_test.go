package node

import (
	"bytes"
	"cmp"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/qpstate"
)

// end is one side of an RC connection used by the tests: a node's PD, CQ,
// QP and a registered buffer.
type end struct {
	n    *Node
	ip   netip.Addr
	pd   *emu.PD
	cq   *emu.CQ
	qp   *emu.QP
	qpn  uint32 // the QP's number (a remote end has only this)
	addr uint64 // buffer address (also its IOVA)
	buf  []byte
	mr   *emu.MR
	// hopLimit and tclass are the GRH's hop limit (0 means 64) and
	// traffic class that connect gives the QP's path.
	hopLimit, tclass uint8
}

const bufSize = 64 << 10

const allAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead |
	ib.AccessRemoteAtomic

func newEnd(t testing.TB, n *Node, ip netip.Addr) *end {
	t.Helper()
	return newEndCQ(t, n, ip, emu.CQInitAttr{CQE: 1024})
}

// newEndCQ is newEnd with the CQ made from attr.
func newEndCQ(t testing.TB, n *Node, ip netip.Addr, attr emu.CQInitAttr) *end {
	t.Helper()
	e := &end{n: n, ip: ip}
	d := n.Device()
	var err error
	if e.pd, err = d.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(attr); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: qpstate.TypeRC,
		SQSigType: emu.SignalAllWR, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	e.qpn = e.qp.QPNum()
	e.addr, e.buf = d.Memory().Alloc(bufSize)
	if e.mr, err = e.pd.RegUserMR(e.addr, bufSize, e.addr, allAccess); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect moves e's QP RESET→INIT→RTR→RTS towards peer, resolving the
// peer's MAC first as the kernel does at modify time.
func (e *end) connect(t testing.TB, peer *end) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mac, err := e.n.Resolve(ctx, peer.ip)
	if err != nil {
		t.Fatalf("resolve %v: %v", peer.ip, err)
	}
	want := peer.n.MAC()
	if e.n.udp != nil {
		want = udp.PeerMAC[:] // the kernel routes; the MAC is a placeholder
	}
	if !bytes.Equal(mac[:], want) {
		t.Fatalf("resolve %v = %v, want %v", peer.ip, mac, want)
	}
	sgid, err := e.n.GID(e.ip)
	if err != nil {
		t.Fatalf("GID index of %v: %v", e.ip, err)
	}
	modify := func(a qpstate.Attr, m qpstate.AttrMask) {
		t.Helper()
		if err := e.qp.Modify(&a, m); err != nil {
			t.Fatalf("modify %v: %v", a.QPState, err)
		}
	}
	modify(qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: allAccess},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags)
	av := ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
		GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(peer.ip), SGIDIndex: uint8(sgid), HopLimit: cmp.Or(e.hopLimit, 64),
			TrafficClass: e.tclass}}
	av.DMAC = mac
	modify(qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, DestQPNum: peer.qpn,
		RQPSN: 0x100, MaxDestRdAtomic: 16, MinRNRTimer: 12, AHAttr: av},
		qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|
			qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer)
	modify(qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 0x100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|qpstate.AttrRNRRetry|
			qpstate.AttrMaxQPRdAtomic)
}

// connectRC connects a fresh QP on each node to the other.
func connectRC(t testing.TB, a, b *Node, aIP, bIP netip.Addr) (*end, *end) {
	t.Helper()
	ea, eb := newEnd(t, a, aIP), newEnd(t, b, bIP)
	ea.connect(t, eb)
	eb.connect(t, ea)
	return ea, eb
}

// wait polls e's CQ until it holds n completions or the deadline passes.
func (e *end) wait(t testing.TB, n int) []emu.WC {
	t.Helper()
	var got []emu.WC
	wc := make([]emu.WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		k := e.cq.Poll(wc)
		got = append(got, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d completions after 10s", e.n.Name(), len(got), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, c := range got {
		if c.Status != emu.WCSuccess {
			t.Fatalf("%s: completion %d: %v", e.n.Name(), c.WRID, c.Status)
		}
	}
	return got
}

// fill writes a pattern derived from seed into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*13) + byte(i>>8)
	}
}

// syncWith orders the test's accesses to the ends' buffers with their
// devices' goroutines, which place the data the peer sends: when what
// links two devices is the kernel (a UDP socket, a TAP), the race detector
// does not count it as synchronization. A verb on a device takes the lock
// its responder holds while it places data.
func syncWith(t testing.TB, ends ...*end) {
	t.Helper()
	for _, e := range ends {
		if _, _, err := e.qp.Query(qpstate.AttrState); err != nil {
			t.Fatal(err)
		}
	}
}

// sendRecv sends size bytes from a to b with SEND and checks them.
func sendRecv(t testing.TB, a, b *end, size int, seed byte) {
	t.Helper()
	defer syncWith(t, a, b)
	fill(a.buf[:size], seed)
	clear(b.buf[:size])
	if _, err := b.qp.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: b.addr, Length: bufSize, LKey: b.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend,
		SGList: []emu.SGE{{Addr: a.addr, Length: uint32(size), LKey: a.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, 1)
	wc := b.wait(t, 1)
	syncWith(t, a, b)
	if wc[0].Opcode != emu.WCRecv || int(wc[0].ByteLen) != size {
		t.Fatalf("receive completion %+v, want RECV of %d bytes", wc[0], size)
	}
	if !bytes.Equal(b.buf[:size], a.buf[:size]) {
		t.Fatalf("SEND of %d bytes: data differs", size)
	}
}

// write writes size bytes from a into b's buffer at off with RDMA WRITE
// and checks them.
func write(t testing.TB, a, b *end, size, off int, seed byte) {
	t.Helper()
	defer syncWith(t, a, b)
	fill(a.buf[:size], seed)
	clear(b.buf)
	if _, err := a.qp.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMAWrite,
		SGList:     []emu.SGE{{Addr: a.addr, Length: uint32(size), LKey: a.mr.LKey()}},
		RemoteAddr: b.addr + uint64(off), RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, 1)
	syncWith(t, a, b)
	if !bytes.Equal(b.buf[off:off+size], a.buf[:size]) {
		t.Fatalf("WRITE of %d bytes at %d: data differs", size, off)
	}
	if !allZero(b.buf[:off]) || !allZero(b.buf[off+size:]) {
		t.Fatalf("WRITE of %d bytes at %d: bytes outside the target changed", size, off)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
