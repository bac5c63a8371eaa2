package emu

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestOpenQPHandles checks the core rules of ib_open_qp / ib_close_qp on a
// domain that holds an XRC target (no emulated driver has XRC, so the
// domain is built by hand): a handle is a use of the real QP, which cannot
// be destroyed while handles are open; closing twice or closing the real
// QP is EINVAL.
func TestOpenQPHandles(t *testing.T) {
	real := &QP{qpn: 0x42, QPType: qpstate.TypeXRCTgt}
	real.real = real
	x := &XRCD{tgts: map[uint32]*QP{}}
	x.AddTarget(real)
	for _, c := range []struct {
		name string
		attr QPOpenAttr
		want unix.Errno
	}{
		{"wrong type", QPOpenAttr{QPNum: 0x42, QPType: qpstate.TypeRC}, unix.EINVAL},
		{"unknown QPN", QPOpenAttr{QPNum: 0x43, QPType: qpstate.TypeXRCTgt}, unix.EINVAL},
	} {
		if _, err := OpenQP(x, c.attr); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	h1, err := OpenQP(x, QPOpenAttr{QPNum: 0x42, QPType: qpstate.TypeXRCTgt})
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := OpenQP(x, QPOpenAttr{QPNum: 0x42, QPType: qpstate.TypeXRCTgt})
	if h1.qpn != 0x42 || real.use.n.Load() != 2 {
		t.Fatalf("handle QPN %#x, use count %d", h1.qpn, real.use.n.Load())
	}
	if err := real.Destroy(); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("destroy with open handles: %v", err)
	}
	if err := real.Close(); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("close the real QP: %v", err)
	}
	if err := h1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h1.Close(); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("close twice: %v", err)
	}
	if err := h1.Modify(&qpstate.Attr{}, 0); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("modify through a closed handle: %v", err)
	}
	if _, _, err := h1.Query(0); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("query through a closed handle: %v", err)
	}
	if _, err := h1.PostSend(nil); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("post send through a closed handle: %v", err)
	}
	if _, err := h1.PostRecv(nil); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("post recv through a closed handle: %v", err)
	}
	if err := h2.Destroy(); err != nil || real.use.n.Load() != 0 {
		t.Fatalf("destroying a handle closes it: %v, use %d", err, real.use.n.Load())
	}
}
