package uverbsd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/preload"
)

// The daemon's resources and the clients' share of them.
//
// One daemon serves every program of a user, so what one program takes
// must not be taken from the others, as on a kernel a program that
// exhausts its own limits hurts only itself. Each client (a process, by
// the pid SO_PEERCRED gives) is bounded on its own: its connections
// (Config.MaxConnsPerClient; past it an open of the device fails with
// EMFILE, as a process past RLIMIT_NOFILE), the bytes of MR pages it
// shares with the daemon (Config.MaxSharedPerClient, ENOMEM); the daemon
// bounds the sum (Config.MaxFiles, ENFILE as the kernel's file-max;
// Config.MaxShared, ENOMEM). A failed accept (the daemon's own
// descriptors exhausted after all) waits and tries again, as net/http's
// Server does, instead of ending the daemon. The pages a client's MRs pin
// are charged to its own RLIMIT_MEMLOCK, as ib_umem_get charges the
// caller's pinned_vm (chargePinned).

// fdsPerConn is what one connection costs the daemon in descriptors at
// most: its socket, its wake eventfd, the client's pidfd and its
// /proc/PID/mem.
const fdsPerConn = 4

// maxRefusing bounds the refused connections whose OPEN the daemon waits
// for at once, to answer it with the errno; the ones beyond are closed at
// once (the client's open then fails with ENXIO).
const maxRefusing = 64

// refuseWait is how long a refused connection's OPEN is waited for.
const refuseWait = 2 * time.Second

// DefaultMaxShared is Config.MaxShared's default: the bytes of the clients'
// MR pages the daemon maps at once, a quarter of the user half of the
// address space (2^47 bytes on x86-64 and arm64 with 4-level page
// tables), so that the Go runtime's heap always finds room.
const DefaultMaxShared = 1 << 45

// client is the accounting of one client process (by pid) over all its
// connections. The Server's mu guards it.
type client struct {
	pid   int
	conns int // connections accepted and not yet ended
	// shared is the bytes of the client's memfds the daemon maps.
	shared uint64
	// pinned is the pages the client's user MRs pin (its mm's
	// pinned_vm, as ib_umem_get charges it).
	pinned uint64
}

// limits are the Server's bounds, Config's with its zero values resolved.
type limits struct {
	maxConns, maxConnsPerClient   int
	maxShared, maxSharedPerClient uint64
}

// resolveLimits fills in the zero values of cfg's bounds. nofile is the
// daemon's RLIMIT_NOFILE soft limit.
func resolveLimits(cfg *Config, nofile uint64) limits {
	files := cfg.MaxFiles
	if files <= 0 {
		files = int(min(nofile/2, 1<<30))
	}
	l := limits{maxConns: max(files/fdsPerConn, 1)}
	l.maxConnsPerClient = cfg.MaxConnsPerClient
	if l.maxConnsPerClient <= 0 {
		l.maxConnsPerClient = max(l.maxConns/4, 1)
	}
	l.maxShared = cfg.MaxShared
	if l.maxShared == 0 {
		l.maxShared = DefaultMaxShared
	}
	l.maxSharedPerClient = cfg.MaxSharedPerClient
	if l.maxSharedPerClient == 0 {
		l.maxSharedPerClient = l.maxShared / 4
	}
	return l
}

// raiseFileLimit raises the process's RLIMIT_NOFILE soft limit to its hard
// limit and returns the soft limit. The Go runtime raises it at start to
// one below the hard limit (and gives the child processes, such as
// `softroce run`'s program, the limit the process started with); it is
// raised again only when something lowered it since, which gives up that
// restoring (syscall.Setrlimit).
func raiseFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	if r.Max > 0 && r.Cur < r.Max-1 {
		raised := syscall.Rlimit{Cur: r.Max, Max: r.Max}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			r.Cur = r.Max
		}
	}
	return r.Cur
}

