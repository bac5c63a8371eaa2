// Package rxetest is a kit for tests of programs that use the emulated
// verbs: two rxe devices on an in-memory link, QPs of every connected and
// datagram type with registered buffers, the INIT, RTR and RTS steps that
// bring a pair up as plain qpstate attributes and masks the test can read
// and change before applying them (the transitions are often what it
// tests), and a wait for N completions with a deadline.
//
// Nothing here hides a verb: every object is the emu object itself, every
// error is the core's or the driver's, unchanged.
package rxetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// GIDIndex is the GID index of each end's IPv4 address (index 0 is the
// MAC-derived link-local GID).
const GIDIndex = 1

// Access is what the kit's buffers and connected QPs grant: local write
// and remote read, write and atomic.
const Access = ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite | ib.AccessRemoteAtomic

// End is one device of a Link, with a PD and one CQ for both directions.
type End struct {
	Dev *rxe.Device
	IP  netip.Addr // 10.0.0.1 for A, 10.0.0.2 for B
	MAC [6]byte    // 02:00:00:00:00:01 for A, ...:02 for B
	PD  *emu.PD
	CQ  *emu.CQ
}

// Link is two rxe devices, A (rxe0) and B (rxe1), on an in-memory
// link.Pipe, each processing frames on its own goroutine on the real
// clock, each knowing the other's MAC.
type Link struct {
	A, B *End
}

// Options adjusts a Link; the zero value is rxe's defaults with a
// 4096-entry CQ per end.
type Options struct {
	// MTU is the netdev MTU of both ends; 0 means 1500.
	MTU int
	// CQE is the size of each end's CQ; 0 means 4096.
	CQE int
	// Rxe, if set, adjusts each device's configuration (Seed, Tune,
	// Quirks ...) before it is created; i is 0 for A, 1 for B.
	Rxe func(i int, c *rxe.Config)
	// Wrap, if set, gives the link device i is created on, given its end
	// of the pipe (a capture, a recorder); i is 0 for A, 1 for B.
	Wrap func(i int, l link.Link) link.Link
}

// NewLink creates the two devices, their PDs and CQs. Close removes them.
func NewLink(o Options) (*Link, error) {
	if o.CQE == 0 {
		o.CQE = 4096
	}
	ea, eb := link.Pipe()
	ends := [2]*End{}
	for i := range ends {
		ends[i] = &End{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}}
	}
	l := &Link{A: ends[0], B: ends[1]}
	for i, lk := range []link.Link{ea, eb} {
		if o.Wrap != nil {
			lk = o.Wrap(i, lk)
		}
		e, peer := ends[i], ends[1-i]
		cfg := rxe.Config{Seed: uint64(i + 1), Link: lk,
			Neighbor: emu.ResolverFunc(func(_ context.Context, ip netip.Addr) ([6]byte, error) {
				if ip == peer.IP {
					return peer.MAC, nil
				}
				return [6]byte{}, unix.EHOSTUNREACH
			}),
			Device: emu.Config{Name: fmt.Sprintf("rxe%d", i), NetDev: emu.NetDev{Name: fmt.Sprintf("veth%d", i),
				MAC: net.HardwareAddr(e.MAC[:]), MTU: o.MTU, Addrs: []netip.Addr{e.IP}}}}
		if o.Rxe != nil {
			o.Rxe(i, &cfg)
		}
		dev, err := rxe.New(cfg)
		if err != nil {
			lk.Close()
			return nil, errors.Join(err, l.Close())
		}
		e.Dev = dev
		if e.PD, err = dev.AllocPD(0); err != nil {
			return nil, errors.Join(err, l.Close())
		}
		if e.CQ, err = dev.CreateCQ(emu.CQInitAttr{CQE: o.CQE}); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	return l, nil
}

// Close removes both devices (closing the link).
func (l *Link) Close() error {
	var errs []error
	for _, e := range []*End{l.A, l.B} {
		if e != nil && e.Dev != nil {
			if err := e.Dev.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
			e.Dev = nil
		}
	}
	return errors.Join(errs...)
}

// QP is a QP in RESET with a registered buffer.
type QP struct {
	*emu.QP
	End  *End
	Buf  []byte  // the buffer, in the device's memory
	Addr uint64  // its address (and the MR's IOVA)
	MR   *emu.MR // registered with Access
	PSN  uint32  // the first PSN it sends (its peer's RQ PSN)
}

