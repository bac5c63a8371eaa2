package uverbsd

import (
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu/dma"
)

// procMemory is a client process's memory as its commands reach it
// (copy_from_user, copy_to_user): process_vm_readv/writev, which honour the
// client's page protections (the access a debugger has: the daemon runs as
// the client's user, or the client allowed it with PR_SET_PTRACER).
//
// The pid is the client's as long as its pidfd says the process lives:
// each transfer first checks that, so that a pid reused after the client
// exited (its connection not yet seen to end) is never written.
//
// The client's MRs lie in mrs when it is set (MRSpace): the data path
// moves a packet with one system call and no check (see memFile).
type procMemory struct {
	pid   int
	pidfd *pidFD   // nil: no pidfd (kernel before 5.3), no check
	mrs   *memFile // nil: the MRs lie in procMemory itself
	// charge charges the pages the client's MRs pin (ChargePinned); nil:
	// nothing is charged.
	charge func(npages uint64) (func(), error)
}

// ChargePinned implements dma.Charger: the client's pinned pages are
// charged against its RLIMIT_MEMLOCK (Server.chargePinned).
func (m procMemory) ChargePinned(npages uint64) (func(), error) {
	if m.charge == nil {
		return func() {}, nil
	}
	return m.charge(npages)
}

// ChargePinned implements dma.Charger as procMemory's.
func (m *memFile) ChargePinned(npages uint64) (func(), error) {
	if m.chargePin == nil {
		return func() {}, nil
	}
	return m.chargePin(npages)
}

// MRSpace implements uverbs.MRSpacer: the space the client's MRs lie in.
func (m procMemory) MRSpace() dma.Space {
	if m.mrs == nil {
		return m
	}
	return m.mrs
}

// OnDemand implements dma.OnDemander: the client's memory as
// process_vm_readv/writev reach it, which fault its pages in and honour its
// protections, as an ODP MR's accesses do (hmm_range_fault).
func (m procMemory) OnDemand() dma.Space { return procMemory{pid: m.pid, pidfd: m.pidfd} }

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

// peerPidFD returns a pidfd of the process that connected the unix socket
// fd (SO_PEERPIDFD, Linux 6.5: the process itself, which no later reuse of
// its pid can change), else one opened by the pid SO_PEERCRED gave.
func peerPidFD(fd, pid int) *pidFD {
	if p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil && p >= 0 {
		unix.CloseOnExec(p)
		return &pidFD{fd: p}
	}
	return openPidFD(pid)
}

// maxIOV bounds one transfer (process_vm_readv moves at most MAX_RW_COUNT
// per call; this keeps each call well below).
const maxIOV = 1 << 30

// checkRange fails a transfer whose range wraps or leaves the user half of
// the address space.
func checkRange(op string, p []byte, addr uint64) error {
	if addr+uint64(len(p)) < addr || addr+uint64(len(p)) > 1<<63 {
		return fmt.Errorf("%s client memory [%#x, +%d): %w", op, addr, len(p), unix.EFAULT)
	}
	return nil
}

func opName(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

func (m procMemory) xfer(p []byte, addr uint64, write bool) (int, error) {
	op := opName(write)
	if len(p) == 0 {
		return 0, nil
	}
	if err := checkRange(op, p, addr); err != nil {
		return 0, err
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

// CheckRange implements dma.RangeChecker from the client's
// /proc/PID/maps: the MRs of a client without a memFile lie here.
func (m procMemory) CheckRange(addr, length uint64, write bool) error {
	_, err := checkPidMaps(m.pid, addr, length, write)
	if !m.pidfd.alive() {
		return fmt.Errorf("client memory of pid %d: %w: %w", m.pid, dma.ErrSpaceGone, unix.EFAULT)
	}
	return err
}

// ReadAt implements Memory.
func (m procMemory) ReadAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, false) }

// WriteAt implements Memory.
func (m procMemory) WriteAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, true) }

