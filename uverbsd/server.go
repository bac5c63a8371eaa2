package uverbsd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/ucma"
	"github.com/softroce/softroce/uverbs"
)

// Config configures New.
type Config struct {
	// Device is the device served first, as uverbs0; AddDevice serves
	// more. The Server does not own them: the caller closes each after
	// the Server (or after RemoveDevice).
	Device *emu.Device
	// Dir is the daemon's private directory: it holds the socket ("sock")
	// and the sysfs tree ("sysfs"). New creates it with mode 0700 and
	// refuses one that exists with another owner or wider permissions.
	Dir string
	// Open opens the File behind each open of the device node; nil
	// means OpenUverbs.
	Open Opener
	// Logf, if set, is told of what the clients do wrong, naming each by
	// pid and command name: refused connections (over their bounds),
	// frames and commands (malformed, unknown, out of order), shares
	// refused; and of failed accepts and the daemon's own troubles. The
	// clients' are rate-limited as the kernel's pr_warn_ratelimited
	// (10 per 5 s, then "N callbacks suppressed"); Server.Warnings
	// counts them all.
	Logf func(format string, args ...any)
	// Recorder, if set, records every command a client's write() to
	// uverbs0 (OpenUverbs's File) fails, by the uverbs command's name
	// (uverbs.CommandName) and errno, as VerbFailed; and every frame the
	// daemon refuses, as "daemon:" and the frame's operation (a
	// connection refused is "daemon:OPEN" with EMFILE or ENFILE).
	Recorder emu.Recorder
	// Control are the commands served on the control socket
	// (ControlName in Dir), by name, besides the Server's own "methods"
	// (the uverbs ioctl methods called: Server.Methods) and "res" (the
	// device's resources as `rdma resource show` lists them).
	Control map[string]ControlFunc
	// Check, if set, checks what every client does with uverbs0
	// (OpenUverbs's File): softroce run --check, package check.
	Check *check.Set
	// Intercept, if set, sees every write() to uverbs0 (OpenUverbs's
	// File) before the File: a non-nil error fails the write with it (its
	// errno) without reaching the File (a fault injected on a verb). cmd
	// is the command's name (uverbs.CommandName).
	Intercept func(cmd string) error
	// Settle, if set, runs each command a client writes: it calls cmd and
	// returns once the device has done the work cmd caused on it
	// (node.Node.Settle), so that the client's write() returns after that
	// work, as the kernel's rxe_post_send runs rxe's requester in the
	// caller's context. Without it a program that busy-polls its CQ
	// competes with the device's goroutines for the CPU.
	Settle func(cmd func())
	// NoSharedPages refuses the clients' shared MR pages (OpShare): every
	// MR's data then moves through /proc/PID/mem, and the preload library
	// leaves the program's memory as it is.
	NoSharedPages bool
	// OneWayDoorbells lets the clients ring their QPs' send doorbells
	// without waiting for the daemon where the kernel's answer is known
	// (preload.WriteOneWay): a stream of posts then runs beside the
	// daemon's work instead of waiting for it at every post. Off, every
	// doorbell is answered after its work (Settle), which hands the
	// client's CPU to the daemon: a ping-pong's latency is lower that way
	// on a machine whose CPUs busy-polling programs fill
	// (docs/performance.md, "One-way doorbells").
	OneWayDoorbells bool
	// WatchPage, with OneWayDoorbells, passes each uverbs client a watch
	// page (see package preload, FeatureWatchPage): a one-way doorbell
	// marks its QP watched while the daemon works through the QP's WQEs,
	// and the client's library skips the doorbells of its posts
	// meanwhile, the daemon taking their WQEs on its last look before it
	// waits. A stream of posts then costs the program no system call
	// while the daemon is busy. Answered doorbells mark nothing (their
	// reply hands the client the CPU), so without OneWayDoorbells the
	// page stays clear.
	WatchPage bool
	// NoRDMACM leaves /dev/infiniband/rdma_cm unserved. Otherwise the
	// Server runs a Communication Manager (package cma) on the device's
	// QP1 and serves its IDs to librdmacm programs (package ucma).
	NoRDMACM bool
	// Groups, if set, is the host's IP multicast membership on the
	// device's link: rdma_join_multicast of an IPv4 group joins it there
	// (IGMP), as on the kernel.
	Groups cma.GroupMembership
	// MaxFiles is the descriptors the clients' connections may hold in
	// the daemon (fdsPerConn each); a connection past it is refused, its
	// open failing with ENFILE. Zero means half the daemon's
	// RLIMIT_NOFILE soft limit, which New raises to the hard limit; the
	// other half is for the objects' files (queues, event files).
	MaxFiles int
	// MaxConnsPerClient is the connections one client process (by pid)
	// may hold; its open past it fails with EMFILE, as a process's past
	// RLIMIT_NOFILE. Zero means a quarter of what MaxFiles allows.
	MaxConnsPerClient int
	// MaxShared is the bytes of the clients' shared MR pages (OpShare) the
	// daemon maps at once, an address-space bound, not a memory one (the
	// pages are the clients' and may be sparse); a share past it fails
	// with ENOMEM. Zero means DefaultMaxShared.
	MaxShared uint64
	// MaxSharedPerClient is MaxShared's bound for one client process;
	// zero means a quarter of MaxShared.
	MaxSharedPerClient uint64
	// NoMemlock pins the clients' MR pages without charging them to the
	// client's RLIMIT_MEMLOCK, as if every client had CAP_IPC_LOCK. By
	// default a REG_MR charges its pages as ib_umem_get does (ENOMEM past
	// the limit).
	NoMemlock bool
	// PublishLater leaves the sysfs tree under its temporary name when New
	// returns, until Publish: the caller finishes setting the device up
	// first. Otherwise New publishes it, once the socket listens.
	PublishLater bool
	// Links, if set, creates and deletes devices on request, as the
	// kernel's RDMA netlink NEWLINK and DELLINK (`rdma link add NAME type
	// rxe netdev DEV`, `rdma link delete NAME`): it builds the device and
	// serves it with AddDevice, or removes it with RemoveDevice.
	Links Links
	// HoldLock keeps the directory's lock after Close, until Unlock: the
	// caller's own end (a profile written, the device closed) is done
	// before the name is free, so that whoever waits for the daemon's end
	// (softroce stop) sees all of it. Otherwise Close releases it.
	HoldLock bool
}

