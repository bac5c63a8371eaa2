package emu

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Error is how every verb of the core and of the driver reports a failure:
// the operation, the reason in words, and the kernel's errno underneath,
// so that errors.Is(err, unix.EINVAL) holds and errors.As(err, &e) gives
// the parts. The QP state machine's own verdicts stay the richer
// *qpstate.TransitionError and *qpstate.ModifyError, which unwrap to their
// errno too.
type Error struct {
	// Op names the call and its object, e.g. "dealloc PD" or
	// "rxe: post send QP 0x11".
	Op string
	// Reason says why it failed, e.g. "3 objects still use it"; it may be
	// empty.
	Reason string
	// Errno is the errno the kernel returns for the same call.
	Errno unix.Errno
}

// Error formats the failure as "op: reason: errno text".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	b.WriteString(": ")
	b.WriteString(e.Errno.Error())
	return b.String()
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// errorf builds an *Error from a message "op: reason" formatted as
// fmt.Sprintf does: the text before the first ": " is the operation, the
// rest the reason.
func errorf(errno unix.Errno, format string, args ...any) error {
	op, reason, _ := strings.Cut(fmt.Sprintf(format, args...), ": ")
	return &Error{Op: op, Reason: reason, Errno: errno}
}
