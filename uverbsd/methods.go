package uverbsd

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// MaxMethodLog bounds the calls the method log keeps: the first ones
// (a program's setup) are the ones compared with the kernel's.
const MaxMethodLog = 1 << 14

// MethodCall is one uverbs ioctl a client made: its pid, the method's
// name (uverbs.MethodName) and its errno (0: it succeeded).
type MethodCall struct {
	PID   int
	Name  string
	Errno unix.Errno
}

// methodLog counts the uverbs ioctl methods the clients called and keeps
// their order.
type methodLog struct {
	mu     sync.Mutex
	counts map[string]uint64
	calls  []MethodCall
}

func (l *methodLog) add(pid int, name string, errno unix.Errno) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]uint64{}
	}
	l.counts[name]++
	if len(l.calls) < MaxMethodLog {
		l.calls = append(l.calls, MethodCall{PID: pid, Name: name, Errno: errno})
	}
}

// Methods returns how many times each uverbs ioctl method was called,
// and the calls in their order (the first MaxMethodLog).
func (s *Server) Methods() (map[string]uint64, []MethodCall) {
	l := &s.methods
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := make(map[string]uint64, len(l.counts))
	for k, v := range l.counts {
		counts[k] = v
	}
	return counts, append([]MethodCall(nil), l.calls...)
}

// methodsControl serves the control command "methods": each method's
// count, one "NAME COUNT" line each, sorted; with the argument "log",
// the calls in order instead, one "PID NAME ERRNO" line each (ERRNO 0
// for a call that succeeded).
func (s *Server) methodsControl(args []string) (string, error) {
	counts, calls := s.Methods()
	var b strings.Builder
	switch {
	case len(args) == 0:
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, "%s %d\n", n, counts[n])
		}
	case len(args) == 1 && args[0] == "log":
		for _, c := range calls {
			fmt.Fprintf(&b, "%d %s %d\n", c.PID, c.Name, int(c.Errno))
		}
	default:
		return "", fmt.Errorf("methods takes no argument, or \"log\"")
	}
	return b.String(), nil
}
