// Package nldev answers RDMA netlink (NETLINK_RDMA) as the kernel's
// drivers/infiniband/core/netlink.c and nldev.c do for the NLDEV client:
// the requests of iproute2's rdma tool and of libibverbs' and librdmacm's
// device enumeration (device, port, sys, char device, resource and
// statistic queries), with the kernel's message framing, dumps, ACKs and
// errnos. It is a pure codec over a Source of what the device holds; the
// daemon carries its packets.
//
// Attribute and command numbers come from the installed uapi header
// <rdma/rdma_netlink.h> (zconsts_linux.go, go generate).
package nldev

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// HdrLen is the size of a netlink message header (NLMSG_HDRLEN).
const HdrLen = unix.NLMSG_HDRLEN

// GoodSize bounds the messages packed into one reply packet of a dump:
// the kernel's NLMSG_GOODSIZE on 4 KiB pages, a page less the skb's
// shared info.
const GoodSize = 4096 - 320

// Type returns the netlink message type of a client's op
// (RDMA_NL_GET_TYPE).
func Type(client, op uint16) uint16 { return client<<10 + op }

// split returns a message type's client and op (RDMA_NL_GET_CLIENT,
// RDMA_NL_GET_OP).
func split(t uint16) (client, op uint16) { return t >> 10, t & (1<<10 - 1) }

// align rounds n up to the netlink alignment (NLMSG_ALIGN, NLA_ALIGN).
func align(n int) int { return (n + 3) &^ 3 }

// Header is a netlink message header (struct nlmsghdr).
type Header struct {
	Len   uint32
	Type  uint16
	Flags uint16
	Seq   uint32
	PID   uint32
}

func putHeader(b []byte, h Header) {
	e := binary.NativeEndian
	e.PutUint32(b[0:], h.Len)
	e.PutUint16(b[4:], h.Type)
	e.PutUint16(b[6:], h.Flags)
	e.PutUint32(b[8:], h.Seq)
	e.PutUint32(b[12:], h.PID)
}

func parseHeader(b []byte) Header {
	e := binary.NativeEndian
	return Header{Len: e.Uint32(b[0:]), Type: e.Uint16(b[4:]), Flags: e.Uint16(b[6:]), Seq: e.Uint32(b[8:]), PID: e.Uint32(b[12:])}
}

// Attrs are a message's attributes by type (the last of a type wins, as
// nla_parse keeps it): each value is the attribute's payload.
type Attrs map[uint16][]byte

// parseAttrs splits b into attributes as the liberal nla_parse of
// nldev's nlmsg_parse_deprecated does: an attribute whose length is under
// its header or past the end ends the list (the kernel only warns of the
// bytes left over).
func parseAttrs(b []byte) Attrs {
	a := Attrs{}
	for len(b) >= unix.NLA_HDRLEN {
		n := int(binary.NativeEndian.Uint16(b))
		t := binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask
		if n < unix.NLA_HDRLEN || n > len(b) {
			break
		}
		a[t] = b[unix.NLA_HDRLEN:n]
		if align(n) >= len(b) {
			break
		}
		b = b[align(n):]
	}
	return a
}

// policy is an attribute's type in the kernel's nldev_policy: what
// validate_nla checks of its length.
type policy uint8

const (
	polU8 policy = iota + 1
	polU32
	polU64
	polString // NLA_NUL_STRING: NUL-terminated, at most max bytes before it
	polNested // NLA_NESTED
	polBinary // at most max bytes
)

type rule struct {
	p   policy
	max int
}

