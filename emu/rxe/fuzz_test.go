package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/wire"
)

// FuzzReceive feeds arbitrary frames to a device with connected RC and UD
// QPs: the receive pipeline, responder and completer must never panic, and
// the RC connection must still carry a SEND afterwards.
func FuzzReceive(f *testing.F) {
	p := newPair(f, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 40, sqpsnB: 40})
	// Seeds: every kind of frame the pair exchanges.
	p.sendN(c, 3000, 4096, 0)
	src, _, mra := p.a.buf(64, 1)
	rdst, _, mrb := p.b.buf(64, 0)
	p.a.postSend(c.qa, emu.SendWR{Opcode: emu.WRRDMARead, SGList: []emu.SGE{{Addr: src, Length: 64, LKey: mra.LKey()}},
		RemoteAddr: rdst, RKey: mrb.RKey()},
		emu.SendWR{Opcode: emu.WRAtomicFetchAndAdd, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}},
			RemoteAddr: rdst, RKey: mrb.RKey(), CompareAdd: 1})
	p.settle()
	for _, pk := range append(p.a.rec.take(f), p.b.rec.take(f)...) {
		f.Add(pk.Frame())
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, n := range []*node{p.a, p.b} {
			n.r.lock()
			n.r.receive(frame)
			n.r.unlock()
		}
		for i := 0; p.a.r.Poll()+p.b.r.Poll() > 0; i++ {
			if i > 1<<16 {
				t.Fatal("the pair never settles")
			}
		}
		poll(p.a.scq)
		poll(p.b.rcq)
		poll(p.a.rcq)
		poll(p.b.scq)
		if _, err := wire.Parse(frame); err != nil {
			return
		}
	})
	_ = wire.BTHSize
}