// MaxPollingConns is how many connections at most wait for their
// client's frames in poll(2), each holding an OS thread while it waits
// (a doorbell then wakes the thread that serves it); the connections
// beyond wait in Go's network poller, a little slower and holding no
// thread.
const MaxPollingConns = 256

// MaxWatchPages is how many connections at most have a watch page
// (Config.WatchPage) at once; the opens beyond are served without one.
// Each page is a mapping in the daemon: a client that opens the device
// tens of thousands of times must not exhaust the daemon's mappings
// (vm.max_map_count), which the Go runtime needs for its heap.
const MaxWatchPages = 1024

// Server serves devices on a unix socket: Config.Device and those
// AddDevice adds, each as its uverbsN in one sysfs tree, and one rdma_cm
// over all of them. It is safe for concurrent use.
type Server struct {
	cfg   Config
	ln    *net.UnixListener
	ctl   *net.UnixListener // the control socket (nil: no Control)
	sys   *sysfs            // the first device's entries; its publish publishes the tree
	gids  chan struct{}     // a GID change to write to the sysfs tree
	ports chan struct{}     // a port state change to write to the sysfs tree

	lock       *os.File // the directory's lock file, its lock held while serving (lockFile)
	unlockOnce sync.Once
	unlockErr  error

	cm   *cma.CM       // the device's CM (nil: rdma_cm not served)
	ucma *ucma.Service // the rdma_cm device over it

	mu    sync.Mutex
	conns map[*net.UnixConn]int // each connection's wake eventfd (-1: none)
	// polling counts the connections that wait in poll(2) (a wake
	// eventfd each), at most MaxPollingConns.
	polling int
	// watching counts the connections with a watch page, at most
	// MaxWatchPages.
	watching int
	opened   int            // connections with an open File
	files    map[*conn]File // their Files
	devs     []*served      // the devices served, Config.Device first
	removing bool           // Remove has begun: nothing more is accepted
	closed   bool

	lim      limits
	clients  map[int]*client // by pid
	nconns   int             // connections served (admit)
	refusing int             // refused connections waiting for their OPEN
	shared   uint64          // bytes of shared regions mapped

	warnLimit ratelimit     // the warnings' rate (warnPid)
	warnings  atomic.Uint64 // warnings, suppressed ones too
	wg        sync.WaitGroup
	done      chan struct{}

	// syncDoorbells: every doorbell must be answered (SetSyncDoorbells).
	syncDoorbells atomic.Bool
	// doorbells and watched count for DoorbellStats.
	doorbells, watched atomic.Uint64
	// methods counts the uverbs ioctl methods (Methods).
	methods methodLog
}

// DoorbellStats are the Server's doorbell counts over its life.
type DoorbellStats struct {
	// Doorbells counts the doorbells the clients sent: librxe's POST_SEND
	// with no WRs, answered or one-way.
	Doorbells uint64
	// Watched counts the WQEs the daemon took on its last look at a
	// watched ring before waiting (Config.WatchPage): posts whose
	// doorbell the client skipped, or whose doorbell, still on its way,
	// then finds them taken.
	Watched uint64
}

// DoorbellStats returns the Server's doorbell counts.
func (s *Server) DoorbellStats() DoorbellStats {
	return DoorbellStats{Doorbells: s.doorbells.Load(), Watched: s.watched.Load()}
}

// SetSyncDoorbells tells the clients, in every reply to a write from now
// on, whether the daemon must answer every doorbell (preload.AuxSyncDoorbells):
// set while something may fail a POST_SEND (a verbs fault rule), which a
// one-way doorbell would get no errno for. A client streaming one-way
// doorbells learns it at its next answered command, at most
// preload.MaxOneWayRun doorbells later.
func (s *Server) SetSyncDoorbells(sync bool) { s.syncDoorbells.Store(sync) }

// doorbeller is a File that rings a QP's send doorbell with no response
// (uverbs.File.Doorbell).
type doorbeller interface {
	Doorbell(handle uint32) (took int, err error)
}

// doorbell serves a one-way doorbell (preload.WriteOneWay): librxe's
// POST_SEND with no WRs, which the client answered itself. Anything else
// is dropped; so is a doorbell the Intercept fails (its WRs stay on the
// ring for the next doorbell), and one the File refuses: the client sends
// one only where the kernel's answer is success.
func (cn *conn) doorbell(p []byte) {
	db, ok := cn.file.(doorbeller)
	handle, null := uverbs.NullPostSend(p)
	if !ok || !null || !cn.s.cfg.OneWayDoorbells {
		cn.warnf("one-way write that is no doorbell dropped")
		return
	}
	cn.s.doorbells.Add(1)
	cfg := &cn.s.cfg
	var err error
	if cfg.Intercept != nil {
		err = cfg.Intercept(uverbs.CommandName(p))
	}
	if err == nil {
		cn.watchRing(handle)
		_, err = cn.ring(db, handle)
	}
	if err != nil {
		cn.warnf("one-way doorbell of QP handle %d: %v", handle, err)
		if cfg.Recorder != nil {
			cfg.Recorder.VerbFailed(uverbs.CommandName(p), unix.Errno(-errno(err)))
		}
	}
}

