//go:build linux

// Package ucma is the kernel side of /dev/infiniband/rdma_cm for
// unmodified librdmacm programs (drivers/infiniband/core/ucma.c): the
// rdma_ucm write() command ABI of <rdma/rdma_user_cm.h> (layouts from
// package uverbs' cgo -godefs output) over the CM of package cma.
//
// A Service is the character device of one CM: its context numbers are
// global, as the kernel's ctx_idr, and a context belongs to the File (one
// open of the node) that created it or took it with MIGRATE_ID. Each File
// queues its contexts' events; GET_EVENT takes the oldest. The File's
// event file (an eventfd in semaphore mode, which the daemon hands the
// client as the descriptor it opened) counts the queued events: it is
// poll-readable while one is pending, and the client waits on it for a
// blocking GET_EVENT.
package ucma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/uverbs"
	"golang.org/x/sys/unix"
)

// Memory is a client's address space as copy_from_user and copy_to_user
// reach it; ranges not mapped in the client fail with EFAULT.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
}

// MaxBacklog is the ucma max_backlog sysctl's default: the most
// connection requests a listener holds before they are taken.
const MaxBacklog = 1024

// Service is the rdma_cm device over the CMs of a host's devices: an ID
// is created on the first CM and moves, while idle, to the CM of the
// device its first address routes to (see route). It is safe for
// concurrent use.
type Service struct {
	cm  *cma.CM
	cms []*cma.CM // every CM, cm first (mu)

	mu     sync.Mutex
	ctxs   map[uint32]*context
	next   uint32
	mcs    map[uint32]*mcast // multicast_idr
	nextMC uint32
	files  map[uint32]*File // by token
	rnd    *rand.Rand
	closed bool
}

// NewService serves cm's IDs to clients.
func NewService(cm *cma.CM, seed uint64) *Service {
	return &Service{cm: cm, cms: []*cma.CM{cm}, ctxs: map[uint32]*context{}, files: map[uint32]*File{}, mcs: map[uint32]*mcast{},
		rnd: rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))}
}

// CM returns the Service's first CM, the one IDs are created on.
func (s *Service) CM() *cma.CM { return s.cm }

// AddCM adds the CM of another device of the host: IDs whose address is
// that device's go to it, as the kernel's rdma_cm serves every device
// (cma_add_one).
// The listeners on the wildcard address listen on it from then on, as
// cma_add_one makes them listen on a new device.
func (s *Service) AddCM(cm *cma.CM) {
	s.mu.Lock()
	s.cms = append(s.cms, cm)
	ctxs := make([]*context, 0, len(s.ctxs))
	for _, c := range s.ctxs {
		ctxs = append(ctxs, c)
	}
	s.mu.Unlock()
	for _, c := range ctxs {
		if id := c.cmID.Load(); id != nil && id.Info().State == cma.StateListen {
			f := c.file.Load()
			f.mu.Lock()
			backlog := c.listenBacklog
			f.mu.Unlock()
			s.listenOn(c, backlog, []*cma.CM{cm})
		}
	}
}

// RemoveCM takes a CM added with AddCM out of the routing (its device is
// being removed: cma_remove_one); its IDs stay on it.
func (s *Service) RemoveCM(cm *cma.CM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.cms {
		if c == cm && i > 0 {
			s.cms = append(s.cms[:i], s.cms[i+1:]...)
			return
		}
	}
}

// cmOf returns the CM whose device has the address a (nil: none).
func (s *Service) cmOf(a netip.Addr) *cma.CM {
	if !a.IsValid() || a.IsUnspecified() {
		return nil
	}
	s.mu.Lock()
	cms := append([]*cma.CM(nil), s.cms...)
	s.mu.Unlock()
	for _, cm := range cms {
		if cm.HasAddr(a) {
			return cm
		}
	}
	return nil
}