// The NLDEV attributes the kernel's policy names, with the bounds it
// checks (IB_DEVICE_NAME_MAX 64, IB_FW_VERSION_NAME_MAX 64,
// TASK_COMM_LEN 16, IFNAMSIZ 16, RDMA_NLDEV_ATTR_EMPTY_STRING 1, sizeof
// struct __kernel_sockaddr_storage 128). Attributes not listed pass
// unchecked, as in the kernel.
var policies = map[uint16]rule{
	AttrDevIndex: {polU32, 0}, AttrDevName: {polString, 63}, AttrPortIndex: {polU32, 0},
	AttrCapFlags: {polU64, 0}, AttrFWVersion: {polString, 63}, AttrNodeGUID: {polU64, 0},
	AttrSysImageGUID: {polU64, 0}, AttrSubnetPrefix: {polU64, 0}, AttrLID: {polU32, 0},
	AttrSmLID: {polU32, 0}, AttrLMC: {polU8, 0}, AttrPortState: {polU8, 0},
	AttrPortPhysState: {polU8, 0}, AttrDevNodeType: {polU8, 0},
	AttrResSummary: {polNested, 0}, AttrResSummaryEntry: {polNested, 0},
	AttrResSummaryEntryName: {polString, 16}, AttrResSummaryEntryCurr: {polU64, 0},
	AttrResQP: {polNested, 0}, AttrResQPEntry: {polNested, 0}, AttrResLQPN: {polU32, 0},
	AttrResRQPN: {polU32, 0}, AttrResRqPSN: {polU32, 0}, AttrResSqPSN: {polU32, 0},
	AttrResPathMigState: {polU8, 0}, AttrResType: {polU8, 0}, AttrResState: {polU8, 0},
	AttrResPID: {polU32, 0}, AttrResKernName: {polString, 16},
	AttrResCMID: {polNested, 0}, AttrResCMIDEntry: {polNested, 0}, AttrResPS: {polU32, 0},
	AttrResSrcAddr: {polBinary, 128}, AttrResDstAddr: {polBinary, 128},
	AttrResCQ: {polNested, 0}, AttrResCQEntry: {polNested, 0}, AttrResCQE: {polU32, 0},
	AttrResUsecnt: {polU64, 0}, AttrResPollCtx: {polU8, 0},
	AttrResMR: {polNested, 0}, AttrResMREntry: {polNested, 0}, AttrResRKey: {polU32, 0},
	AttrResLKey: {polU32, 0}, AttrResIOVA: {polU64, 0}, AttrResMRLen: {polU64, 0},
	AttrResPD: {polNested, 0}, AttrResPDEntry: {polNested, 0},
	AttrResLocalDMALKey: {polU32, 0}, AttrResUnsafeGlobalRKey: {polU32, 0},
	AttrNetdevIndex: {polU32, 0}, AttrNetdevName: {polString, 15},
	AttrDriver: {polNested, 0}, AttrDriverEntry: {polNested, 0}, AttrDriverString: {polString, 64},
	AttrDriverPrintType: {polU8, 0}, AttrDriverS32: {polU32, 0}, AttrDriverU32: {polU32, 0},
	AttrDriverS64: {polU64, 0}, AttrDriverU64: {polU64, 0},
	AttrResPDN: {polU32, 0}, AttrResCQN: {polU32, 0}, AttrResMRN: {polU32, 0},
	AttrResCMIDN: {polU32, 0}, AttrResCtxN: {polU32, 0},
	AttrLinkType: {polString, 31}, AttrSysNetnsMode: {polU8, 0}, AttrDevProtocol: {polString, 63},
	AttrChardevType: {polString, 63}, AttrChardevName: {polString, 63},
	AttrChardevABI: {polU64, 0}, AttrChardev: {polU64, 0}, AttrUverbsDriverID: {polU32, 0},
	AttrStatMode: {polU32, 0}, AttrStatRes: {polU32, 0}, AttrStatAutoModeMask: {polU32, 0},
	AttrStatCounter: {polNested, 0}, AttrStatCounterEntry: {polNested, 0},
	AttrStatCounterID: {polU32, 0}, AttrStatHWCounters: {polNested, 0},
	AttrStatHWCounterEntry: {polNested, 0}, AttrStatHWCounterEntryName: {polString, 0},
	AttrStatHWCounterEntryValue: {polU64, 0}, AttrSysCopyOnFork: {polU8, 0},
	AttrStatHWCounterIndex: {polU32, 0}, AttrStatHWCounterDynamic: {polU8, 0},
	AttrDevDIM: {polU8, 0}, AttrResRaw: {polBinary, 0},
	AttrResCtx: {polNested, 0}, AttrResCtxEntry: {polNested, 0},
	AttrResSRQ: {polNested, 0}, AttrResSRQEntry: {polNested, 0}, AttrResSRQN: {polU32, 0},
}

