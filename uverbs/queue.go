//go:build linux

package uverbs

import (
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// queue is one of rxe's user queues (struct rxe_queue with its
// rxe_queue_buf): a memfd holding the struct rxe_queue_buf header and the
// slots, mapped by the daemon and, through File.Mmap, by the client. The
// producer and consumer indices are in the shared header; the side the
// device owns also keeps a private copy (rxe's q->index), so a client that
// scribbles over the header cannot move the device's side.
type queue struct {
	file     *os.File
	buf      []byte // the daemon's mapping of the whole memfd
	offset   uint64 // the mmap offset in the create response (mminfo.offset)
	mapped   bool   // the client mapped it (rxe's pending mmap entry is gone)
	log2Elem uint32
	mask     uint32 // slots - 1
	index    uint32 // the device's own index: consumer of a SQ/RQ, producer of a CQ
}

var (
	qbHdr       = int(unsafe.Sizeof(RxeQueueBuf{}))
	qbProducer  = int(unsafe.Offsetof(RxeQueueBuf{}.Producer_index))
	qbConsumer  = int(unsafe.Offsetof(RxeQueueBuf{}.Consumer_index))
	qbLog2      = int(unsafe.Offsetof(RxeQueueBuf{}.Log2_elem_size))
	qbIndexMask = int(unsafe.Offsetof(RxeQueueBuf{}.Index_mask))
)

// pow2 returns the smallest power of two >= n (roundup_pow_of_two).
func pow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

// newQueue makes a queue for at least numElem entries of elemSize bytes, as
// rxe_queue_init sizes it: slots and element size rounded up to powers of
// two, one slot always free; it returns the queue and the usable depth
// (slots - 1).
func newQueue(numElem, elemSize uint32) (*queue, uint32, error) {
	slots := pow2(numElem + 1)
	esize := pow2(elemSize)
	size := qbHdr + int(slots)*int(esize)
	fd, err := unix.MemfdCreate("rxe-queue", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, errorf(unix.ENOMEM, "queue memfd: %v", err)
	}
	size = (size + 4095) &^ 4095
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, 0, errorf(unix.ENOMEM, "queue memfd: %v", err)
	}
	// The client gets this descriptor to map the ring: sealed, it cannot
	// shrink the file under the daemon's mapping (whose next access would
	// be SIGBUS, the daemon's death) or grow it.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, 0, errorf(unix.ENOMEM, "queue memfd seals: %v", err)
	}
	buf, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, 0, errorf(unix.ENOMEM, "queue mmap: %v", err)
	}
	q := &queue{file: os.NewFile(uintptr(fd), "rxe-queue"), buf: buf,
		log2Elem: uint32(bits.TrailingZeros32(esize)), mask: slots - 1}
	q.store(qbLog2, q.log2Elem)
	q.store(qbIndexMask, q.mask)
	return q, slots - 1, nil
}

func (q *queue) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.buf[off])) }

// load and store are the acquire and release accesses of rxe_queue.h
// (smp_load_acquire, smp_store_release) on a header word.
func (q *queue) load(off int) uint32     { return atomic.LoadUint32(q.word(off)) }
func (q *queue) store(off int, v uint32) { atomic.StoreUint32(q.word(off), v) }

// slot returns the bytes of slot i (masked: an index from the client never
// reaches outside the data area).
func (q *queue) slot(i uint32) []byte {
	esize := 1 << q.log2Elem
	off := qbHdr + int(i&q.mask)*esize
	return q.buf[off : off+esize : off+esize]
}

// size is the byte size of the mapping (mminfo.size).
func (q *queue) size() int { return len(q.buf) }

// consume returns the next slot the client produced, or nil when the queue
// is empty; advance releases it.
func (q *queue) consume() []byte {
	prod := q.load(qbProducer) & q.mask
	if prod == q.index {
		return nil
	}
	return q.slot(q.index)
}

// peek returns the k'th slot after the next one to consume, nil when the
// client has not produced that many.
func (q *queue) peek(k uint32) []byte {
	prod := q.load(qbProducer) & q.mask
	if (prod-q.index)&q.mask <= k {
		return nil
	}
	return q.slot(q.index + k)
}

// advance moves the device's consumer index past the slot consume
// returned and publishes it.
func (q *queue) advance() {
	q.index = (q.index + 1) & q.mask
	q.store(qbConsumer, q.index)
}

// count returns how many slots the client has produced and the device not
// consumed.
func (q *queue) count() uint32 {
	return (q.load(qbProducer) - q.index) & q.mask
}

// produce returns the slot the device writes next, or nil when the queue is
// full (the client has not consumed); publish makes it visible.
func (q *queue) produce() []byte {
	cons := q.load(qbConsumer) & q.mask
	if (q.index+1)&q.mask == cons {
		return nil
	}
	return q.slot(q.index)
}

func (q *queue) publish() {
	q.index = (q.index + 1) & q.mask
	q.store(qbProducer, q.index)
}

// close unmaps and closes the memfd; a client mapping stays valid.
func (q *queue) close() {
	if q.buf != nil {
		unix.Munmap(q.buf)
		q.buf = nil
	}
	q.file.Close()
}

// addQueue registers q for File.Mmap at the next offset and returns the
// mminfo of the create response (rxe_create_mmap_info); f.mu held.
func (f *File) addQueue(q *queue) Mminfo {
	q.offset = f.nextMmap
	f.nextMmap += uint64(q.size())
	f.mmaps[q.offset] = q
	return Mminfo{Offset: q.offset, Size: uint32(q.size())}
}

// Mmap is mmap(cmd_fd, offset, length): the memfd (and the offset within
// it) the client maps for the queue whose struct mminfo carried offset. As
// rxe_mmap does, an unknown offset, a queue already mapped or a length
// past the queue is EINVAL.
func (f *File) Mmap(offset, length uint64) (*os.File, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.mmaps[offset]
	switch {
	case f.closed || !ok:
		return nil, 0, errorf(unix.EINVAL, "mmap offset %#x: no queue", offset)
	case q.mapped:
		return nil, 0, errorf(unix.EINVAL, "mmap offset %#x: already mapped", offset)
	case length > uint64(q.size()):
		return nil, 0, errorf(unix.EINVAL, "mmap offset %#x: length %d > %d", offset, length, q.size())
	}
	q.mapped = true
	return q.file, 0, nil
}