// ring rings QP handle's doorbell (through the Settle), returning how
// many WQEs it took.
func (cn *conn) ring(db doorbeller, handle uint32) (took int, err error) {
	if settle := cn.settle(); settle != nil {
		settle(func() { took, err = db.Doorbell(handle) })
	} else {
		took, err = db.Doorbell(handle)
	}
	return took, err
}

// watchRing marks QP handle watched as the daemon rings its doorbell,
// unless the daemon wants every doorbell answered: the client may skip the
// doorbells of the posts that come while the daemon works, which its
// last look takes (recheck).
func (cn *conn) watchRing(handle uint32) {
	if !cn.s.syncDoorbells.Load() {
		cn.watch.watch(handle)
	}
}

// recheck is the connection's last look at the send rings it watches
// before it waits for a frame (watchPage.recheck): true when it found new
// WQEs there.
func (cn *conn) recheck() bool {
	if cn.watch == nil {
		return false
	}
	if cn.s.syncDoorbells.Load() {
		cn.watch.takeAll(cn.takeWatched)
		return false
	}
	return cn.watch.recheck(cn.takeWatched)
}

// takeWatched rings watched QP handle h for the doorbells the client
// skipped, returning how many WQEs that took.
func (cn *conn) takeWatched(h uint32) int {
	took, err := cn.ring(cn.file.(doorbeller), h)
	if err != nil {
		return 0
	}
	cn.s.watched.Add(uint64(took))
	return took
}

// SocketName and SysfsName are the names of the socket and the sysfs tree
// in the Server's directory.
const (
	SocketName = "sock"
	SysfsName  = "sysfs"
	lockName   = "lock"
)

// PrivateDir creates dir (and its parents) and checks that it belongs to
// the caller's effective user with mode 0700: no other user may reach the
// socket or change the tree. A directory that exists with another owner,
// with wider permissions or as a symbolic link is refused (EPERM).
func PrivateDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory: %w", dir, unix.EPERM)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not %d: %w", dir, st.Uid, os.Geteuid(), unix.EPERM)
	}
	if st.Mode&0o777 != 0o700 {
		return fmt.Errorf("%s has mode %#o, want 0700: %w", dir, st.Mode&0o777, unix.EPERM)
	}
	return nil
}

// New prepares the directory, writes the sysfs tree and listens on the
// socket; Serve then accepts clients. A socket another daemon still serves
// is EADDRINUSE; a stale one (nobody listening) is replaced, with the tree
// and the temporary files its daemon left.
//
// The device is visible (the tree under its name SysfsName, which
// libibverbs lists) only once it can be opened: the tree is built under a
// temporary name and renamed into place after the socket listens (by New,
// or by Publish with Config.PublishLater), as the kernel's
// ib_register_device makes the device visible only once it is set up.
func New(cfg Config) (*Server, error) {
	if cfg.Device == nil || cfg.Dir == "" {
		return nil, fmt.Errorf("uverbsd: Device and Dir are required: %w", unix.EINVAL)
	}
	if err := PrivateDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("uverbsd: %w", err)
	}
	sock := filepath.Join(cfg.Dir, SocketName)
	// The lock is held for the daemon's lifetime: whoever holds it owns
	// the socket, so a stale socket (its daemon gone) is replaced and a
	// live one never is.
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uverbsd: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			who := "another daemon"
			if pid := lockPID(cfg.Dir); pid > 0 {
				who = fmt.Sprintf("another daemon (pid %d)", pid)
			}
			return nil, fmt.Errorf("uverbsd: %s: %s serves it: %w", sock, who, unix.EADDRINUSE)
		}
		return nil, fmt.Errorf("uverbsd: lock %s: %w", cfg.Dir, err)
	}
	fail := func(err error) (*Server, error) {
		lock.Close()
		return nil, fmt.Errorf("uverbsd: %w", err)
	}
	// The holder's pid, for softroce stop and for the error above.
	if err := lock.Truncate(0); err != nil {
		return fail(err)
	}
	if _, err := lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fail(err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	// The stale tree goes first (renamed away: a reader sees all of it
	// or none), then what a daemon killed while starting or stopping left.
	if err := removeTree(filepath.Join(cfg.Dir, SysfsName)); err != nil {
		return fail(err)
	}
	if stale, err := filepath.Glob(filepath.Join(cfg.Dir, "."+SysfsName+".*")); err == nil {
		for _, p := range stale {
			if err := os.RemoveAll(p); err != nil {
				return fail(err)
			}
		}
	}
	tmpRoot := filepath.Join(cfg.Dir, "."+SysfsName+".new")
	s := &Server{cfg: cfg, sys: &sysfs{root: tmpRoot, dev: cfg.Device, node: UverbsNode}, gids: make(chan struct{}, 1), ports: make(chan struct{}, 1),
		conns: map[*net.UnixConn]int{}, files: map[*conn]File{}, done: make(chan struct{}), lock: lock,
		lim: resolveLimits(&cfg, raiseFileLimit()), clients: map[int]*client{},
		warnLimit: ratelimit{interval: warnInterval, burst: warnBurst}}
	s.cfg.Control = map[string]ControlFunc{"res": s.res, "methods": s.methodsControl}
	for name, fn := range cfg.Control {
		s.cfg.Control[name] = fn
	}
	if s.cfg.Open == nil {
		s.cfg.Open = OpenUverbs
	}
	if err := s.sys.write(); err != nil {
		os.RemoveAll(tmpRoot)
		return fail(err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		os.RemoveAll(tmpRoot)
		return fail(err)
	}
	ln.SetUnlinkOnClose(true)
	s.ln = ln
	if err := s.listenControl(); err != nil {
		ln.Close()
		os.RemoveAll(tmpRoot)
		return fail(err)
	}
	first := &served{dev: cfg.Device, sys: s.sys, settle: cfg.Settle}
	if !cfg.NoRDMACM {
		if cm, err := cma.New(cma.Config{Dev: cfg.Device, Seed: cfg.Device.Query().NodeGUID, Groups: cfg.Groups}); err != nil {
			s.logf("rdma_cm not served: %v", err)
		} else {
			s.cm, s.ucma = cm, ucma.NewService(cm, cfg.Device.Query().NodeGUID)
			first.cm = cm
		}
	}
	s.devs = []*served{first}
	s.watchEvents(cfg.Device)
	s.refreshCounters()
	s.wg.Add(1)
	go s.refreshLoop()
	if !cfg.PublishLater {
		if err := s.Publish(); err != nil {
			s.Close()
			return nil, fmt.Errorf("uverbsd: %w", err)
		}
	}
	return s, nil
}

// Publish makes the device visible: the sysfs tree, built under a
// temporary name, is renamed to SysfsPath. Programs that list it can then
// open it (the socket listens; connections wait in its backlog until
// Serve accepts them). Publishing again does nothing.
func (s *Server) Publish() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("publish: %w", net.ErrClosed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	others := make([]*sysfs, 0, len(s.devs))
	for _, d := range s.devs[1:] {
		others = append(others, d.sys)
	}
	return s.sys.publish(s.SysfsPath(), others)
}

// refreshLoop rewrites the GID files after each GID change of the device,
// as the kernel's sysfs shows the GID cache, the ports' state files
// after each port event, and the counter files every CounterRefresh.
func (s *Server) refreshLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(CounterRefresh)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.gids:
			for _, d := range s.served() {
				if err := d.sys.refreshGIDs(); err != nil {
					s.logf("sysfs: %v", err)
				}
			}
		case <-s.ports:
			for _, d := range s.served() {
				if err := d.sys.refreshPorts(); err != nil {
					s.logf("sysfs: %v", err)
				}
			}
		case <-tick.C:
			s.refreshCounters()
		}
	}
}

