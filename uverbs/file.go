//go:build linux

package uverbs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// Reply is the result of a successful File.Write.
type Reply struct {
	// N is write()'s return value: the number of bytes written.
	N int
	// Files are the files the command hands to the client (the async event
	// fd of GET_CONTEXT, a completion channel): the daemon passes each with
	// SCM_RIGHTS and the client stores the fd number it received at At.
	Files []PassFile
}

// PassFile is one file a command hands to the client.
type PassFile struct {
	// File is the client's end of the event file. It stays the File's (it
	// is closed by Close): the daemon sends it with SCM_RIGHTS and does
	// not close it. The File keeps it to take back events of a destroyed
	// CQ the client has not read, as the kernel drops them from the list.
	File *os.File
	// At is the client address of the __u32 fd field in the response.
	At uint64
}

// File is one open of /dev/infiniband/uverbsN by one client: struct
// ib_uverbs_file with its ucontext, its handle table and its event files.
// It is safe for concurrent use; commands run one at a time, as under the
// kernel's per-file locks for the objects they touch.
type File struct {
	dev    *emu.Device
	mem    Memory
	settle func(func()) // SetSettle; nil: the doorbell's work is the device's

	mu        sync.Mutex
	closed    bool
	context   bool                      // GET_CONTEXT done (file->ucontext)
	objects   map[uint32]*object        // the idr: handle -> object, one space for every type
	async     atomic.Pointer[eventFile] // the async event file of GET_CONTEXT
	channels  []*eventFile              // completion channels created on this file
	asyncMore []*eventFile              // async event files after the first (ASYNC_EVENT_ALLOC), which get no events
	mmaps     map[uint64]*queue         // mmap offset -> queue
	nextMmap  uint64                    // next free mmap offset
	ahNums    map[uint32]*emu.AH        // rxe's AH numbers of the file's AHs, as UD WQEs name them
	srqNum    uint32                    // the last srq_num handed out
	stalled   atomic.Bool               // a QP's doorbell waits for room in the device's send queue
	retrying  atomic.Bool               // a retry of the stalled doorbells is scheduled
	reply     Reply                     // files gathered by the command in progress
	handed    []*eventFile              // the event files of the last reply's Files, in order
	passing   []*eventFile              // the event files the command in progress hands out
	check     *check.Program            // SetCheck; nil checks nothing
	checkQPs  sync.Map                  // with check: QP number -> *uqp, for the completion path
}

// objKind is the type of a uobject (UVERBS_OBJECT_*).
type objKind uint8

const (
	kindPD objKind = iota + 1
	kindMR
	kindCQ
	kindQP
	kindSRQ
	kindAH
	kindMW
)

func (k objKind) String() string {
	switch k {
	case kindPD:
		return "PD"
	case kindMR:
		return "MR"
	case kindCQ:
		return "CQ"
	case kindQP:
		return "QP"
	case kindSRQ:
		return "SRQ"
	case kindAH:
		return "AH"
	case kindMW:
		return "MW"
	}
	return fmt.Sprintf("objKind(%d)", uint8(k))
}

// object is a struct ib_uobject: one handle of the file.
type object struct {
	kind       objKind
	handle     uint32
	userHandle uint64 // the client's cookie, returned in events
	pd         *emu.PD
	mr         *emu.MR
	cq         *ucq
	qp         *uqp
	srq        *usrq
	ah         *emu.AH
	ahNum      uint32 // rxe's number of an AH
	mw         *emu.MW
}

// Open is open("/dev/infiniband/uverbsN") by one client: a new
// ib_uverbs_file on dev, whose user pointers (command responses, MR
// buffers) are addresses in mem.
func Open(dev *emu.Device, mem Memory) *File {
	return &File{dev: dev, mem: mem, objects: map[uint32]*object{}, mmaps: map[uint64]*queue{},
		ahNums: map[uint32]*emu.AH{}}
}

// SetSettle makes a POST_SEND doorbell run through settle, which returns
// once the device did the work the doorbell caused
// (node.Node.Settle), before the command writes its response: the
// kernel's rxe_post_send runs the requester in the caller's context
// before ib_uverbs_post_send copies the response, so a peer's completion
// does not wait for that copy. Call it before the first command.
func (f *File) SetSettle(settle func(fn func())) { f.settle = settle }

// errorf returns an error wrapping errno with the command's context.
func errorf(errno unix.Errno, format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...), Errno: errno}
}

// Error is a refused command: the errno the kernel returns and why.
type Error struct {
	Msg   string
	Errno unix.Errno
}

func (e *Error) Error() string { return "uverbs: " + e.Msg + ": " + e.Errno.Error() }

// Unwrap returns the errno, so errors.Is(err, unix.EINVAL) holds.
func (e *Error) Unwrap() error { return e.Errno }

// errnoOf returns the errno an error from package emu wraps, EINVAL if
// none.
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EINVAL
}

// wrap returns err from emu as the command's error, keeping its errno.
func wrap(cmd string, err error) error {
	return &Error{Msg: cmd + ": " + err.Error(), Errno: errnoOf(err)}
}

// newObject allocates the lowest free handle, as xa_alloc on the file's
// idr does; f.mu held.
func (f *File) newObject(o *object) uint32 {
	var h uint32
	for {
		if _, used := f.objects[h]; !used {
			break
		}
		h++
	}
	o.handle = h
	f.objects[h] = o
	return h
}

// lookup returns the object of kind behind handle: a handle that is free
// names nothing (ENOENT, lookup_get_idr_uobject), one of another type is
// EINVAL (rdma_lookup_get_uobject); f.mu held.
func (f *File) lookup(kind objKind, handle uint32) (*object, error) {
	o, ok := f.objects[handle]
	if !ok {
		return nil, errorf(unix.ENOENT, "%v handle %d: no such object", kind, handle)
	}
	if o.kind != kind {
		return nil, errorf(unix.EINVAL, "%v handle %d: the handle is a %v", kind, handle, o.kind)
	}
	return o, nil
}

// get is lookup for a command that uses an object without destroying it:
// the kernel's uobj_get_obj_read gives NULL for any failure and the
// commands answer EINVAL.
func (f *File) get(kind objKind, handle uint32) (*object, error) {
	o, err := f.lookup(kind, handle)
	if err != nil {
		return nil, errorf(unix.EINVAL, "%v handle %d: not an object of this file", kind, handle)
	}
	return o, nil
}

// sizeOf returns the size of T as an int.
func sizeOf[T any]() int {
	var v T
	return int(unsafe.Sizeof(v))
}
