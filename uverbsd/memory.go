package uverbsd

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu/dma"
)

// procMemory is a client process's memory, reached with
// process_vm_readv/writev (the access a debugger has: the daemon runs as
// the client's user, or the client allowed it with PR_SET_PTRACER).
//
// The pid is the client's as long as its pidfd says the process lives:
// each transfer first checks that, so that a pid reused after the client
// exited (its connection not yet seen to end) is never written.
type procMemory struct {
	pid   int
	pidfd *pidFD // nil: no pidfd (kernel before 5.3), no check
}

// pidFD is a pidfd that goes away with the connection.
type pidFD struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

// alive reports whether the process the pidfd refers to still runs.
func (p *pidFD) alive() bool {
	if p == nil {
		return true
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return !p.closed && unix.PidfdSendSignal(p.fd, 0, nil, 0) == nil
}

func (p *pidFD) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		unix.Close(p.fd)
	}
}

// openPidFD opens a pidfd for pid, or returns nil where the kernel has none.
func openPidFD(pid int) *pidFD {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	return &pidFD{fd: fd}
}

// maxIOV bounds one transfer (process_vm_readv moves at most MAX_RW_COUNT
// per call; this keeps each call well below).
const maxIOV = 1 << 30

func (m procMemory) xfer(p []byte, addr uint64, write bool) (int, error) {
	op := "read"
	if write {
		op = "write"
	}
	if len(p) == 0 {
		return 0, nil
	}
	if addr+uint64(len(p)) < addr || addr+uint64(len(p)) > 1<<63 {
		return 0, fmt.Errorf("%s client memory [%#x, +%d): %w", op, addr, len(p), unix.EFAULT)
	}
	if !m.pidfd.alive() {
		return 0, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: %w: %w", op, addr, len(p), m.pid, dma.ErrSpaceGone, unix.EFAULT)
	}
	done := 0
	for done < len(p) {
		n := min(len(p)-done, maxIOV)
		local := []unix.Iovec{{Base: &p[done]}}
		local[0].SetLen(n)
		remote := []unix.RemoteIovec{{Base: uintptr(addr) + uintptr(done), Len: n}}
		var got int
		var err error
		if write {
			got, err = unix.ProcessVMWritev(m.pid, local, remote, 0)
		} else {
			got, err = unix.ProcessVMReadv(m.pid, local, remote, 0)
		}
		if err == unix.ESRCH {
			// The process has no address space any more: it is
			// exiting (its connection not yet seen to end).
			return done, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: %w: %w", op, addr, len(p), m.pid, dma.ErrSpaceGone, unix.EFAULT)
		}
		if err != nil || got <= 0 {
			// EPERM (no access), EFAULT (unmapped): to the command
			// it is all copy_*_user failing.
			return done, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: %v: %w", op, addr, len(p), m.pid, err, unix.EFAULT)
		}
		done += got
	}
	return done, nil
}

// ReadAt implements Memory.
func (m procMemory) ReadAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, false) }

// WriteAt implements Memory.
func (m procMemory) WriteAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, true) }