// refreshCounters writes the CM's counters (zero where no CM runs, as a
// kernel's port whose CM saw nothing) and the device's.
func (s *Server) refreshCounters() {
	for _, d := range s.served() {
		var c cma.CMCounters
		if d.cm != nil {
			c = d.cm.Counters()
		}
		if err := d.sys.refreshCMCounters(c); err != nil {
			s.logf("sysfs: %v", err)
		}
		if err := d.sys.refreshHWCounters(); err != nil {
			s.logf("sysfs: %v", err)
		}
		if err := d.sys.refreshPMACounters(); err != nil {
			s.logf("sysfs: %v", err)
		}
	}
}

// SocketPath is the socket's path ($SOFTROCE_SOCK).
func (s *Server) SocketPath() string { return filepath.Join(s.cfg.Dir, SocketName) }

// SysfsPath is the sysfs tree's root ($SYSFS_PATH).
func (s *Server) SysfsPath() string { return filepath.Join(s.cfg.Dir, SysfsName) }

// Env returns the environment a program needs to use the device, with the
// preload library at preloadPath: LD_PRELOAD, SYSFS_PATH, SOFTROCE_SOCK,
// and the defaults of Env.
func (s *Server) Env(preloadPath string) []string {
	return Env(s.cfg.Dir, preloadPath)
}

// Env returns the environment for a daemon whose directory is dir. Beside
// the device's variables it turns off UCX's mmap hooks
// (UCX_MEM_MMAP_HOOK_MODE=none), whose calls reach the kernel past the
// preload library, so that librxe's mmap of its queues would fail; a
// program's own setting of it wins (see UserWins).
func Env(dir, preloadPath string) []string {
	return []string{"LD_PRELOAD=" + preloadPath, "SYSFS_PATH=" + filepath.Join(dir, SysfsName),
		"SOFTROCE_SOCK=" + filepath.Join(dir, SocketName), "UCX_MEM_MMAP_HOOK_MODE=none"}
}

// UserWins reports whether a variable of Env is a default that the
// program's environment overrides.
func UserWins(name string) bool { return name == "UCX_MEM_MMAP_HOOK_MODE" }

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve accepts clients until Close or Remove; it returns nil then. An
// accept that fails for want of descriptors or memory (EMFILE, ENFILE,
// ENOBUFS, ENOMEM) or for a client gone (ECONNABORTED) is tried again
// after a wait of 5 ms doubling to 1 s, as net/http's Server.Serve; a
// client past its bounds (Config.MaxConnsPerClient, Config.MaxFiles) has
// its open refused with EMFILE or ENFILE.
func (s *Server) Serve() error {
	var backoff acceptBackoff
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed || s.removing
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if !transientAccept(err) {
				return fmt.Errorf("uverbsd: accept: %w", err)
			}
			d := backoff.next()
			s.warnf("accept: %v; retrying in %v", err, d)
			select {
			case <-s.done:
				return nil
			case <-time.After(d):
			}
			continue
		}
		backoff = 0
		pid, err := peerPid(c)
		if err != nil {
			s.warnf("client without credentials: %v", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		cl, err := s.admit(pid)
		if err != nil {
			s.mu.Unlock()
			s.refuse(c, pid, err)
			continue
		}
		// The first MaxPollingConns connections' goroutines wait for the
		// client's frames in poll(2), each on its own thread (conn.recv);
		// the eventfd ends that wait when the Server closes. The others
		// wait in Go's network poller, which holds no thread: a client
		// that opens the device thousands of times must not exhaust the
		// daemon's threads (the Go runtime ends a process past its
		// limit).
		wake := -1
		if s.polling < MaxPollingConns {
			if fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
				wake = fd
				s.polling++
			}
		}
		s.conns[c] = wake
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c, wake, cl)
	}
}

// Disassociater is implemented by a File that can be cut from the device
// while its client holds it (Remove after its grace period).
type Disassociater interface {
	Disassociate() error
}

