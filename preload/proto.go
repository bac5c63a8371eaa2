package preload

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The RPC between the preload library and the daemon: this file is its one
// definition; softroce_preload.c follows it (its struct frame_hdr and OP_*
// constants).
//
// Each open of /dev/infiniband/NAME is one SOCK_SEQPACKET connection to the
// daemon's socket. Every message, both ways, is one packet: a 16-byte
// header in host byte order, then Len bytes of payload.
//
//	offset 0  u32 Op   the operation (a reply repeats the request's)
//	offset 4  u32 Len  payload bytes after the header
//	offset 8  i32 Ret  reply: the result (>= 0) or a negative errno; request: 0
//	offset 12 u32 Aux  OpOpen request: Version; its reply: features; otherwise 0
//
// Operations (request payload → reply payload, descriptors with SCM_RIGHTS):
//
//   - OpOpen: the first request on a connection; payload the device node's
//     name ("uverbs0", "rdma_cm"). Reply: Ret 0 and in Aux the features
//     the daemon offers on the file (FeatureSharePages,
//     FeatureOneWayDoorbells, FeatureWatchPage), or -ENODEV for a name the
//     daemon does not serve, -EPROTO for another Version. Nothing else is
//     accepted before it succeeds. With FeatureWatchPage (uverbs0) the
//     reply passes one descriptor, the watch page: a memfd of WatchHandles
//     u32 words, sealed (the client can map it only read-only, and not
//     resize it). Word h is nonzero while the daemon will look at QP handle
//     h's send ring once more before it waits for the next request: there
//     the client may answer librxe's doorbell itself, on the conditions of
//     a one-way doorbell (below), and send nothing. The client reads the
//     word after librxe published the WQE, and the daemon clears it before
//     its last look at the ring, each behind a full memory fence: one of
//     the two sees the other's store, and no doorbell is lost. For "rdma_cm" the reply's payload is a
//     u32, the daemon's name of the file (the client puts it in
//     MIGRATE_ID's fd field in place of its descriptor number, or
//     0xffffffff for a descriptor not open, 0xfffffffe for one that is not
//     an rdma_cm file), and one descriptor is passed: an eventfd counting
//     the queued CM events, which the client returns from open() (the
//     connection stays behind it); before a GET_EVENT write the client
//     takes one count from it (waiting unless it is O_NONBLOCK), and the
//     daemon answers an empty queue with -EAGAIN.
//   - OpWrite: write(cmd_fd, buf): payload buf (at most MaxPayload). Reply:
//     Ret is write()'s result or -errno. The daemon has already written the
//     command's response into the client's memory. The reply's Aux is
//     AuxSyncDoorbells while the daemon wants every doorbell answered.
//     With WriteOneWay in the request's Aux (on a file that offers
//     FeatureOneWayDoorbells), buf is librxe's doorbell, a POST_SEND with
//     no WRs, that the client answered itself (bad_wr 0 written, write()
//     returned): the daemon rings the QP's doorbell, writes nothing and
//     sends no reply, and drops a request that is not such a doorbell. A
//     client sends one only where the kernel's answer is known: the QP's
//     last answered POST_SEND succeeded (it was at RTS or later) and no
//     MODIFY_QP or DESTROY_QP was written since, no reply since said
//     AuxSyncDoorbells, the doorbell has librxe's form (in_words the
//     write's length, one word of response room, a send WR's wqe_size, no
//     SGEs, nothing after the command: any other form gets the kernel's
//     answer from the daemon), and the response address takes the write. The payload is one u64
//     client address per descriptor passed with the reply, in order: the
//     client stores the number it received as a u32 there.
//   - OpFds: sent by the client right after an OpWrite reply that passed
//     descriptors, once it stored their numbers (and before its write()
//     returns): payload one u32 per descriptor, the numbers it received, in
//     order. Reply: Ret 0, or -EINVAL when the previous exchange passed no
//     descriptors or another count. Should it fail, the client closes the
//     descriptors and write() fails with that errno.
//   - OpMmap: mmap(cmd_fd, offset): payload u64 offset, u64 length. Reply:
//     Ret 0 or -errno; payload i64, the offset inside the one descriptor
//     passed (a memfd) that the client maps instead.
//   - OpShare: sent by a client of a uverbs file that offers
//     FeatureSharePages right before the write() of a REG_MR: payload u64
//     addr, u64 length (whole pages), and one descriptor: a memfd sealed
//     against shrinking, at least length bytes, whose offset 0 the client
//     mapped MAP_SHARED at addr in place of the pages it had there (same
//     bytes). Reply: Ret 0 when the daemon mapped it, so that the MRs the
//     next write() registers inside the range use those pages; or -errno
//     (EINVAL for a descriptor that is not such a memfd, ENOSPC when the
//     client holds too many), and the MRs go through /proc/PID/mem. A
//     region no MR pinned is dropped after the next write(); a pinned one
//     when its last MR is deregistered. An OpShare is the only request
//     that may carry a descriptor.
//   - OpIoctl: ioctl(cmd_fd, RDMA_VERBS_IOCTL, arg) on a uverbs file:
//     payload u64 arg, then struct ib_uverbs_ioctl_hdr and, when the
//     header's length is consistent and the client could read them, its
//     attributes (the header alone otherwise: the daemon answers EFAULT
//     where the kernel's copy_from_user of them would fail). Reply as
//     OpWrite's: Ret 0 or -errno (-ENOTTY on a file without the ioctl
//     ABI), the payload one u64 client address per descriptor passed (an
//     attribute's data, for a new event file), and OpFds next. The
//     daemon reads and writes the attributes' buffers in the client's
//     memory itself.
//   - OpIoctl: ioctl(fd, req, arg) on a umad file: payload u32 req, then
//     the _IOC_SIZE(req) bytes at arg (none where the client could not
//     read them: then Aux is IoctlArgUnreadable). Reply: Ret the ioctl's
//     result or -errno; payload the bytes the client stores back at arg
//     (none: nothing to store).
//   - OpRead: read(fd, buf, count) on a umad file, after the client took
//     one count from the file's eventfd: payload u32 count. Reply: Ret the
//     bytes read or -errno, payload those bytes. On an error the packet
//     stays queued and the client gives the count back.
//
// For "umadN" the OpOpen reply's Aux has FeatureEventFD and one
// descriptor is passed: an eventfd (EFD_SEMAPHORE) counting the packets
// queued for read(), which the client returns from open() as for
// "rdma_cm" (the connection stays behind it).
//
// A request the daemon cannot parse (short header, Len not the payload's
// length, an unknown Op, a payload over MaxPayload, descriptors sent to the
// daemon with another request) gets a reply with Ret -EINVAL (or -E2BIG) and the same Op, and
// the connection stays usable.

