//go:build linux

package peer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread switched into the lab's network namespace,
// and returns f's error. File descriptors f opens there stay in the
// namespace after Do returns and may be used from any goroutine: open
// softroce's TAP (created with AddTAP) or its out-of-band TCP listener
// inside Do. f must not start goroutines that expect the namespace: they
// run on other threads. If the thread cannot be switched back it is
// retired (left locked, so the runtime exits it with the goroutine).
func (l *Lab) Do(f func() error) error {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab %s: %w", l.cfg.Name, err)
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/var/run/netns", l.cfg.Name))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab %s: %w", l.cfg.Name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("lab %s: setns: %w", l.cfg.Name, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime destroys it when this
		// goroutine exits instead of reusing it in the wrong namespace.
		return fmt.Errorf("lab %s: setns back: %w (f: %v)", l.cfg.Name, err, ferr)
	}
	runtime.UnlockOSThread()
	return ferr
}