// Remove removes the device as the kernel removes an rxe device (`rdma
// link delete`, ib_unregister_device): it is no longer listed (the sysfs
// tree goes) and no longer opens (ib_uverbs_remove_one's
// cdev_device_del: a new open fails with ENXIO), and the programs that
// have it open keep it: for a driver without disassociate_ucontext, as rxe
// is, the kernel waits for them to close it, without bound. Before that
// wait the rdma_cm removes its part (cma_process_remove): each ID on the
// device gets RDMA_CM_EVENT_DEVICE_REMOVAL and is closed
// (cma.CM.RemoveDevice, ucma), which a librdmacm program takes as the
// cue to end. Remove waits for at most grace, or until now is closed; then
// it does what the kernel does for a driver that can disassociate
// (ib_uverbs_free_hw_resources): each file still open gets
// IB_EVENT_DEVICE_FATAL on its async event file (Disassociater) and every
// later call of its program fails with EIO. It ends with Close. It
// returns whether the programs had closed the device in time.
func (s *Server) Remove(grace time.Duration, now <-chan struct{}) (inTime bool, err error) {
	s.mu.Lock()
	if s.closed || s.removing {
		s.mu.Unlock()
		return true, s.Close()
	}
	s.removing = true
	s.mu.Unlock()
	err = s.removeTree()
	err = errors.Join(err, s.ln.Close())
	for _, d := range s.served() {
		if d.cm == nil {
			continue
		}
		if n := d.cm.RemoveDevice(); n > 0 {
			s.logf("device removal of %s: %d rdma_cm IDs told", d.dev.Name(), n)
		}
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	inTime = true
wait:
	for s.Clients() > 0 {
		select {
		case <-tick.C:
		case <-timer.C:
			inTime = false
			break wait
		case <-now:
			inTime = false
			break wait
		}
	}
	if !inTime {
		s.mu.Lock()
		files := make([]File, 0, len(s.files))
		for _, f := range s.files {
			files = append(files, f)
		}
		s.mu.Unlock()
		for _, f := range files {
			if d, ok := f.(Disassociater); ok {
				if derr := d.Disassociate(); derr != nil {
					s.logf("disassociate: %v", derr)
				}
			}
		}
	}
	return inTime, errors.Join(err, s.Close())
}

// Close removes the sysfs tree (the device is no longer listed), stops
// accepting, ends every connection (closing its File) and waits for them;
// the socket goes with the listener.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	err := s.removeTreeLocked()
	if !s.removing {
		err = errors.Join(err, s.ln.Close())
	}
	if s.ctl != nil {
		err = errors.Join(err, s.ctl.Close())
	}
	for c, wake := range s.conns {
		if wake >= 0 {
			var one [8]byte
			binary.NativeEndian.PutUint64(one[:], 1)
			unix.Write(wake, one[:])
		}
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, d := range s.served() {
		if d.cm != nil {
			err = errors.Join(err, d.cm.Close())
		}
	}
	if s.cfg.HoldLock {
		return err
	}
	return errors.Join(err, s.Unlock())
}

// Unlock releases the directory's lock: the name is free for the next
// daemon. Close does it, unless Config.HoldLock.
func (s *Server) Unlock() error {
	s.unlockOnce.Do(func() { s.unlockErr = s.lock.Close() })
	return s.unlockErr
}

// reserveWatchPage counts one more connection with a watch page, false
// when MaxWatchPages have one.
func (s *Server) reserveWatchPage() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching >= MaxWatchPages {
		return false
	}
	s.watching++
	return true
}

// closing reports whether Close has begun: a connection whose client keeps
// its watched rings busy (recheck) ends at its next look.
func (s *Server) closing() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Clients returns how many connections have the device open.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// conn is one client connection: one open of the device node.
type conn struct {
	s     *Server
	c     *net.UnixConn
	raw   syscall.RawConn
	wake  int // eventfd the Server writes to end recv's wait (-1: none, wait in the netpoller)
	pid   int
	cl    *client    // the client's accounting (Server.admit)
	pidfd *pidFD     // the client process while it lives (nil: no pidfd)
	mrs   *memFile   // the client's address space for its MRs (nil: none opened)
	watch *watchPage // the uverbs client's watch page (nil: none)
	file  File
	dev   *served // the device the uverbs File is of (nil: none, or rdma_cm)
	// passed is how many files the last reply passed: the client's
	// OpFds must come next and carry that many numbers.
	passed int
	// buf is the frame buffer (frameBuf) while the connection holds one,
	// bufp its array.
	buf  []byte
	bufp *[frameSize]byte
}

func (s *Server) serveConn(c *net.UnixConn, wake int, cl *client) {
	if wake >= 0 {
		// The connection waits in poll(2) on a thread of its own
		// (conn.recv); locked to it, the thread ends with the
		// connection instead of staying in the Go runtime's idle
		// threads, so that the daemon's threads come back down once the
		// clients leave.
		runtime.LockOSThread()
	}
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		s.leave(cl)
		delete(s.conns, c)
		if wake >= 0 {
			s.polling--
		}
		s.mu.Unlock()
		c.Close()
		if wake >= 0 {
			unix.Close(wake)
		}
	}()
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	var cred *unix.Ucred
	var cerr error
	var pidfd *pidFD
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil && cred.Pid > 0 {
			pidfd = peerPidFD(int(fd), int(cred.Pid))
		}
	}); err != nil || cerr != nil || cred.Pid <= 0 {
		s.warnf("client without credentials: %v %v", err, cerr)
		pidfd.close()
		return
	}
	cn := &conn{s: s, c: c, raw: raw, wake: wake, pid: int(cred.Pid), pidfd: pidfd, cl: cl}
	defer cn.pidfd.close()
	defer func() { cn.mrs.close() }()
	defer func() {
		if cn.watch != nil {
			cn.watch.close()
			s.mu.Lock()
			s.watching--
			s.mu.Unlock()
		}
	}()
	defer func() {
		if cn.file != nil {
			defer func() {
				s.mu.Lock()
				s.opened--
				delete(s.files, cn)
				s.mu.Unlock()
			}()
			if err := cn.file.Close(); err != nil {
				s.logf("pid %d: close: %v", cn.pid, err)
			}
		}
	}()
	cn.loop()
}

