package uverbsd

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/preload"
)

// watchPage is the daemon's side of a client's watch page (see package
// preload, FeatureWatchPage): one word per QP handle, set while the daemon
// will look at that QP's send ring once more before it waits for the next
// request. librxe rings a QP's doorbell after every post; where the word is
// set the client's library answers it without a system call, and a stream
// of posts costs the program nothing while the daemon works through them.
// It is the notification suppression of virtio's rings, for rxe's send
// doorbell. Only the connection's goroutine uses a watchPage.
type watchPage struct {
	mem   []byte   // the daemon's writable mapping
	words []uint32 // mem as the words, one per QP handle
	qps   []uint32 // the handles whose word is set
	// marked is qps as a set, kept here rather than read from the page:
	// the daemon trusts nothing in memory a client can map.
	marked [preload.WatchHandles / 64]uint64
}

// newWatchPage creates a page with every word clear, and returns its
// memfd for the client, which the caller closes once passed: the daemon
// keeps only its mapping. The seals let the client map it only read-only
// (F_SEAL_FUTURE_WRITE keeps the daemon's writable mapping) and never
// shrink it under the daemon's mapping.
func newWatchPage() (*watchPage, *os.File, error) {
	const size = 4 * preload.WatchHandles
	fd, err := unix.MemfdCreate("softroce-watch", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("watch page: %w", err)
	}
	file := os.NewFile(uintptr(fd), "softroce-watch")
	fail := func(err error) (*watchPage, *os.File, error) {
		file.Close()
		return nil, nil, fmt.Errorf("watch page: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		return fail(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Munmap(mem)
		return fail(err)
	}
	words := unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), preload.WatchHandles)
	return &watchPage{mem: mem, words: words}, file, nil
}

// watch sets QP handle h's word: the daemon is ringing its doorbell and
// will look at its ring again before it waits.
func (w *watchPage) watch(h uint32) {
	if w == nil || h >= preload.WatchHandles || w.marked[h/64]&(1<<(h%64)) != 0 {
		return
	}
	atomic.StoreUint32(&w.words[h], 1)
	w.marked[h/64] |= 1 << (h % 64)
	w.qps = append(w.qps, h)
}

// recheck is the daemon's last look before it waits: it clears every word
// set, then rings each of those QPs (ring returns how many WQEs it took)
// and keeps watching those that had new WQEs. It reports whether any had:
// then the daemon looks for requests and comes back here before waiting.
// The clear comes first, as a sequentially consistent store: a WQE the
// client published before it read a set word is on the ring when ring
// looks (see package preload).
func (w *watchPage) recheck(ring func(h uint32) int) bool {
	if w == nil || len(w.qps) == 0 {
		return false
	}
	w.clearWords()
	kept := w.qps[:0]
	for _, h := range w.qps {
		if ring(h) > 0 {
			atomic.StoreUint32(&w.words[h], 1)
			kept = append(kept, h)
		} else {
			w.marked[h/64] &^= 1 << (h % 64)
		}
	}
	w.qps = kept
	return len(kept) > 0
}

// takeAll clears every word and rings each QP it marked, once: the
// daemon's look before it serves a command that is not a doorbell. The
// doorbells the client skipped came before that command, and so must
// their WQEs (a MODIFY_QP to ERR flushes only what the send queue holds
// after them).
func (w *watchPage) takeAll(ring func(h uint32) int) {
	if w == nil {
		return
	}
	w.clearWords()
	for _, h := range w.qps {
		ring(h)
		w.marked[h/64] &^= 1 << (h % 64)
	}
	w.qps = w.qps[:0]
}

// close clears every word set and unmaps the page. The client's mapping
// outlives the connection: a word left set there would have its library
// answer the QP's doorbells itself, success, with no daemon to take the
// WQEs, where otherwise the doorbell fails on the ended connection.
func (w *watchPage) close() {
	if w == nil {
		return
	}
	w.clearWords()
	w.qps = w.qps[:0]
	unix.Munmap(w.mem)
}

// clearWords clears the words of the QPs watched, each store sequentially
// consistent (see recheck).
func (w *watchPage) clearWords() {
	for _, h := range w.qps {
		atomic.StoreUint32(&w.words[h], 0)
	}
}
