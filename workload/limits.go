package workload

import (
	"fmt"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// DefaultMaxMemory is the most buffer memory one side of a workload
// registers when its configuration leaves MaxMemory at 0: 1 GiB.
const DefaultMaxMemory = 1 << 30

// limits is what a workload side may ask of a device: its QueryDevice
// attributes, its port's max_msg_sz and the memory cap of the config.
type limits struct {
	attr   emu.DeviceAttr
	maxMsg uint64
	maxMem uint64
}

func deviceLimits(dev *emu.Device, maxMem uint64) (limits, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return limits{}, fmt.Errorf("Couldn't get port info: %w", err)
	}
	return limits{attr: dev.Query(), maxMsg: uint64(pa.MaxMsgSz), maxMem: orDefault(maxMem, DefaultMaxMemory)}, nil
}

// queues checks nqp QPs of send depth tx and receive depth rx (rx 0: no
// receive queue; srq: the receives go to one SRQ of rx entries) and their
// CQs of scqe and rcqe entries against the device, before anything is
// created: what rxe_qp_chk_cap, rxe_srq_chk_attr, rxe_cq_chk_attr and the
// QP pool would refuse, with the words the tools print when that happens.
// All products are computed in 64 bits, so no size wraps.
func (l limits) queues(nqp, tx, rx uint64, srq bool, scqe, rcqe uint64) error {
	a := l.attr
	switch {
	case nqp < 1:
		return fmt.Errorf("Couldn't create QP: %d QPs: %w", nqp, unix.EINVAL)
	case nqp > uint64(a.MaxQP):
		return fmt.Errorf("Couldn't create QP: %d QPs exceed the device's max_qp %d: %w", nqp, a.MaxQP, unix.ENOMEM)
	case tx > uint64(a.MaxQPWR):
		return fmt.Errorf("Couldn't create QP: max_send_wr %d exceeds the device's max_qp_wr %d: %w", tx, a.MaxQPWR, unix.EINVAL)
	case srq && rx > uint64(a.MaxSRQWR):
		return fmt.Errorf("Couldn't create SRQ: max_wr %d exceeds the device's max_srq_wr %d: %w", rx, a.MaxSRQWR, unix.EINVAL)
	case !srq && rx > uint64(a.MaxQPWR):
		return fmt.Errorf("Couldn't create QP: max_recv_wr %d exceeds the device's max_qp_wr %d: %w", rx, a.MaxQPWR, unix.EINVAL)
	}
	for _, n := range []uint64{scqe, rcqe} {
		if n < 1 || n > uint64(a.MaxCQE) {
			return fmt.Errorf("Couldn't create CQ: %d entries (queue depth × %d QPs) not in 1..%d, the device's max_cqe: %w",
				n, nqp, a.MaxCQE, unix.EINVAL)
		}
	}
	return nil
}

// message checks a message size against the port's max_msg_sz.
func (l limits) message(size uint64) error {
	if size > l.maxMsg {
		return fmt.Errorf("Message size %d is larger than the port's max_msg_sz %d: %w", size, l.maxMsg, unix.EINVAL)
	}
	return nil
}

// memory checks the bytes of the one buffer a side registers (what says
// how it is made) against the device's max_mr_size and the memory cap.
func (l limits) memory(n uint64, what string) error {
	switch {
	case n > l.attr.MaxMRSize:
		return fmt.Errorf("Couldn't allocate MR: %d bytes (%s) exceed the device's max_mr_size %d: %w",
			n, what, l.attr.MaxMRSize, unix.EINVAL)
	case n > l.maxMem:
		return fmt.Errorf("Couldn't allocate work buf: %d bytes (%s) exceed the limit of %d (MaxMemory): %w",
			n, what, l.maxMem, unix.ENOMEM)
	}
	return nil
}

// checkLimits refuses a perftest configuration (defaults filled in) that
// the device cannot hold, before NewPerf allocates anything: QP count,
// queue depths, CQ sizes, message size and the buffer of 2 halves per QP.
func (c *PerfConfig) checkLimits(dev *emu.Device) error {
	l, err := deviceLimits(dev, c.MaxMemory)
	if err != nil {
		return err
	}
	if c.TxDepth < 1 || c.RxDepth < 0 || c.NumQP < 1 {
		return fmt.Errorf("perf: tx depth %d, rx depth %d, %d QPs: %w", c.TxDepth, c.RxDepth, c.NumQP, unix.EINVAL)
	}
	nqp, tx, rx := uint64(c.NumQP), uint64(c.TxDepth), uint64(max(c.RxDepth, 1))
	if err := l.queues(nqp, tx, rx, c.UseSRQ, tx*nqp, rx*nqp); err != nil {
		return err
	}
	if err := l.message(c.MaxSize); err != nil {
		return err
	}
	if c.Duration == 0 && c.Iters > l.maxMem/(16*nqp) {
		// Iterations mode stamps every message at post and completion
		// (perftest's tposted and tcompleted arrays).
		return fmt.Errorf("Couldn't allocate memory for timestamps: %d iterations × %d QPs × 16 bytes exceed the limit of %d (MaxMemory): %w",
			c.Iters, nqp, l.maxMem, unix.ENOMEM)
	}
	half := max(uint64(alignUp(int(min(c.MaxSize, l.maxMsg)), cacheLineSize))+cacheLineSize, cycleBuffer)
	return l.memory(2*half*nqp, fmt.Sprintf("2 × %d per QP × %d QPs", half, nqp))
}

// checkLimits refuses a pingpong configuration (defaults filled in, nqp
// QPs) that the device cannot hold, before NewPingpong allocates anything.
func (c *PingpongConfig) checkLimits(dev *emu.Device, nqp int) error {
	l, err := deviceLimits(dev, c.MaxMemory)
	if err != nil {
		return err
	}
	srq := c.Mode == oob.PingpongSRQ
	rx := uint64(c.RxDepth)
	if err := l.queues(uint64(nqp), 1, rx, srq, rx+uint64(nqp), rx+uint64(nqp)); err != nil {
		return err
	}
	if err := l.message(uint64(c.Size)); err != nil {
		return err
	}
	return l.memory(uint64(c.Size)+emu.GRHSize, "message size + GRH")
}