// admit counts a new connection of pid: nil and the client's accounting
// when it is within the bounds, else EMFILE (the client holds
// maxConnsPerClient) or ENFILE (the daemon holds maxConns). s.mu held.
func (s *Server) admit(pid int) (*client, error) {
	if s.nconns >= s.lim.maxConns {
		return nil, fmt.Errorf("%d connections open in the daemon: %w", s.nconns, unix.ENFILE)
	}
	cl := s.clients[pid]
	if cl == nil {
		cl = &client{pid: pid}
		s.clients[pid] = cl
	}
	if cl.conns >= s.lim.maxConnsPerClient {
		return nil, fmt.Errorf("%d connections open: %w", cl.conns, unix.EMFILE)
	}
	cl.conns++
	s.nconns++
	return cl, nil
}

// leave ends a connection admit counted. s.mu held.
func (s *Server) leave(cl *client) {
	cl.conns--
	s.nconns--
	if cl.conns == 0 {
		delete(s.clients, cl.pid)
	}
}

// chargeShared counts length more bytes of cl's memfds mapped in the
// daemon: ENOMEM past the client's or the daemon's bound.
func (s *Server) chargeShared(cl *client, length uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case length > s.lim.maxSharedPerClient-cl.shared || cl.shared+length > s.lim.maxSharedPerClient:
		return fmt.Errorf("share %d bytes: the client maps %d of its %d: %w", length, cl.shared, s.lim.maxSharedPerClient, unix.ENOMEM)
	case length > s.lim.maxShared-s.shared || s.shared+length > s.lim.maxShared:
		return fmt.Errorf("share %d bytes: the daemon maps %d of its %d: %w", length, s.shared, s.lim.maxShared, unix.ENOMEM)
	}
	cl.shared += length
	s.shared += length
	return nil
}

// unchargeShared returns what chargeShared counted.
func (s *Server) unchargeShared(cl *client, length uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl.shared -= length
	s.shared -= length
}

// peerPid returns the pid of c's client (SO_PEERCRED).
func peerPid(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("peer pid %d: %w", cred.Pid, unix.ESRCH)
	}
	return int(cred.Pid), nil
}

// refuse answers the first frame of a connection the daemon does not
// serve with errno (an OPEN then fails with it in the client) and closes
// it. Beyond maxRefusing at once, the connection is closed at once.
func (s *Server) refuse(c *net.UnixConn, pid int, reason error) {
	s.warnPid(pid, "connection refused: %v", reason)
	s.recordRefused(preload.OpOpen, errno(reason))
	s.mu.Lock()
	if s.refusing >= maxRefusing || s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.refusing++
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			s.refusing--
			s.mu.Unlock()
		}()
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(refuseWait))
		var buf [64]byte
		oob := make([]byte, unix.CmsgSpace(4*16))
		n, oobn, _, _, err := c.ReadMsgUnix(buf[:], oob)
		closeRights(oob[:oobn])
		if err != nil || n < preload.HeaderSize {
			return
		}
		h, _, _ := preload.ParseFrame(buf[:preload.HeaderSize])
		c.SetWriteDeadline(time.Now().Add(refuseWait))
		c.WriteMsgUnix(preload.Frame(preload.Header{Op: h.Op, Ret: errno(reason)}, nil), nil, nil)
	}()
}

// acceptBackoff is the wait after the accept of a connection failed: 5 ms
// doubling to 1 s, as net/http's Server.Serve.
type acceptBackoff time.Duration

func (b *acceptBackoff) next() time.Duration {
	switch d := time.Duration(*b); {
	case d == 0:
		*b = acceptBackoff(5 * time.Millisecond)
	case d < time.Second:
		*b = acceptBackoff(min(2*d, time.Second))
	}
	return time.Duration(*b)
}