// recv receives into buf with flags (plus MSG_DONTWAIT). Before it waits
// it takes a last look at the send rings the client's watch page marks
// (recheck), and waits only when that found nothing. It waits for a
// frame in poll(2), a blocking system call, not in Go's network poller: a
// client's doorbell then wakes the thread that serves it, where through
// the netpoller it woke the poller's thread, which handed the goroutine
// on (ib_send_lat's typical round trip on a quiet machine: 12–17 µs
// against 21–37 µs; ib_write_bw loses a third, see docs/performance.md).
// The Server's Close ends the wait through cn.wake. Without a wake
// eventfd it waits in the netpoller.
//
// The frame lands in cn.buf, a buffer taken from framePool for it; the
// connection gives it back before it waits, so that an idle connection
// holds none.
func (cn *conn) recv(oob []byte, flags int) (n, oobn, rflags int, err error) {
	if cn.wake >= 0 {
		rerr := cn.raw.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(cn.wake), Events: unix.POLLIN}}
			for {
				n, oobn, rflags, _, err = unix.Recvmsg(int(fd), cn.frameBuf(), oob, flags|unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
				if err != unix.EAGAIN {
					return
				}
				cn.putFrameBuf()
				if cn.recheck() {
					if cn.s.closing() {
						err = net.ErrClosed
						return
					}
					continue
				}
				pfd[0].Revents, pfd[1].Revents = 0, 0
				if _, perr := unix.Poll(pfd, -1); perr != nil && perr != unix.EINTR {
					err = perr
					return
				}
				if pfd[1].Revents != 0 {
					err = net.ErrClosed
					return
				}
			}
		})
		if rerr != nil {
			err = rerr
		}
		return
	}
	rerr := cn.raw.Read(func(fd uintptr) bool {
		for {
			n, oobn, rflags, _, err = unix.Recvmsg(int(fd), cn.frameBuf(), oob, flags|unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			if err != unix.EAGAIN {
				return true
			}
			cn.putFrameBuf()
			if !cn.recheck() {
				return false
			}
			if cn.s.closing() {
				err = net.ErrClosed
				return true
			}
		}
	})
	if rerr != nil {
		err = rerr
	}
	return
}

// closeRights closes every descriptor a client sent.
func closeRights(oob []byte) {
	for _, fd := range rights(oob) {
		unix.Close(fd)
	}
}

// rights returns the descriptors a client sent (SCM_RIGHTS), which the
// daemon now holds: it closes them, or keeps the one an OpShare carries.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var all []int
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		all = append(all, fds...)
	}
	return all
}

// handleShare serves an OpShare frame and closes fd, its memfd (a
// mapping keeps what the daemon takes); false ends the connection.
func (cn *conn) handleShare(frame []byte, fd int) bool {
	defer unix.Close(fd)
	h, p, err := preload.ParseFrame(frame)
	switch {
	case err != nil:
		cn.warnf("frame refused: %v", err)
		cn.s.recordRefused(h.Op, errno(err))
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	case cn.mrs == nil || cn.s.cfg.NoSharedPages || len(p) != 16:
		return cn.refuse(h.Op, "%v of %d bytes not offered", h.Op, len(p))
	}
	addr, length := binary.NativeEndian.Uint64(p), binary.NativeEndian.Uint64(p[8:])
	if err := cn.mrs.share(fd, addr, length); err != nil {
		cn.warnf("%v", err)
		cn.s.recordRefused(h.Op, errno(err))
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	return cn.reply(preload.Header{Op: h.Op}, nil, nil)
}

// loop reads frames until the client goes away. A zero-length packet reads
// as the end of the connection. Each frame is one recvmsg into a buffer
// that holds the largest frame accepted; MSG_TRUNC makes a larger one
// report its length, and it is refused once consumed.
func (cn *conn) loop() {
	defer cn.putFrameBuf()
	oob := make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, rflags, err := cn.recv(oob, unix.MSG_TRUNC)
		if err != nil || n == 0 {
			return
		}
		buf := cn.buf
		if n > len(buf) {
			closeRights(oob[:oobn])
			h, _, _ := preload.ParseFrame(buf[:preload.HeaderSize])
			if !cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.E2BIG)}, nil, nil) {
				return
			}
			cn.warnf("frame of %d bytes refused: %v", n, unix.E2BIG)
			cn.s.recordRefused(h.Op, -int32(unix.E2BIG))
			continue
		}
		if fds := rights(oob[:oobn]); len(fds) > 0 || rflags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			h, _, _ := preload.ParseFrame(buf[:n])
			if h.Op == preload.OpShare && len(fds) == 1 && rflags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 {
				if !cn.handleShare(buf[:n], fds[0]) {
					return
				}
				continue
			}
			for _, fd := range fds {
				unix.Close(fd)
			}
			cn.warnf("%v with descriptors refused: %v", h.Op, unix.EINVAL)
			cn.s.recordRefused(h.Op, -int32(unix.EINVAL))
			if !cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.EINVAL)}, nil, nil) {
				return
			}
			continue
		}
		if !cn.handle(buf[:n]) {
			return
		}
	}
}

// frameSize is the largest frame a client sends.
const frameSize = preload.HeaderSize + preload.MaxPayload

// framePool holds the frame buffers of the connections that are not
// waiting (conn.recv): a few for any number of idle connections.
var framePool = sync.Pool{New: func() any { return new([frameSize]byte) }}

// frameBuf returns cn.buf, taken from framePool if the connection holds
// none.
func (cn *conn) frameBuf() []byte {
	if cn.buf == nil {
		cn.bufp = framePool.Get().(*[frameSize]byte)
		cn.buf = cn.bufp[:]
	}
	return cn.buf
}

