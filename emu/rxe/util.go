package rxe

import (
	"fmt"
)

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
