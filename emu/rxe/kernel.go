package rxe

import (
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/qpstate"
)

// Kernel is the Linux release whose rxe a device emulates: its device
// attributes, counters, events, qpstate policy and the behaviour fixes a
// program can observe (docs/kernels.md lists every difference, each with
// the kernel change it comes from). A release is Debian's build of it, with
// the fixes its stable tree took: 6.12 is Debian 13's 6.12.y, 6.1 Debian
// 12's 6.1.y. Config.Kernel's zero value means DefaultKernel, the newest.
type Kernel uint8

// The kernels a device can be. Each is a Debian kernel the project's
// interop peers run or Debian's registry serves: 6.1 (Debian 12), 6.12
// (Debian 13), 7.3 (trixie-backports).
const (
	Kernel7_3  Kernel = iota + 1 // Linux 7.3
	Kernel6_12                   // Linux 6.12
	Kernel6_1                    // Linux 6.1
)

// DefaultKernel is the kernel a device emulates unless told otherwise:
// the newest.
const DefaultKernel = Kernel7_3

// kernelNames are the kernels' versions, in the order of the constants.
var kernelNames = [...]string{Kernel7_3: "7.3", Kernel6_12: "6.12", Kernel6_1: "6.1"}

// Kernels returns the kernels a device can emulate, newest first.
func Kernels() []Kernel { return []Kernel{Kernel7_3, Kernel6_12, Kernel6_1} }

// IsValid reports whether k names a kernel (the zero value does not).
func (k Kernel) IsValid() bool { return k > 0 && int(k) < len(kernelNames) }

// String returns the version, "7.3", or "Kernel(N)" for an invalid one.
func (k Kernel) String() string {
	if k.IsValid() {
		return kernelNames[k]
	}
	return "Kernel(" + strconv.Itoa(int(k)) + ")"
}

// ParseKernel returns the kernel named by its version ("7.3", "6.12",
// "6.1"); EINVAL for any other.
func ParseKernel(s string) (Kernel, error) {
	for _, k := range Kernels() {
		if kernelNames[k] == s {
			return k, nil
		}
	}
	return 0, errorf(unix.EINVAL, "kernel %q: not one of 7.3, 6.12, 6.1", s)
}

// orDefault returns k, or DefaultKernel for the zero value.
func (k Kernel) orDefault() Kernel {
	if k == 0 {
		return DefaultKernel
	}
	return k
}

// atLeast reports whether k is the release major.minor or a later one.
func (k Kernel) atLeast(major, minor int) bool {
	var km, kn int
	switch k.orDefault() {
	case Kernel7_3:
		km, kn = 7, 3
	case Kernel6_12:
		km, kn = 6, 12
	case Kernel6_1:
		km, kn = 6, 1
	}
	return km > major || km == major && kn >= minor
}

// HasODP reports whether the kernel's rxe has On-Demand Paging MRs
// (IBV_ACCESS_ON_DEMAND and the odp_caps of query_device_ex): Linux 6.15
// and later ("RDMA/rxe: Allow registering MRs for On-Demand Paging" and
// the series after it).
// Before, registering an ODP MR fails with EOPNOTSUPP.
func (k Kernel) HasODP() bool { return k.atLeast(6, 15) }

// HasFlush reports whether the kernel's rxe has RDMA FLUSH and
// ATOMIC_WRITE (their device_cap_flags bits, the opcodes): Linux 6.2 and
// later ("RDMA/rxe: Enable RDMA FLUSH capability for rxe device",
// "RDMA/rxe: Enable atomic write capability for rxe device").
func (k Kernel) HasFlush() bool { return k.atLeast(6, 2) }

// QueryReportsCurState reports whether query_qp returns the QP's state
// as cur_qp_state: mainline 6.13 (commit 775e6d3c8fda, "RDMA/rxe: Set
// queue pair cur_qp_state when being queried"), which the stable trees
// took from 6.11.11 on, Debian's 6.12.y among them. Before, rxe returns
// the stored attribute, which only a modify with IB_QP_CUR_STATE sets.
func (k Kernel) QueryReportsCurState() bool { return k.atLeast(6, 12) }

// PortMaxMsgSz is the port's max_msg_sz (RXE_PORT_MAX_MSG_SZ): 2^31
// from mainline 6.14 (commit db03b70969aa, "RDMA/rxe: Fix mismatched
// max_msg_sz"), which the stable trees took in February 2025 (6.6.y and
// newer, Debian's 6.12.y among them); 0x800000 before, while the send
// and receive checks allowed 2^31 all along.
func (k Kernel) PortMaxMsgSz() uint32 {
	if k.atLeast(6, 12) {
		return 1 << 31
	}
	return 0x800000
}

// AccessErrEvent reports whether an R_Key violation at an RC responder
// raises IB_EVENT_QP_ACCESS_ERR (IBA C9-222.1.1) for a packet without
// immediate data: Linux 7.1 and later ("RDMA/rxe: Generate async error
// for r_key violations"). Before, only the NAK and the QP's error state
// tell.
func (k Kernel) AccessErrEvent() bool { return k.atLeast(7, 1) }

// HasByteCounters reports whether the port counters include sent_bytes
// and rcvd_bytes: Linux 7.2 and later.
func (k Kernel) HasByteCounters() bool { return k.atLeast(7, 2) }

// HasPMA reports whether the device answers performance management MADs
// itself (process_mad: PortCounters and PortCountersExtended, what
// perfquery and the port's sysfs "counters" group read): Linux 7.2 and
// later.
func (k Kernel) HasPMA() bool { return k.atLeast(7, 2) }

// Policy returns the kernel's modify_qp checks: qpstate.PolicyRxePre64
// before Linux 6.4, qpstate.PolicyRxe from it.
func (k Kernel) Policy() qpstate.Policy {
	if k.atLeast(6, 4) {
		return qpstate.PolicyRxe
	}
	return qpstate.PolicyRxePre64
}

// deviceCapFlags returns the kernel's device_cap_flags: 6.1's lack the
// FLUSH_GLOBAL, FLUSH_PERSISTENT and ATOMIC_WRITE bits (38, 39, 40).
func (k Kernel) deviceCapFlags() uint64 {
	if k.HasFlush() {
		return deviceCapFlags
	}
	return deviceCapFlags &^ (1<<38 | 1<<39 | 1<<40)
}