// putFrameBuf gives cn.buf back to framePool.
func (cn *conn) putFrameBuf() {
	if cn.bufp != nil {
		framePool.Put(cn.bufp)
		cn.buf, cn.bufp = nil, nil
	}
}

// settler is a File whose commands settle some of their work themselves
// (uverbs.File.SetSettle), before their response.
type settler interface {
	SetSettle(settle func(fn func()))
}

// errno is the errno an error carries, EIO for one that carries none.
func errno(err error) int32 {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return -int32(e)
	}
	return -int32(unix.EIO)
}

// handle serves one frame; false ends the connection.
func (cn *conn) handle(frame []byte) bool {
	h, p, err := preload.ParseFrame(frame)
	if err != nil {
		cn.warnf("frame refused: %v", err)
		cn.s.recordRefused(h.Op, errno(err))
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	if h.Op != preload.OpOpen && cn.file == nil {
		return cn.refuse(h.Op, "%v before OPEN", h.Op)
	}
	passed := cn.passed
	cn.passed = 0
	switch h.Op {
	case preload.OpFds:
		if passed == 0 || len(p) != 4*passed {
			return cn.refuse(h.Op, "%v of %d bytes after %d files passed", h.Op, len(p), passed)
		}
		fds := make([]uint32, passed)
		for i := range fds {
			fds[i] = binary.NativeEndian.Uint32(p[4*i:])
		}
		if fs, ok := cn.file.(FilesStorer); ok {
			fs.FilesStored(fds)
		}
		return cn.reply(preload.Header{Op: h.Op}, nil, nil)
	case preload.OpOpen:
		ret := int32(0)
		switch {
		case cn.file != nil:
			return cn.refuse(h.Op, "%v of an open connection", h.Op)
		case h.Aux != preload.Version:
			cn.warnf("%v of protocol version %d, the daemon's is %d: %v", h.Op, h.Aux, preload.Version, unix.EPROTO)
			cn.s.recordRefused(h.Op, -int32(unix.EPROTO))
			ret = -int32(unix.EPROTO)
		case string(p) == RDMACMNode:
			return cn.openRDMACM(h)
		case strings.HasPrefix(string(p), "umad"):
			return cn.openUmad(h, string(p))
		default:
			d, eno := cn.s.openable(string(p))
			if eno != 0 {
				ret = -int32(eno)
				break
			}
			cn.dev = d
			// The client allowed the daemon (PR_SET_PTRACER) before
			// OPEN: its address space can be opened now.
			cn.mrs = openMemFile(cn.pid, cn.pidfd)
			cl, pid := cn.cl, cn.pid
			charge := func(npages uint64) (func(), error) { return cn.s.chargePinned(cl, pid, npages) }
			if cn.s.cfg.NoMemlock {
				charge = nil
			}
			if cn.mrs != nil {
				cn.mrs.charge = func(n uint64) error { return cn.s.chargeShared(cl, n) }
				cn.mrs.uncharge = func(n uint64) { cn.s.unchargeShared(cl, n) }
				cn.mrs.chargePin = charge
			}
			cn.file = cn.s.cfg.Open(cn.dev.dev, procMemory{pid: cn.pid, pidfd: cn.pidfd, mrs: cn.mrs, charge: charge})
			if st, ok := cn.file.(settler); ok && cn.settle() != nil {
				st.SetSettle(cn.settle())
			}
			cn.s.startCheck(cn.file, cn.pid)
			cn.s.mu.Lock()
			cn.s.opened++
			cn.s.files[cn] = cn.file
			cn.s.mu.Unlock()
			var aux uint32
			if cn.mrs != nil && !cn.s.cfg.NoSharedPages {
				aux |= preload.FeatureSharePages
			}
			_, db := cn.file.(doorbeller)
			if db && cn.s.cfg.OneWayDoorbells {
				aux |= preload.FeatureOneWayDoorbells
			}
			var fds []int
			if db && cn.s.cfg.WatchPage && cn.s.reserveWatchPage() {
				w, f, err := newWatchPage()
				if err != nil {
					cn.s.logf("pid %d: %v", cn.pid, err)
					cn.s.mu.Lock()
					cn.s.watching--
					cn.s.mu.Unlock()
				} else {
					// The client gets its own descriptor of it.
					defer f.Close()
					cn.watch = w
					aux |= preload.FeatureWatchPage
					fds = []int{int(f.Fd())}
				}
			}
			return cn.reply(preload.Header{Op: h.Op, Aux: aux}, nil, fds)
		}
		return cn.reply(preload.Header{Op: h.Op, Ret: ret}, nil, nil)
	case preload.OpRead:
		return cn.umadOp(h, p)
	case preload.OpWrite:
		if uf, ok := cn.file.(*umadFile); ok {
			r, err := uf.Write(p)
			if err != nil {
				return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
			}
			return cn.reply(preload.Header{Op: h.Op, Ret: int32(r.N)}, nil, nil)
		}
		if h.Aux&preload.WriteOneWay != 0 {
			cn.doorbell(p)
			return true
		}
		// An answered doorbell marks nothing watched: its reply hands
		// the client the CPU, and a word left set while the daemon
		// waits for it to come back would keep the client's next
		// doorbell from waking it. Another command comes after the
		// doorbells the client skipped: their WQEs go first.
		if _, null := uverbs.NullPostSend(p); null {
			cn.s.doorbells.Add(1)
		} else if cn.watch != nil {
			cn.watch.takeAll(cn.takeWatched)
		}
		var r Reply
		var err error
		if settle := cn.settle(); settle != nil {
			settle(func() { r, err = cn.write(p) })
		} else {
			r, err = cn.write(p)
		}
		cn.mrs.settleShares()
		var aux uint32
		if cn.s.syncDoorbells.Load() {
			aux = preload.AuxSyncDoorbells
		}
		if err != nil {
			return cn.reply(preload.Header{Op: h.Op, Ret: errno(err), Aux: aux}, nil, nil)
		}
		if len(r.Files) > preload.MaxFiles || r.N < 0 || r.N > math.MaxInt32 {
			cn.warnf("write returned %d and %d files", r.N, len(r.Files))
			return cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.EIO)}, nil, nil)
		}
		return cn.pass(preload.Header{Op: h.Op, Ret: int32(r.N), Aux: aux}, r.Files)
	case preload.OpIoctl:
		if _, ok := cn.file.(*umadFile); ok {
			return cn.umadOp(h, p)
		}
		return cn.ioctl(h, p)
	case preload.OpMmap:
		if len(p) != 16 {
			return cn.refuse(h.Op, "%v of %d bytes", h.Op, len(p))
		}
		off, length := binary.NativeEndian.Uint64(p), binary.NativeEndian.Uint64(p[8:])
		f, foff, err := cn.file.Mmap(off, length)
		if err != nil {
			return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
		}
		fd, err := dupFile(f)
		if err != nil {
			return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
		}
		defer unix.Close(fd)
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], uint64(foff))
		return cn.reply(preload.Header{Op: h.Op}, b[:], []int{fd})
	}
	return cn.refuse(h.Op, "unknown %v", h.Op)
}

