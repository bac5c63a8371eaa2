package rxe

import (
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// loopBack moves the frames of tx addressed to the device's own MAC into
// its inbox (Config.Loopback, rxe_loopback) and returns the rest, in
// order, and how many it refused (larger than the link's MTU allows, as
// the IP stack would refuse them). The work loop is woken for them unless
// a Settle caller will process them. The stream's lock held.
func (r *device) loopBack(tx [][]byte) ([][]byte, int) {
	t := r.tp
	k, looped, failed := 0, 0, 0
	for _, b := range tx {
		if len(b) < 6 || [6]byte(b[:6]) != r.mac {
			tx[k] = b
			k++
			continue
		}
		if link.CheckFrame(b, t.l.MTU()) != nil {
			t.put([][]byte{b})
			failed++
			continue
		}
		if looped == 0 {
			t.inMu.Lock()
		}
		// The device built the frame itself and it never leaves: it
		// carries no ICRC (emitIn), and none is checked (noICRC).
		t.inbox = append(t.inbox, rxFrame{b: b, noICRC: true})
		looped++
	}
	if looped > 0 {
		t.rxRead.Add(uint64(looped))
		if t.holders.Load() == 0 {
			t.inCond.Broadcast()
		}
		t.inMu.Unlock()
	}
	clear(tx[k:])
	return tx[:k], failed
}

// sealOwn computes the ICRC of the frames of tx addressed to the device's
// own MAC, which emitIn built without it for the loop back, when they go
// to the link instead (LoopbackWhile said so: a fault injector or a
// capture must see them whole). The stream's lock held.
func (r *device) sealOwn(tx [][]byte) {
	for _, b := range tx {
		if len(b) >= 6 && [6]byte(b[:6]) == r.mac {
			wire.SealICRC(b, wire.EthernetSize)
		}
	}
}

// settleRounds bounds the batches one Settle processes after its call:
// the frames processing loops back (an ACK, READ responses) are the next
// round's, and frames that keep arriving from the link do not keep the
// caller.
const settleRounds = 8

// Settle calls fn and then processes, in the calling goroutine, the frames
// the device looped back to itself meanwhile and those their processing
// loops back in turn (Config.Loopback), for a few rounds. The kernel's rxe
// does that work in the context of the process that posts (rxe_post_send
// runs the requester, rxe_loopback the receive side), so a doorbell
// returns with the peer's completion already in its queue; a daemon that
// serves processes calls it around each command, so that the work happens
// while the caller waits for the answer, and needs no other thread: a
// program that busy-polls its CQ then does not compete with the device for
// the CPU. Without Loopback, or in synchronous mode, it only calls fn.
func (d *Device) Settle(fn func()) {
	r := d.r
	t := r.tp
	if t == nil || !r.cfg.Loopback || t.sync {
		fn()
		return
	}
	t.holders.Add(1)
	fn()
	var batch []rxFrame
	for range settleRounds {
		t.procMu.Lock()
		t.inMu.Lock()
		batch, t.inbox = t.inbox, batch[:0]
		t.inMu.Unlock()
		if len(batch) > 0 {
			r.process(batch)
		}
		for i := 0; i < settleRounds && r.readsPending.Load() > 0; i++ {
			r.pumpReads()
		}
		t.procMu.Unlock()
		if len(batch) == 0 {
			break
		}
	}
	t.holders.Add(-1)
	// Frames looped back after the last round, by this caller or by
	// another while it held: the work loop takes them.
	t.inMu.Lock()
	if len(t.inbox) > 0 || r.readsPending.Load() > 0 {
		t.inCond.Broadcast()
	}
	t.inMu.Unlock()
}
