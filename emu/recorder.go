package emu

import (
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Recorder sees what a device goes through, for a coverage profile
// (package coverage): every modify QP, every completion, every async
// event and every verb that failed. It is set in Config.Recorder; nil
// (the default) records nothing and costs one nil check per hook.
//
// The methods are called from the device's goroutines, some while the
// driver holds its lock: an implementation must be safe for concurrent use,
// must not block, and must not call back into the device.
type Recorder interface {
	// Modify records one modify QP on a QP of type t: the state the
	// transition table is consulted with (attr.CurQPState under
	// IB_QP_CUR_STATE, else the QP's state), the state asked for (cur when
	// mask lacks IB_QP_STATE), the caller's mask and the result (0 on
	// success).
	Modify(t qpstate.Type, cur, next qpstate.State, mask qpstate.AttrMask, errno unix.Errno)
	// Completion records a work completion the driver queued on a CQ.
	Completion(op WCOpcode, status WCStatus)
	// Event records an async event as it is dispatched (ib_dispatch_event).
	Event(t EventType)
	// VerbFailed records a verb (its kernel name without the ib_ prefix:
	// "create_qp", "post_send", ...) that returned errno. The core calls
	// it for create_qp, modify_qp, post_send, post_recv and destroy_qp;
	// a layer above (the uverbs commands) records the other verbs it
	// serves through Device.Recorder.
	VerbFailed(verb string, errno unix.Errno)
}

// Recorder returns the device's recorder (nil if none).
func (d *Device) Recorder() Recorder { return d.cfg.Recorder }

// recordModify records a modify of q with the recorder rec.
func recordModify(rec Recorder, q *QP, cur qpstate.State, attr *qpstate.Attr, mask qpstate.AttrMask, err error) {
	if mask&qpstate.AttrCurState != 0 {
		cur = attr.CurQPState
	}
	next := cur
	if mask&qpstate.AttrState != 0 {
		next = attr.QPState
	}
	var errno unix.Errno
	if err != nil {
		errno = unwrapErrno(err)
		rec.VerbFailed("modify_qp", errno)
	}
	rec.Modify(q.QPType, cur, next, mask, errno)
}

// recordFailure records a failed verb on d's recorder, if any, and returns
// err unchanged. d may be nil (a QP built by hand in a test).
func (d *Device) recordFailure(verb string, err error) error {
	if err != nil && d != nil && d.cfg.Recorder != nil {
		d.cfg.Recorder.VerbFailed(verb, unwrapErrno(err))
	}
	return err
}