// memFile is a client's address space as the device reaches the pages of
// its MRs: the client's /proc/PID/mem, opened once the client allowed the
// daemon (PR_SET_PTRACER before OPEN). The open file holds the address
// space the process had then, not its pid: once that address space is gone
// (the client exited or replaced its image) a transfer moves nothing and
// fails, and a pid the kernel hands to another process later names nothing
// to it. So no liveness check precedes a transfer, and a range of any
// size moves with one pread or pwrite, where process_vm_readv/writev need
// the pidfd check beside each.
//
// Like the kernel's pinned pages of an MR (ib_umem_get), the pages are
// reached whatever protection the client gave them since (the kernel's
// FOLL_FORCE access through /proc/PID/mem); a range the client unmapped
// fails with EFAULT.
type memFile struct {
	mu     sync.RWMutex // held for reading around each transfer, for writing by close
	fd     int
	closed bool
	pid    int    // the client's while it waits for a command
	pidfd  *pidFD // the client's, for OnDemand

	// The regions the client shared (shared.go).
	smu      sync.Mutex
	regions  []*sharedRegion
	fresh    *sharedRegion // shared last, for the next command's REG_MR
	unshared bool          // the connection closed: no more shares
	// charge counts the bytes of a region about to be mapped against the
	// client's and the daemon's bounds (Server.chargeShared), uncharge
	// returns them once it is unmapped; nil: no bounds.
	charge   func(length uint64) error
	uncharge func(length uint64)
	// chargePin is procMemory's charge, for the MRs in the memFile.
	chargePin func(npages uint64) (func(), error)
	// maps is the client's /proc/PID/maps as CheckRange read it for the
	// REG_MR under way, for its Pin: one read serves both, and the check
	// and the pin see the same mappings, as ib_umem_get checks the pages
	// it pins. Pin takes it; settleShares drops what no Pin took.
	maps []mapping
}

// openMemFile opens pid's /proc/PID/mem for the client whose pidfd is
// pidfd. It returns nil where that is not possible (no /proc, another
// mount's hidepid, no pidfd to confirm the pid still named the client once
// the file was open): the caller then uses process_vm_readv/writev.
func openMemFile(pid int, pidfd *pidFD) *memFile {
	if pidfd == nil {
		return nil
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// The client lived from its connect (its pidfd) until after the open:
	// the pid named it throughout, so the file holds its address space.
	if !pidfd.alive() {
		unix.Close(fd)
		return nil
	}
	return &memFile{fd: fd, pid: pid, pidfd: pidfd}
}

// OnDemand implements dma.OnDemander: /proc/PID/mem reaches pages the
// client may not (FOLL_FORCE), so an ODP MR's accesses go through
// process_vm_readv/writev, as the client's own would (procMemory.OnDemand).
func (m *memFile) OnDemand() dma.Space { return procMemory{pid: m.pid, pidfd: m.pidfd} }

func (m *memFile) close() {
	if m == nil {
		return
	}
	m.unshare()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		unix.Close(m.fd)
	}
}

func (m *memFile) xfer(p []byte, addr uint64, write bool) (int, error) {
	op := opName(write)
	if len(p) == 0 {
		return 0, nil
	}
	if err := checkRange(op, p, addr); err != nil {
		return 0, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return 0, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: connection closed: %w: %w", op, addr, len(p), m.pid, dma.ErrSpaceGone, unix.EFAULT)
	}
	done := 0
	for done < len(p) {
		var got int
		var err error
		if write {
			got, err = unix.Pwrite(m.fd, p[done:], int64(addr)+int64(done))
		} else {
			got, err = unix.Pread(m.fd, p[done:], int64(addr)+int64(done))
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == nil && got == 0:
			// mem_rw moves nothing once the address space has no
			// users: the client exited or replaced its image.
			return done, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: %w: %w", op, addr, len(p), m.pid, dma.ErrSpaceGone, unix.EFAULT)
		case err != nil:
			// EIO: the first page is not mapped.
			return done, fmt.Errorf("%s client memory [%#x, +%d) of pid %d: %v: %w", op, addr, len(p), m.pid, err, unix.EFAULT)
		}
		done += got
	}
	return done, nil
}

// CheckRange implements dma.RangeChecker from the client's
// /proc/PID/maps: /proc/PID/mem would write even where the client may not
// (FOLL_FORCE), so this is what refuses, as ib_umem_get does, an MR the
// device could write on pages the client mapped read-only. The pid names
// the client while it waits for its REG_MR; a client gone since fails its
// MR's transfers anyway. With regions shared, the mappings read stay for
// the Pin of the same REG_MR (memFile.maps).
func (m *memFile) CheckRange(addr, length uint64, write bool) error {
	ms, err := checkPidMaps(m.pid, addr, length, write)
	if err != nil {
		return err
	}
	m.smu.Lock()
	defer m.smu.Unlock()
	m.maps = nil
	if len(m.regions) > 0 && !m.unshared {
		m.maps = ms
	}
	return nil
}

// ReadAt implements dma.Space.
func (m *memFile) ReadAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, false) }

// WriteAt implements dma.Space.
func (m *memFile) WriteAt(p []byte, addr uint64) (int, error) { return m.xfer(p, addr, true) }