// pass replies h with the files a command hands over: the payload their
// addresses, the descriptors their duplicates; OpFds comes next.
func (cn *conn) pass(h preload.Header, files []PassFile) bool {
	at := make([]byte, 8*len(files))
	fds := make([]int, 0, len(files))
	defer closeAll(&fds)
	for i, pf := range files {
		binary.NativeEndian.PutUint64(at[8*i:], pf.At)
		fd, err := dupFile(pf.File)
		if err != nil {
			cn.s.logf("pid %d: pass a file: %v", cn.pid, err)
			return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
		}
		fds = append(fds, fd)
	}
	cn.passed = len(fds)
	return cn.reply(h, at, fds)
}

// refuse warns of a frame the daemon refuses (what, formatted) and
// answers it EINVAL; false when the client is gone.
func (cn *conn) refuse(op preload.Op, what string, args ...any) bool {
	cn.warnf(what+" refused: %v", append(args, unix.EINVAL)...)
	cn.s.recordRefused(op, -int32(unix.EINVAL))
	return cn.reply(preload.Header{Op: op, Ret: -int32(unix.EINVAL)}, nil, nil)
}

// reply sends one frame; false when the client is gone.
func (cn *conn) reply(h preload.Header, payload []byte, fds []int) bool {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := cn.c.WriteMsgUnix(preload.Frame(h, payload), oob, nil)
	return err == nil
}

// dupFile duplicates f's descriptor (close-on-exec) without changing f's
// blocking mode, as os.File.Fd would; the caller closes the duplicate.
func dupFile(f *os.File) (int, error) {
	if f == nil {
		return -1, unix.EBADF
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	return fd, derr
}

func closeAll(fds *[]int) {
	for _, fd := range *fds {
		unix.Close(fd)
	}
}

// openUmad opens /dev/infiniband/NAME (umadN) for the client: the reply
// passes the file's eventfd, which the client returns from open().
func (cn *conn) openUmad(h preload.Header, name string) bool {
	s := cn.s
	d, eno := s.openableMAD(name)
	if eno != 0 {
		return cn.reply(preload.Header{Op: h.Op, Ret: -int32(eno)}, nil, nil)
	}
	f, err := newUmadFile(d.dev)
	if err != nil {
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	fd, err := dupFile(f.EventFile())
	if err != nil {
		f.Close()
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	defer unix.Close(fd)
	cn.file = f
	s.mu.Lock()
	s.opened++
	s.files[cn] = cn.file
	s.mu.Unlock()
	return cn.reply(preload.Header{Op: h.Op, Aux: preload.FeatureEventFD}, nil, []int{fd})
}

// umadOp serves OpIoctl and OpRead, which only a umad file takes.
func (cn *conn) umadOp(h preload.Header, p []byte) bool {
	f, ok := cn.file.(*umadFile)
	if !ok {
		return cn.refuse(h.Op, "%v on a file that is not umad's", h.Op)
	}
	if len(p) < 4 || h.Op == preload.OpRead && len(p) != 4 {
		return cn.refuse(h.Op, "%v of %d bytes", h.Op, len(p))
	}
	n := binary.NativeEndian.Uint32(p)
	if h.Op == preload.OpRead {
		b, err := f.Read(int(min(n, preload.MaxPayload)))
		if err != nil {
			return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
		}
		return cn.reply(preload.Header{Op: h.Op, Ret: int32(len(b))}, b, nil)
	}
	out, err := f.Ioctl(n, p[4:], h.Aux&preload.IoctlArgUnreadable == 0)
	ret := int32(0)
	if err != nil {
		ret = errno(err)
	}
	return cn.reply(preload.Header{Op: h.Op, Ret: ret}, out, nil)
}

// openRDMACM opens /dev/infiniband/rdma_cm for the client: the reply
// carries the File's token (u32) and passes its event file, which the
// client returns from open().
func (cn *conn) openRDMACM(h preload.Header) bool {
	s := cn.s
	if s.ucma == nil {
		return cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.ENODEV)}, nil, nil)
	}
	f, err := s.ucma.Open(procMemory{pid: cn.pid, pidfd: cn.pidfd}, cn.pid)
	if err != nil {
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	fd, err := dupFile(f.EventFile())
	if err != nil {
		f.Close()
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	defer unix.Close(fd)
	cn.file = ucmaFile{f}
	s.mu.Lock()
	s.opened++
	s.files[cn] = cn.file
	s.mu.Unlock()
	var tok [4]byte
	binary.NativeEndian.PutUint32(tok[:], f.Token())
	return cn.reply(preload.Header{Op: h.Op}, tok[:], []int{fd})
}