// listenOnAll makes c's listener, bound to a wildcard address, listen on
// the other CMs' devices too, as the kernel's cma_listen_on_all makes a
// listen of each device for it: their connection requests come to c
// (the listens share its backlog). A device whose listen fails (its port
// taken there) is skipped, as cma_listen_on_dev's failures were.
func (s *Service) listenOnAll(c *context, backlog int) {
	s.mu.Lock()
	cms := append([]*cma.CM(nil), s.cms...)
	s.mu.Unlock()
	s.listenOn(c, backlog, cms)
}

// listenOn makes c's wildcard listener listen on the devices of cms
// other than its own.
func (s *Service) listenOn(c *context, backlog int, cms []*cma.CM) {
	id := c.cmID.Load()
	info := id.Info()
	if !info.Src.Addr().IsUnspecified() {
		return
	}
	f := c.file.Load()
	f.mu.Lock()
	opts := c.opts
	f.mu.Unlock()
	var shadows []*cma.ID
	for _, cm := range cms {
		if cm == id.CM() {
			continue
		}
		sh, err := cm.CreateID(id.PortSpace(), id.QPType(), s.handler, c)
		if err != nil {
			continue
		}
		ok := true
		for _, o := range opts {
			if o != nil && o(sh) != nil {
				ok = false
			}
		}
		if !ok || sh.Bind(info.Src) != nil || sh.Listen(backlog) != nil {
			sh.Destroy()
			continue
		}
		shadows = append(shadows, sh)
	}
	f.mu.Lock()
	c.shadows = append(c.shadows, shadows...)
	f.mu.Unlock()
}

// route moves c's ID, while it is idle (no address yet), to the CM of the
// device that owns a, as the kernel's rdma_cm attaches an ID to the
// device of its source address at bind or address resolution
// (cma_acquire_dev_by_src_ip); the options set so far go with it. An
// address no device owns, or an ID that has one already, stays where it
// is.
func (s *Service) route(c *context, a netip.Addr) error {
	cm := s.cmOf(a)
	old := c.cmID.Load()
	if cm == nil || old.CM() == cm || old.Info().State != cma.StateIdle {
		return nil
	}
	id, err := cm.CreateID(old.PortSpace(), old.QPType(), s.handler, c)
	if err != nil {
		return err
	}
	f := c.file.Load()
	f.mu.Lock()
	opts := c.opts
	f.mu.Unlock()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(id); err != nil {
			id.Destroy()
			return err
		}
	}
	if !c.cmID.CompareAndSwap(old, id) {
		id.Destroy()
		return nil
	}
	old.Destroy()
	return nil
}

// Contexts returns how many contexts (IDs) the clients hold.
func (s *Service) Contexts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ctxs)
}

// File is one open of /dev/infiniband/rdma_cm (struct ucma_file).
type File struct {
	svc   *Service
	mem   Memory
	owner int    // the client process: MIGRATE_ID moves IDs between its own files only
	token uint32 // names the file in MIGRATE_ID (the client's fd number, translated)
	evfd  *os.File

	mu     sync.Mutex // file->mut: the event list and the contexts' fields
	events []*uevent
	closed bool
}

// context is struct ucma_context.
type context struct {
	id   uint32
	file atomic.Pointer[File]   // changed by MIGRATE_ID under both files' and the Service's locks
	cmID atomic.Pointer[cma.ID] // replaced on its first address while idle (route)
	// opts replay the options set on the ID on the one that replaces it,
	// the last of each kind (File.mu).
	opts [numOpts]func(*cma.ID) error
	// shadows are the listens of a wildcard listener on the other CMs'
	// devices (Service.listenOnAll; File.mu).
	shadows []*cma.ID
	// listenBacklog is the backlog of the ID's LISTEN (File.mu).
	listenBacklog int
	uid           uint64
	backlog       int
	reported      uint32
	// removed: the ID got DEVICE_REMOVAL and is closed (ucma_close_id):
	// the context stays until DESTROY_ID, every other command is ENXIO.
	removed atomic.Bool
}

// mcast is struct ucma_multicast.
type mcast struct {
	id       uint32
	uid      uint64
	ctx      *context
	reported uint32
	join     *cma.Multicast
}