// HeaderSize is the size of a frame header.
const HeaderSize = 16

// Version is the protocol version an OpOpen request carries in Aux.
const Version = 1

// MaxPayload bounds a request's payload. uverbs commands are a few hundred
// bytes; a packet must also fit a unix socket's default send buffer
// (net.core.wmem_default, 208 KiB), so a larger write() gets EINVAL from
// the preload library without reaching the daemon.
const MaxPayload = 1 << 16

// MaxFiles bounds the descriptors passed with one reply.
const MaxFiles = 8

// MaxNameLen bounds an OpOpen device name (exclusive).
const MaxNameLen = 64

// Op is a frame's operation.
type Op uint32

// The operations.
const (
	OpOpen  Op = 1
	OpWrite Op = 2
	OpMmap  Op = 3
	OpFds   Op = 4
	OpShare Op = 5
	OpIoctl Op = 6
	OpRead  Op = 7
)

// IoctlArgUnreadable is the OpIoctl request's Aux bit saying that the
// client could not read the ioctl's argument.
const IoctlArgUnreadable = 1

// The OpOpen reply's Aux bits: what the daemon takes on the file.
const (
	FeatureSharePages      = 1 // OpShare
	FeatureOneWayDoorbells = 2 // OpWrite with WriteOneWay
	FeatureWatchPage       = 4 // the watch page passed with the reply
	FeatureEventFD         = 8 // umad: the file's eventfd passed with the reply
)

// WatchHandles is how many QP handles the watch page covers, one u32 word
// each: the page is 4 KiB.
const WatchHandles = 1024

// WriteOneWay is the OpWrite request's Aux bit of a doorbell that gets no
// reply.
const WriteOneWay = 1

// MaxOneWayRun bounds the one-way doorbells a client sends in a row: the
// next is answered, so that the client learns AuxSyncDoorbells.
const MaxOneWayRun = 64

// AuxSyncDoorbells is the OpWrite reply's Aux bit saying that every
// doorbell must be answered by the daemon (say, while a fault rule may fail
// a POST_SEND).
const AuxSyncDoorbells = 1

// String names the operation.
func (o Op) String() string {
	switch o {
	case OpOpen:
		return "OPEN"
	case OpWrite:
		return "WRITE"
	case OpMmap:
		return "MMAP"
	case OpFds:
		return "FDS"
	case OpShare:
		return "SHARE"
	case OpIoctl:
		return "IOCTL"
	case OpRead:
		return "READ"
	}
	return fmt.Sprintf("Op(%d)", uint32(o))
}

// Header is a frame header.
type Header struct {
	Op  Op
	Len uint32
	Ret int32
	Aux uint32
}

// Put writes h into b[:HeaderSize].
func (h Header) Put(b []byte) {
	e := binary.NativeEndian
	e.PutUint32(b[0:], uint32(h.Op))
	e.PutUint32(b[4:], h.Len)
	e.PutUint32(b[8:], uint32(h.Ret))
	e.PutUint32(b[12:], h.Aux)
}

// ParseFrame splits one received packet into its header and payload. It
// fails with EINVAL when the packet is shorter than a header or its Len is
// not the payload's length, and E2BIG for a payload over MaxPayload.
func ParseFrame(b []byte) (Header, []byte, error) {
	if len(b) < HeaderSize {
		return Header{}, nil, fmt.Errorf("frame of %d bytes, header is %d: %w", len(b), HeaderSize, unix.EINVAL)
	}
	e := binary.NativeEndian
	h := Header{Op: Op(e.Uint32(b[0:])), Len: e.Uint32(b[4:]), Ret: int32(e.Uint32(b[8:])), Aux: e.Uint32(b[12:])}
	p := b[HeaderSize:]
	if len(p) > MaxPayload {
		return h, nil, fmt.Errorf("%v frame payload %d bytes, limit %d: %w", h.Op, len(p), MaxPayload, unix.E2BIG)
	}
	if uint64(h.Len) != uint64(len(p)) {
		return h, nil, fmt.Errorf("%v frame says %d payload bytes, carries %d: %w", h.Op, h.Len, len(p), unix.EINVAL)
	}
	return h, p, nil
}

// Frame returns a packet of h (its Len set from payload) and payload.
func Frame(h Header, payload []byte) []byte {
	b := make([]byte, HeaderSize+len(payload))
	h.Len = uint32(len(payload))
	h.Put(b)
	copy(b[HeaderSize:], payload)
	return b
}