// validate checks the attributes against the policy as the liberal
// validate_nla does: a type past the policy is ignored, a fixed-size
// type shorter than its size is ERANGE (longer passes), a string needs a
// NUL within its bound (EINVAL), a bounded binary longer than its bound
// is ERANGE.
func validate(a Attrs) error {
	for t, v := range a {
		r, ok := policies[t]
		if !ok {
			continue
		}
		switch r.p {
		case polU8:
			if len(v) < 1 {
				return unix.ERANGE
			}
		case polU32:
			if len(v) < 4 {
				return unix.ERANGE
			}
		case polU64:
			if len(v) < 8 {
				return unix.ERANGE
			}
		case polString:
			// NLA_NUL_STRING: a NUL within the bound (and the
			// payload).
			n := len(v)
			if r.max > 0 && n > r.max+1 {
				n = r.max + 1
			}
			if n == 0 || indexNUL(v[:n]) < 0 {
				return unix.EINVAL
			}
		case polBinary:
			if r.max > 0 && len(v) > r.max {
				return unix.ERANGE
			}
		case polNested:
			if len(v) > 0 && len(v) < unix.NLA_HDRLEN {
				return unix.ERANGE
			}
		}
	}
	return nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

func (a Attrs) u32(t uint16) (uint32, bool) {
	v, ok := a[t]
	if !ok || len(v) < 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(v), true
}

func (a Attrs) str(t uint16) (string, bool) {
	v, ok := a[t]
	if !ok {
		return "", false
	}
	if i := indexNUL(v); i >= 0 {
		v = v[:i]
	}
	return string(v), true
}

// builder appends netlink messages and their attributes.
type builder struct {
	b     []byte
	start int   // offset of the open message
	nests []int // offsets of the open nests
}

func (w *builder) begin(h Header) {
	w.start = len(w.b)
	w.b = append(w.b, make([]byte, HdrLen)...)
	putHeader(w.b[w.start:], h)
}

// end sets the open message's length.
func (w *builder) end() {
	binary.NativeEndian.PutUint32(w.b[w.start:], uint32(len(w.b)-w.start))
}

func (w *builder) attr(t uint16, v []byte) {
	n := unix.NLA_HDRLEN + len(v)
	var h [unix.NLA_HDRLEN]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(n))
	binary.NativeEndian.PutUint16(h[2:], t)
	w.b = append(w.b, h[:]...)
	w.b = append(w.b, v...)
	w.b = append(w.b, make([]byte, align(n)-n)...)
}

func (w *builder) u8(t uint16, v uint8) { w.attr(t, []byte{v}) }

func (w *builder) u32(t uint16, v uint32) {
	w.attr(t, binary.NativeEndian.AppendUint32(nil, v))
}

// u64 is nla_put_u64_64bit: on x86-64 no pad attribute is needed, as
// the payload lands 8-byte aligned or the architecture does not care
// (CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS).
func (w *builder) u64(t uint16, v uint64) {
	w.attr(t, binary.NativeEndian.AppendUint64(nil, v))
}

func (w *builder) str(t uint16, s string) { w.attr(t, append([]byte(s), 0)) }

func (w *builder) nest(t uint16) {
	w.nests = append(w.nests, len(w.b))
	w.attr(t, nil) // nla_nest_start_noflag, as nldev nests
}

func (w *builder) endNest() {
	at := w.nests[len(w.nests)-1]
	w.nests = w.nests[:len(w.nests)-1]
	binary.NativeEndian.PutUint16(w.b[at:], uint16(len(w.b)-at))
}

// nlaTypeMask keeps an attribute's type without its NLA_F_NESTED and
// NLA_F_NET_BYTEORDER flags (NLA_TYPE_MASK).
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
