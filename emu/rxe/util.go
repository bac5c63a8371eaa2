package rxe

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// opError is an rxe failure: a message with context and the errno.
type opError struct {
	msg   string
	errno unix.Errno
}

// Error formats the failure with its errno.
func (e *opError) Error() string { return "rxe: " + e.msg + ": " + e.errno.Error() }

// Unwrap returns the errno.
func (e *opError) Unwrap() error { return e.errno }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// roundQueue returns rxe's queue capacity for a request of n entries:
// the next power of two at or above n+1, minus one (rxe_queue_init).
func roundQueue(n uint32) uint32 {
	slots := uint32(1)
	for slots < n+1 {
		slots <<= 1
	}
	return slots - 1
}