// uevent is struct ucma_event.
type uevent struct {
	ctx  *context
	mc   *mcast
	cmID *cma.ID
	resp uverbs.UcmEventResp
}

// Open is open("/dev/infiniband/rdma_cm") by the client process owner
// whose memory is mem. The File's EventFile goes to the client as the
// descriptor it opened; Token names the File in the client's MIGRATE_ID.
func (s *Service) Open(mem Memory, owner int) (*File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return nil, fmt.Errorf("ucma: eventfd: %w", err)
	}
	f := &File{svc: s, mem: mem, owner: owner, evfd: os.NewFile(uintptr(fd), "rdma_cm")}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		f.evfd.Close()
		return nil, fmt.Errorf("ucma: closed: %w", unix.ENODEV)
	}
	for f.token == 0 || f.token >= 0xfffffff0 || s.files[f.token] != nil {
		f.token = s.rnd.Uint32()
	}
	s.files[f.token] = f
	return f, nil
}

// EventFile returns the file that counts the queued events.
func (f *File) EventFile() *os.File { return f.evfd }

// Token returns the number that names the File in MIGRATE_ID.
func (f *File) Token() uint32 { return f.token }

// signal adds n to the event file's count.
func (f *File) signal(n int) {
	if n <= 0 {
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(n))
	rc, err := f.evfd.SyscallConn()
	if err != nil {
		return
	}
	rc.Write(func(fd uintptr) bool {
		unix.Write(int(fd), b[:])
		return true
	})
}

// unsignal takes n back from the event file's count for events removed
// unread (their ID destroyed, their join left, moved to another file), so
// that poll and a blocked GET_EVENT see no event that is gone, as the
// kernel's list has none. It never waits: a count a client thread has
// already taken is left to it (its GET_EVENT finds the queue empty and
// waits again). A kernel without RWF_NOWAIT reads of an eventfd leaves
// the count, and a waiter wakes for nothing and waits again.
func (f *File) unsignal(n int) {
	rc, err := f.evfd.SyscallConn()
	if err != nil {
		return
	}
	var b [8]byte
	rc.Control(func(fd uintptr) {
		for range n {
			if _, err := unix.Preadv2(int(fd), [][]byte{b[:]}, -1, unix.RWF_NOWAIT); err != nil {
				return
			}
		}
	})
}

// Close is the last close (ucma_close): every context's ID is destroyed,
// as are the IDs of connection requests not taken.
func (f *File) Close() error {
	s := f.svc
	s.mu.Lock()
	delete(s.files, f.token)
	var mine []*context
	for _, c := range s.ctxs {
		if c.file.Load() == f {
			mine = append(mine, c)
			delete(s.ctxs, c.id)
		}
	}
	s.mu.Unlock()
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	for _, c := range mine {
		f.destroyContext(c)
	}
	f.mu.Lock()
	pending := f.events
	f.events = nil
	f.mu.Unlock()
	for _, e := range pending {
		if e.resp.Event == uint32(cma.EventConnectRequest) {
			e.cmID.Destroy()
		}
	}
	return f.evfd.Close()
}

// destroyContext destroys c's ID and drops its queued events (the IDs of
// its connection requests with them); it returns the events reported.
func (f *File) destroyContext(c *context) uint32 {
	c.cmID.Load().Destroy()
	f.mu.Lock()
	shadows := c.shadows
	c.shadows = nil
	f.mu.Unlock()
	for _, id := range shadows {
		id.Destroy()
	}
	s := f.svc
	s.mu.Lock()
	for id, m := range s.mcs {
		if m.ctx == c {
			delete(s.mcs, id)
		}
	}
	s.mu.Unlock()
	f.mu.Lock()
	var drop []*uevent
	kept := f.events[:0]
	for _, e := range f.events {
		if e.ctx == c {
			drop = append(drop, e)
			continue
		}
		kept = append(kept, e)
	}
	clear(f.events[len(kept):])
	f.events = kept
	n := c.reported
	f.unsignal(len(drop))
	f.mu.Unlock()
	for _, e := range drop {
		if e.resp.Event == uint32(cma.EventConnectRequest) {
			e.cmID.Destroy()
		}
	}
	return n
}