// transientAccept reports whether an accept error passes: the daemon's or
// the system's descriptors or memory exhausted, or a client gone before
// its connection was accepted.
func transientAccept(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR, unix.EAGAIN, unix.EPROTO, unix.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// warnPid tells Logf of a client's misbehaviour, naming it by pid and
// command name (/proc/PID/comm), rate-limited as pr_warn_ratelimited.
func (s *Server) warnPid(pid int, format string, args ...any) {
	s.warnings.Add(1)
	if s.cfg.Logf == nil || !s.allowWarning() {
		return
	}
	s.logf("pid %d (%s): "+format, append([]any{pid, comm(pid)}, args...)...)
}

// warnf tells Logf of something a client caused that names no client,
// rate-limited as warnPid.
func (s *Server) warnf(format string, args ...any) {
	s.warnings.Add(1)
	if s.cfg.Logf == nil || !s.allowWarning() {
		return
	}
	s.logf(format, args...)
}

// allowWarning reports whether a warning passes the rate limit, first
// saying how many the limit suppressed before it.
func (s *Server) allowWarning() bool {
	ok, missed := s.warnLimit.allow()
	if missed > 0 {
		s.logf("uverbsd: %d callbacks suppressed", missed)
	}
	return ok
}

// Warnings returns how many warnings about its clients the Server had,
// the rate limit's suppressed ones included: refused connections, frames
// and commands, failed accepts.
func (s *Server) Warnings() uint64 { return s.warnings.Load() }

// recordRefused records a frame the daemon refused with ret (a negative
// errno) as a failed verb named "daemon:" and the frame's operation
// (Config.Recorder): a connection refused is a failed "daemon:OPEN".
func (s *Server) recordRefused(op preload.Op, ret int32) {
	if s.cfg.Recorder != nil {
		s.cfg.Recorder.VerbFailed("daemon:"+op.String(), unix.Errno(-ret))
	}
}

// warnf is warnPid for cn's client.
func (cn *conn) warnf(format string, args ...any) { cn.s.warnPid(cn.pid, format, args...) }

// chargePinned charges npages pinned pages to cl, the client process pid
// (ib_umem_get's pinned_vm): past the client's RLIMIT_MEMLOCK (read from
// the process, as the kernel charges the caller's) ENOMEM unless it has
// CAP_IPC_LOCK; with a limit of 0 and no CAP_IPC_LOCK, EPERM
// (can_do_mlock).
func (s *Server) chargePinned(cl *client, pid int, npages uint64) (func(), error) {
	limit, err := memlockLimit(pid)
	if err != nil {
		return nil, fmt.Errorf("RLIMIT_MEMLOCK of pid %d: %v: %w", pid, err, unix.ENOMEM)
	}
	if err := s.charge(cl, pid, limit, npages); err != nil {
		s.warnPid(pid, "%v", err)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			cl.pinned -= npages
			s.mu.Unlock()
		})
	}, nil
}

// charge adds npages to cl.pinned within limit (bytes), as chargePinned.
func (s *Server) charge(cl *client, pid int, limit, npages uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit != unix.RLIM_INFINITY {
		lockPages := limit / pageSize
		if limit == 0 && !ipcLockCapable(pid) {
			return fmt.Errorf("REG_MR with RLIMIT_MEMLOCK 0 (ulimit -l): %w", unix.EPERM)
		}
		if (npages > lockPages || cl.pinned > lockPages-npages) && !ipcLockCapable(pid) {
			return fmt.Errorf("REG_MR of %d pages with %d pinned passes RLIMIT_MEMLOCK %d (ulimit -l; or softroce serve --no-memlock): %w",
				npages, cl.pinned, limit, unix.ENOMEM)
		}
	}
	cl.pinned += npages
	return nil
}

// pageSize is the unit of the pinned-page accounting.
const pageSize = 4096

// memlockLimit is pid's RLIMIT_MEMLOCK soft limit (prlimit, else
// /proc/PID/limits).
func memlockLimit(pid int) (uint64, error) {
	var r unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &r); err == nil {
		return r.Cur, nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(l, "Max locked memory")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		if f[0] == "unlimited" {
			return unix.RLIM_INFINITY, nil
		}
		return strconv.ParseUint(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no \"Max locked memory\" in /proc/%d/limits", pid)
}

// ipcLockCapable reports whether pid has CAP_IPC_LOCK in its effective
// set (/proc/PID/status CapEff), as capable(CAP_IPC_LOCK) asks.
func ipcLockCapable(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_IPC_LOCK) != 0
		}
	}
	return false
}
