package rdmacm

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
)

// TestRequesterGivesUp: a Connect whose context ends before the REP
// rejects with "timeout", its CA GUID in the ARI (cm_destroy_id in
// REQ_SENT); the passive side finds the request by that GUID and the
// requester's communication ID, and the consumer's late Accept fails with
// the rejection.
func TestRequesterGivesUp(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 51}, Config{Seed: 52})
	l, err := b.cm.Listen(7950)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7950, rpingParam); errc <- err }()
	req, err := l.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Connect: %v, want context.Canceled", err)
	}
	waitFor(t, "the REJ", func() bool { return b.cm.Stats().Received[mad.AttrREJ] == 1 })
	_, err = req.Accept(context.Background(), b.qp, rpingParam)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejTimeout {
		t.Fatalf("late Accept: %v, want the REJ timeout", err)
	}
	waitFor(t, "the forgotten request", func() bool { o := b.cm.objects(); return o[0] == 0 && o[1] == 0 })
	if o := a.cm.objects(); o[0] != 0 {
		t.Errorf("requester objects %v", o)
	}
}

// TestRequesterGivesUpREJ: the REJ's fields as cm_format_rej makes them in
// REQ_SENT: the requester's ID, no remote ID, message "other", reason 4,
// an 8-byte ARI holding the requester's CA GUID.
func TestRequesterGivesUpREJ(t *testing.T) {
	rejs := make(chan mad.MAD, 8)
	lb, a, _ := newPair(t, Config{Seed: 53, dropTx: func(m mad.MAD) bool {
		if m.AttributeID() == mad.AttrREJ {
			rejs <- append(mad.MAD(nil), m...)
		}
		return true
	}}, Config{Seed: 54})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7951, rpingParam); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect: %v", err)
	}
	m := <-rejs
	f := mad.REJ(m).Fields()
	if f.LocalCommID == 0 || f.RemoteCommID != 0 || f.MessageREJected != mad.MsgOther || f.Reason != mad.RejTimeout ||
		f.RejectInfoLength != 8 || binary.BigEndian.Uint64(f.ARI) != a.cm.guid {
		t.Errorf("REJ %+v", f)
	}
}

// TestStaleConnection: a REQ from a QP (CA GUID and QPN) that still has
// an established connection here is rejected "stale connection", and the
// old connection gets a DREQ (cm_match_req); the peer's DREP ends it.
func TestStaleConnection(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 55}, Config{Seed: 56})
	ca, cb := connect(t, lb, a, b, 7960, rpingParam, rpingParam)
	l, err := b.cm.Listen(7961)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := testREQ(lb, a, 0x5151, 7961)
	binary.BigEndian.PutUint32(m[56:], a.qp.QPNum()<<8|1) // the connected QP, responder resources 1
	a.cm.reply(emu.GIDFromAddr(lb.B.IP), m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*Conn{cb, ca} {
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the stale connection was not disconnected")
		}
	}
	if !errors.Is(cb.Err(), unix.ECONNRESET) {
		t.Errorf("old connection: %v, want ECONNRESET", cb.Err())
	}
	s := b.cm.Stats()
	if s.Sent[mad.AttrREJ] != 1 || s.Sent[mad.AttrDREQ] != 1 || s.Received[mad.AttrDREP] != 1 {
		t.Errorf("stats %+v", s)
	}
	select {
	case r := <-l.reqs:
		t.Errorf("the stale REQ reached the listener: %+v", r)
	default:
	}
}

// TestReconnectFromTheSameQPN: once a connection is over (the peer
// disconnected it: timewait), a REQ from the same QP number is a new
// connection, not a stale one.
func TestReconnectFromTheSameQPN(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 57}, Config{Seed: 58})
	ca, cb := connect(t, lb, a, b, 7970, rpingParam, rpingParam)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ca.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	<-cb.Done() // b's consumer does not call Disconnect: its side stays in timewait
	l, err := b.cm.Listen(7971)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := testREQ(lb, a, 0x6161, 7971)
	binary.BigEndian.PutUint32(m[56:], a.qp.QPNum()<<8|1)
	a.cm.reply(emu.GIDFromAddr(lb.B.IP), m)
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Src.Addr() != lb.A.IP {
		t.Errorf("request from %v", r.Src)
	}
	if s := b.cm.Stats(); s.Sent[mad.AttrREJ] != 0 {
		t.Errorf("the REQ was rejected: %+v", s)
	}
}
