package workload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// VerifyPerf checks, when both sides of a run are in one process, that the
// last Run moved the right bytes: after WRITE the server's remote half holds
// the client's data in every slot the run used, after SEND the last message
// is in the receive buffer (both ways for send_lat, and write_lat checks
// both directions too), after READ the client's local half holds the
// server's data, and after atomics every counter of the server equals its
// initial value plus the fetch-and-adds the client posted to it (unchanged
// for compare-and-swap of 0 with 0). A bidirectional run is checked both
// ways. It first waits until every WR either side posted has completed (a
// duration run ends with WRs in flight), and over UC and UD until the
// last messages have landed.
func VerifyPerf(client, server *Perf) error {
	// A duration run's receivers stopped reposting at their end; the
	// peer's sends still in flight need receives (or they are RNR NAKed
	// for ever, rnr_retry 7), so the receivers take and repost them while
	// the senders drain.
	stop := make(chan struct{})
	errc := make(chan error, 2)
	n := 0
	for _, p := range []*Perf{client, server} {
		if p.receives() {
			n++
			peer := server
			if p == server {
				peer = client
			}
			go func() { errc <- p.keepReceiving(stop, peer) }()
		}
	}
	var err error
	for _, p := range []*Perf{client, server} {
		if p.sends() && err == nil {
			err = p.quiesce()
		}
	}
	close(stop)
	for range n {
		err = errors.Join(err, <-errc)
	}
	if err != nil {
		return err
	}
	if err := client.settle(func() error { return verifyOneWay(client, server) }); err != nil {
		return err
	}
	if client.cfg.Bidirectional {
		if err := client.settle(func() error { return verifyOneWay(server, client) }); err != nil {
			return fmt.Errorf("the other way: %w", err)
		}
	}
	return nil
}

