package rxe

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// TestAsyncFaults runs two devices in their own goroutines on the real
// clock over a faulty pipe: every WRITE and SEND completes once, in order,
// with the data in place (run it with -race).
func TestAsyncFaults(t *testing.T) {
	fc := link.FaultConfig{Seed: 7, Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05}
	a, b := asyncPair(t, fc)
	la := a.r.cfg.Link.(*link.Faults)
	o := qpOpts{mtu: ib.MTU1024, timeout: 10, retry: 7, rnr: 7, minRNR: 1, rdAtomic: 4, destAtom: 4}
	qa, qb := a.newQP(qpstate.TypeRC, nil, o), b.newQP(qpstate.TypeRC, nil, o)
	a.connect(qa, b, qb.QPNum(), 0, 0, o, allAccess)
	b.connect(qb, a, qa.QPNum(), 0, 0, o, allAccess)
	const n, size = 40, 10000
	src, data, mra := a.buf(size, 3)
	var dsts [][]byte
	for i := range n {
		dst, got, mrb := b.buf(size, 0)
		dsts = append(dsts, got)
		op := emu.WRRDMAWrite
		if i%2 == 1 {
			op = emu.WRSend
			b.postRecv(qb, emu.RecvWR{WRID: uint64(i), SGList: []emu.SGE{{Addr: dst, Length: size, LKey: mrb.LKey()}}})
		}
		a.postSend(qa, emu.SendWR{WRID: uint64(i), Opcode: op, SendFlags: emu.SendSignaled,
			SGList: []emu.SGE{{Addr: src, Length: size, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()})
	}
	var wcs []emu.WC
	for deadline := time.Now().Add(30 * time.Second); len(wcs) < n && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		wcs = append(wcs, poll(a.scq)...)
	}
	if len(wcs) != n {
		t.Fatalf("%d of %d completions", len(wcs), n)
	}
	for i, w := range wcs {
		if w.WRID != uint64(i) || w.Status != emu.WCSuccess {
			t.Fatalf("completion %d: %+v", i, w)
		}
		if !bytes.Equal(dsts[i], data) {
			t.Errorf("WR %d: data differs", i)
		}
	}
	if s := la.Stats(); s.Dropped == 0 || s.Corrupted == 0 {
		t.Errorf("faults did not happen: %+v", s)
	}
}

// asyncPair is two devices in the default (asynchronous) mode on the real
// clock over a pipe, each end optionally behind faults (seeds differ).
func asyncPair(t testing.TB, faults ...link.FaultConfig) (*node, *node) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: 4200})
	mk := func(i byte, l link.Link) *node {
		if len(faults) > 0 {
			fc := faults[0]
			fc.Seed += uint64(i)
			l = link.NewFaults(l, fc)
		}
		n := &node{ip: netip.AddrFrom4([4]byte{10, 0, 0, i}), mac: [6]byte{2, 0, 0, 0, 0, i}}
		n.env = newEnvWith(t, Config{Seed: uint64(i), Link: l, Device: emu.Config{
			NetDev: emu.NetDev{Name: "eth0", MAC: net.HardwareAddr(n.mac[:]), MTU: 4200, Addrs: []netip.Addr{n.ip}}}})
		n.scq, n.rcq = n.cq(1024), n.cq(1024)
		t.Cleanup(func() { n.r.Close() })
		return n
	}
	return mk(1, ea), mk(2, eb)
}
