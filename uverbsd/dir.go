package uverbsd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
