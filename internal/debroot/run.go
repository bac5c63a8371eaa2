package debroot

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"strings"
)

// Nobody is the user and group ID programs run as in a tree (Debian's
// nobody and nogroup).
const Nobody = 65534

// Bind makes a host file or directory visible inside the tree for one
// command: a daemon's socket directory, a sysfs tree, a preload library.
type Bind struct {
	// Host is the path on the host.
	Host string
	// Path is where it appears in the tree; it must be under /run,
	// which is a fresh tmpfs for each command.
	Path string
}

// runScript sets up the private mount namespace `unshare --mount` gives
// it and execs chroot: a tmpfs on /run (so bind targets are made without
// touching the cached tree), the binds, /proc and the host's /dev, then
// the program as Nobody. Its arguments are the host paths of mount, mkdir
// and chroot (the program's environment, PATH included, is the caller's),
// the tree, the binds as pairs, "--", and the program's argv.
const runScript = `set -e
mount=$1 mkdir=$2 chroot=$3 root=$4; shift 4
"$mount" -t tmpfs -o mode=0755 softroce-run "$root/run"
while [ "$1" != -- ]; do
	if [ -d "$1" ]; then "$mkdir" -p "$root$2"; else "$mkdir" -p "${root}${2%/*}"; : > "$root$2"; fi
	"$mount" --bind "$1" "$root$2"
	shift 2
done
shift
"$mount" -t proc proc "$root/proc"
"$mount" --rbind /dev "$root/dev"
exec "$chroot" --userspec=65534:65534 "$root" "$@"
`

// Command returns a command that runs argv (a path inside the tree and
// its arguments) chrooted into the tree as Nobody, in a private mount
// namespace holding binds, /proc and the host's /dev; the host's mounts
// and the cached tree are not changed. The caller sets Env, Stdout and so
// on as for any exec.Cmd; the environment reaches the program as is. It
// needs root (unshare and chroot) and util-linux's unshare on the host.
func (t *Tree) Command(ctx context.Context, binds []Bind, argv ...string) (*exec.Cmd, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	args := []string{"--mount", "--propagation", "private", "/bin/sh", "-c", runScript, "sh"}
	for _, tool := range []string{"mount", "mkdir", "chroot"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		args = append(args, p)
	}
	args = append(args, t.Dir)
	for _, b := range binds {
		p := path.Clean(b.Path)
		if !strings.HasPrefix(p, "/run/") {
			return nil, fmt.Errorf("debroot: bind target %s is not under /run", b.Path)
		}
		args = append(args, b.Host, p)
	}
	args = append(args, "--")
	args = append(args, argv...)
	return exec.CommandContext(ctx, unshare, args...), nil
}