// keepReceiving polls the receive CQ and reposts every receive it finds
// until stop is closed and, when it counts each message over RC, until it
// has as many as peer sent (or Timeout passed; the check then reports the
// shortfall): the SQD drain that closes stop waits only for the WQEs the
// requester had started, and the rest are sent after it.
func (p *Perf) keepReceiving(stop <-chan struct{}, peer *Perf) error {
	wc := make([]emu.WC, max(p.cfg.RxDepth, 1)*len(p.qps))
	var deadline time.Time
	have := func() bool {
		if !p.ChecksEachMessage() || p.cfg.QPType != qpstate.TypeRC || len(peer.sent) != len(p.rcount) {
			return true
		}
		for i := range p.rcount {
			if p.rcount[i] < peer.sent[i] {
				return false
			}
		}
		return true
	}
	for {
		n, err := p.rcq.waitOr(wc, p.cfg.Timeout, p.what("drain receive", 0, 0), stop)
		if err != nil {
			return err
		}
		for j := range wc[:n] {
			if wc[j].Status != emu.WCSuccess {
				return perfWCError(&wc[j])
			}
			i := int(wc[j].WRID)
			p.rposted[i]--
			if err := p.received(i, p.lastSize); err != nil {
				return err
			}
			if err := p.postRecv(i, 1); err != nil {
				return err
			}
		}
		if n == 0 && closed(stop) {
			if have() {
				return nil
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(p.cfg.Timeout)
			} else if time.Now().After(deadline) {
				return nil
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// settle runs check once for RC; for UC and UD, whose send completions
// come when the message leaves, not when it has landed, it retries check
// until it passes or Timeout has passed.
func (p *Perf) settle(check func() error) error {
	deadline := time.Now().Add(p.cfg.Timeout)
	for {
		err := check()
		if err == nil || p.cfg.QPType == qpstate.TypeRC || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// quiesce waits until every WR posted on the side's QPs has completed, the
// verbs way: each QP to SQD, a wait while ib_query_qp reports the drain
// (sq_draining), and back to RTS.
func (p *Perf) quiesce() error {
	for i, qp := range p.qps {
		if err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateSQD}, qpstate.AttrState); err != nil {
			return fmt.Errorf("perf: QP %d to SQD: %w", i, err)
		}
		deadline := time.Now().Add(p.cfg.Timeout)
		for {
			a, _, err := qp.Query(qpstate.AttrState)
			if err != nil {
				return fmt.Errorf("perf: query QP %d: %w", i, err)
			}
			if a.SQDraining == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("perf: QP %d still draining after %v: %w", i, p.cfg.Timeout, unix.ETIMEDOUT)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState); err != nil {
			return fmt.Errorf("perf: QP %d back to RTS: %w", i, err)
		}
	}
	return nil
}

// verifyOneWay is VerifyPerf for the WRs from posted (the client, or
// either side of a bidirectional run) to the peer to.
func verifyOneWay(from, to *Perf) error {
	size := from.lastSize
	cfg := from.cfg
	inc := alignUp(int(size), cacheLineSize)
	cycle := uint64(1)
	if cfg.Test.IsBW() && size <= cycleBuffer/2 {
		cycle = uint64(cycleBuffer / inc)
	}
	for i := range from.qps {
		sent := from.sent[i]
		if sent == 0 {
			continue
		}
		if pl := uint64(cfg.PostList); pl > 1 {
			sent = pl // every chain reuses slots 0..PostList-1
		}
		slots := int(min(cycle, sent))
		cl, cr := from.half(i, false), from.half(i, true)
		sl, sr := to.half(i, false), to.half(i, true)
		switch cfg.Test.Verb() {
		case oob.VerbWrite:
			for s := range slots {
				o := s * inc
				if !bytes.Equal(sr[o:o+int(size)], cl[o:o+int(size)]) {
					return fmt.Errorf("%s: QP %d slot %d: server memory differs from the data written: %w", cfg.Test, i, s, unix.EIO)
				}
			}
			if cfg.Test == oob.PerftestWriteLat && !bytes.Equal(cr[:size], sl[:size]) {
				return fmt.Errorf("%s: client memory differs from the server's writes: %w", cfg.Test, unix.EIO)
			}
		case oob.VerbRead:
			for s := range slots {
				o := s * inc
				if !bytes.Equal(cl[o:o+int(size)], sr[o:o+int(size)]) {
					return fmt.Errorf("%s: QP %d slot %d: data read differs from server memory: %w", cfg.Test, i, s, unix.EIO)
				}
			}
		case oob.VerbSend:
			if to.ChecksEachMessage() {
				// Every message was checked as it arrived; over RC
				// none may be missing.
				if got := to.rcount[i]; cfg.QPType == qpstate.TypeRC && got != from.sent[i] {
					return fmt.Errorf("%s: QP %d: %d messages received, %d sent: %w", cfg.Test, i, got, from.sent[i], unix.EIO)
				}
				break
			}
			o, r := int((sent-1)%cycle)*inc, to.recvOff()
			if to.srq != nil {
				// Any QP's message may land in the receive buffer of
				// any QP index: it must hold one of the messages sent.
				found := false
				for j := range from.qps {
					for s := range uint64(min(cycle, from.sent[j])) {
						o := int(s) * inc
						found = found || bytes.Equal(sr[r:r+int(size)], from.half(j, false)[o:o+int(size)])
					}
				}
				if !found {
					return fmt.Errorf("%s: receive buffer %d of the SRQ holds none of the messages sent: %w", cfg.Test, i, unix.EIO)
				}
			} else if !bytes.Equal(sr[r:r+int(size)], cl[o:o+int(size)]) {
				return fmt.Errorf("%s: QP %d: last message received differs from the one sent: %w", cfg.Test, i, unix.EIO)
			}
			if cfg.Test == oob.PerftestSendLat && !bytes.Equal(cr[r:r+int(size)], sl[:size]) {
				return fmt.Errorf("%s: client received differs from what the server sent: %w", cfg.Test, unix.EIO)
			}
		case oob.VerbAtomic:
			for s, base := range to.atomBase[i] {
				got := binary.LittleEndian.Uint64(sr[s*cacheLineSize:])
				if want := base + from.atomCount[i][s]*atomicAddValue; got != want {
					return fmt.Errorf("%s: QP %d counter %d is %#x, want %#x: %w", cfg.Test, i, s, got, want, unix.EIO)
				}
			}
		}
	}
	return nil
}