// NewQP creates a QP of type t on e (send and receive on e.CQ, 64 WRs of
// one SGE each way) and an n-byte buffer registered with Access.
func (e *End) NewQP(t qpstate.Type, n int) (*QP, error) {
	qp, err := e.PD.CreateQP(&emu.QPInitAttr{SendCQ: e.CQ, RecvCQ: e.CQ, QPType: t, PortNum: 1,
		Cap: qpstate.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		return nil, err
	}
	q := &QP{QP: qp, End: e, PSN: 0x100 + qp.QPNum()}
	q.Addr, q.Buf = e.Dev.Memory().Alloc(n)
	if q.MR, err = e.PD.RegUserMR(q.Addr, uint64(n), q.Addr, Access); err != nil {
		return nil, errors.Join(err, qp.Destroy())
	}
	return q, nil
}

// Pair creates a QP of type t with an n-byte buffer on each end, both in
// RESET: bring them up with Connect, or with Steps and Apply.
func (l *Link) Pair(t qpstate.Type, n int) (a, b *QP, err error) {
	if a, err = l.A.NewQP(t, n); err != nil {
		return nil, nil, err
	}
	if b, err = l.B.NewQP(t, n); err != nil {
		return nil, nil, errors.Join(err, a.Destroy())
	}
	return a, b, nil
}

// SGE returns the SGE for [off, off+n) of the buffer.
func (q *QP) SGE(off, n int) emu.SGE {
	return emu.SGE{Addr: q.Addr + uint64(off), Length: uint32(n), LKey: q.MR.LKey()}
}

// AV returns the address vector of the peer: its IPv4 GID from the kit's
// GID index, its MAC, hop limit 64.
func (q *QP) AV(peer *QP) ib.AHAttr {
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: peer.End.MAC,
		GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(peer.End.IP), SGIDIndex: GIDIndex, HopLimit: 64}}
}

// QKey is the Q_Key the kit gives UD and GSI QPs.
const QKey = 0x11111111

// AH creates an address handle on q's PD for sends to peer (UD).
func (q *QP) AH(peer *QP) (*emu.AH, error) {
	av := q.AV(peer)
	return q.End.PD.CreateAH(&av)
}

// Step is one modify: the attributes and the mask passed to QP.Modify.
type Step struct {
	Attr qpstate.Attr
	Mask qpstate.AttrMask
}

// Steps returns the modifies RESET->INIT->RTR->RTS that connect q to peer
// as ibv_modify_qp would be called for q's type: the mask each transition
// requires (qpstate.Masks) and the kit's values for it (port 1, P_Key
// index 0, Access, path MTU 1024, the peer's AV, QPN and PSN, timeout 14,
// 7 retries, 1 read or atomic in flight; for UD and GSI the Q_Key QKey
// and no address: a UD send names its AH, see AH). Change any of them, drop or add bits, then
// Apply.
func (q *QP) Steps(peer *QP) []Step {
	ud := q.QPType == qpstate.TypeUD || q.QPType == qpstate.TypeGSI
	init := Step{qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1},
		qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort}
	rtr := Step{qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState}
	rts := Step{qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: q.PSN}, qpstate.AttrState | qpstate.AttrSQPSN}
	if ud {
		init.Attr.QKey, init.Mask = QKey, init.Mask|qpstate.AttrQKey
		return []Step{init, rtr, rts}
	}
	init.Attr.QPAccessFlags, init.Mask = Access, init.Mask|qpstate.AttrAccessFlags
	rtr.Attr.PathMTU, rtr.Attr.AHAttr, rtr.Attr.DestQPNum, rtr.Attr.RQPSN = ib.MTU1024, q.AV(peer), peer.QPNum(), peer.PSN
	rtr.Mask |= qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN
	if q.QPType == qpstate.TypeRC {
		rtr.Attr.MaxDestRdAtomic, rtr.Attr.MinRNRTimer = 1, 12
		rtr.Mask |= qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
		rts.Attr.Timeout, rts.Attr.RetryCnt, rts.Attr.RNRRetry, rts.Attr.MaxRdAtomic = 14, 7, 7, 1
		rts.Mask |= qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic
	}
	return []Step{init, rtr, rts}
}

// Apply runs the steps in order with QP.Modify and returns the first
// error, with the step's target state added to its message (the error
// still unwraps to the core's or driver's error and its errno).
func (q *QP) Apply(steps ...Step) error {
	for _, s := range steps {
		a := s.Attr
		if err := q.Modify(&a, s.Mask); err != nil {
			return fmt.Errorf("QP %#x to %v: %w", q.QPNum(), s.Attr.QPState.Name(), err)
		}
	}
	return nil
}

// Connect brings a and b up to RTS, each towards the other, with the
// steps Steps gives.
func Connect(a, b *QP) error {
	if err := a.Apply(a.Steps(b)...); err != nil {
		return err
	}
	return b.Apply(b.Steps(a)...)
}

// Wait polls cq until n completions have arrived or timeout passed; it
// returns what it polled, and an error wrapping ETIMEDOUT when fewer than
// n came.
func Wait(cq *emu.CQ, n int, timeout time.Duration) ([]emu.WC, error) {
	wcs := make([]emu.WC, 0, n)
	buf := make([]emu.WC, n)
	deadline := time.Now().Add(timeout)
	for len(wcs) < n {
		k := cq.Poll(buf[:n-len(wcs)])
		wcs = append(wcs, buf[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			return wcs, fmt.Errorf("wait: %d of %d completions in %v: %w", len(wcs), n, timeout, unix.ETIMEDOUT)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return wcs, nil
}
