package uverbsd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ValidName reports whether name can name a served device: librxe binds
// only to devices whose name starts with "rxe" (its VERBS_NAME_MATCH), and
// the name is one path component of letters, digits, '_', '-' and '.'.
func ValidName(name string) error {
	if len(name) < 3 || name[:3] != "rxe" || len(name) > 63 {
		return fmt.Errorf("device name %q: the rxe provider serves only names starting with \"rxe\" (at most 63 bytes): %w", name, unix.EINVAL)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("device name %q: character %q: %w", name, r, unix.EINVAL)
		}
	}
	return nil
}

// BaseDir is the per-user directory that holds one directory per served
// device: $XDG_RUNTIME_DIR/softroce, else $TMPDIR/softroce-UID.
func BaseDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "softroce")
	}
	return filepath.Join(os.TempDir(), "softroce-"+strconv.Itoa(os.Geteuid()))
}

// DeviceDir returns the directory of the daemon serving name (BaseDir/name)
// after making sure BaseDir is private to the user (PrivateDir).
func DeviceDir(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	base := BaseDir()
	if err := PrivateDir(base); err != nil {
		return "", err
	}
	return filepath.Join(base, name), nil
}

// Serving reports whether a daemon answers on the socket in dir.
func Serving(dir string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, SocketName)}) == nil
}

// lockFile takes the daemon's lock on f: an open file description lock
// (F_OFD_SETLK) on the whole file, which the kernel drops when the daemon
// ends, however it ends. Unlike flock(2) it can be tested without taking
// it (F_OFD_GETLK, see Held), so that probing a starting daemon never
// makes its own lock fail. A lock another daemon holds is EAGAIN or
// EACCES.
func lockFile(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// lockPID returns the pid a daemon wrote into dir's lock file (0: none).
func lockPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, lockName))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Held reports whether a daemon holds dir (it is starting, serving or
// stopping) and, if so, its pid (0 if it has not written it yet). A
// daemon that was killed holds nothing: its lock went with it.
func Held(dir string) (pid int, held bool) {
	f, err := os.Open(filepath.Join(dir, lockName))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0, false
	}
	return lockPID(dir), true
}

// Ready reports whether the device in dir can be used: its tree is
// published and its socket accepts. A daemon publishes the tree only once
// the socket listens, so a program that lists the device can open it.
func Ready(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, SysfsName, "class", "infiniband_verbs", UverbsNode)); err != nil {
		return false
	}
	return Serving(dir)
}

// ErrNotReady is what WaitReady's error wraps when the device did not
// become ready in time.
var ErrNotReady = errors.New("the device is not ready")

// WaitReady waits until the device in dir is Ready, polling, for at most
// timeout. Its error (wrapping ErrNotReady and ETIMEDOUT) says whether a
// daemon holds the name (starting, or stuck) or none does.
func WaitReady(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		if Ready(dir) {
			return nil
		}
		if time.Now().After(deadline) {
			name := filepath.Base(dir)
			if pid, held := Held(dir); held {
				return fmt.Errorf("%s: the daemon that holds it (pid %d) did not make it ready within %v: %w: %w", name, pid, timeout, ErrNotReady, unix.ETIMEDOUT)
			}
			return fmt.Errorf("%s: no daemon served it within %v (start one with `softroce serve -d %s`): %w: %w", name, timeout, name, ErrNotReady, unix.ETIMEDOUT)
		}
		time.Sleep(delay)
	}
}