var errBacklog = errors.New("ucma: listener backlog full")

// handler is every ID's event handler (ucma_event_handler); the CM's lock
// is held.
func (s *Service) handler(ev *cma.Event) error {
	c, _ := ev.ID.Context().(*context)
	if c == nil {
		if ev.Type == cma.EventConnectRequest {
			return errBacklog
		}
		return nil
	}
	f := c.file.Load()
	f.mu.Lock()
	for g := c.file.Load(); g != f; g = c.file.Load() {
		f.mu.Unlock()
		f = g
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	if f.closed {
		if ev.Type == cma.EventConnectRequest {
			return errBacklog
		}
		return nil
	}
	if ev.Type == cma.EventDeviceRemoval && c.cmID.Load() == ev.ID && c.removed.CompareAndSwap(false, true) {
		// ucma_close_id, from a work queue: the ID goes once the
		// event is queued (the CM's lock is held here); the context
		// waits for the consumer's DESTROY_ID.
		defer func() { go ev.ID.Destroy() }()
	}
	if ev.Type == cma.EventConnectRequest {
		if c.backlog <= 0 {
			return errBacklog
		}
		c.backlog--
	} else if (c.uid == 0 && ev.Multicast == nil) || c.cmID.Load() != ev.ID {
		// Events of a new connection before the consumer took it
		// and accepted: the kernel drops them too.
		return nil
	}
	e := &uevent{ctx: c, cmID: ev.ID}
	e.resp.Uid, e.resp.Id = c.uid, c.id
	if ev.Multicast != nil {
		mc, _ := ev.Multicast.Cookie().(*mcast)
		if mc == nil {
			return nil
		}
		e.mc = mc
		e.resp.Uid, e.resp.Id = mc.uid, mc.id
	}
	e.resp.Event, e.resp.Status = uint32(ev.Type), uint32(ev.Status)
	if ev.ID.QPType() == udType {
		var p uverbs.UcmUDParam
		p.Private_data_len = uint8(copy(p.Private_data[:], ev.UD.PrivateData))
		p.Qp_num, p.Qkey = ev.UD.QPNum, ev.UD.QKey
		p.Ah_attr = ahToUser(&ev.UD.AH)
		copy(e.resp.Param[:], bytesOf(&p))
	} else {
		var p uverbs.UcmConnParam
		p.Private_data_len = uint8(copy(p.Private_data[:], ev.Conn.PrivateData))
		p.Responder_resources, p.Initiator_depth = ev.Conn.ResponderResources, ev.Conn.InitiatorDepth
		p.Flow_control, p.Retry_count, p.Rnr_retry_count = ev.Conn.FlowControl, ev.Conn.RetryCount, ev.Conn.RNRRetryCount
		p.Srq, p.Qp_num = ev.Conn.SRQ, ev.Conn.QPNum
		copy(e.resp.Param[:], bytesOf(&p))
	}
	f.events = append(f.events, e)
	f.signal(1)
	return nil
}

// bytesOf returns the memory of *v (the uapi structures are in the host's
// byte order).
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// load decodes a T from b; a shorter b leaves the rest zero.
func load[T any](b []byte) T {
	var v T
	copy(bytesOf(&v), b)
	return v
}

func sizeOf[T any]() int {
	var v T
	return int(unsafe.Sizeof(v))
}

// Error is a refused command: the errno the kernel returns and why.
type Error struct {
	Msg   string
	Errno unix.Errno
}

func (e *Error) Error() string { return "ucma: " + e.Msg + ": " + e.Errno.Error() }

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

func errorf(errno unix.Errno, format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...), Errno: errno}
}

// errno returns the errno inside err (EINVAL if none).
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return unix.EINVAL
}
