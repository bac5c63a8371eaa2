package debroot

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"slices"
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
	// which is a fresh tmpfs for each command (/run/.softroce is
	// reserved).
	Path string
}

// runScript sets up the private mount namespace `unshare --mount` gives
// it and execs chroot: a tmpfs on /run (so bind targets are made without
// touching the cached tree), the binds, /proc and the host's /dev, then
// the program as Nobody. The host's tools run with the caller's
// environment left out (an LD_PRELOAD naming a path in the tree must not
// reach them): chroot starts the host's static busybox, bound at
// /run/.softroce/busybox, whose env applet gives the program exactly its
// environment. The arguments are the host paths of mount, mkdir, chroot
// and busybox, the tree, the binds as pairs, "--", the environment, "--",
// and the program's argv.
const runScript = `set -e
mount=$1 mkdir=$2 chroot=$3 busybox=$4 root=$5; shift 5
"$mount" -t tmpfs -o mode=0755 softroce-run "$root/run"
"$mkdir" "$root/run/.softroce"; : > "$root/run/.softroce/busybox"
"$mount" --bind "$busybox" "$root/run/.softroce/busybox"
while [ "$1" != -- ]; do
	if [ -d "$1" ]; then "$mkdir" -p "$root$2"; else "$mkdir" -p "${root}${2%/*}"; : > "$root$2"; fi
	"$mount" --bind "$1" "$root$2"
	shift 2
done
shift
"$mount" -t proc proc "$root/proc"
"$mount" --rbind /dev "$root/dev"
exec "$chroot" --userspec=65534:65534 "$root" /run/.softroce/busybox env -i "$@"
`

// Command returns a command that runs argv (a path inside the tree and
// its arguments) chrooted into the tree as Nobody with exactly the
// environment env, in a private mount namespace holding binds, /proc and
// the host's /dev; the host's mounts and the cached tree are not changed.
// The caller sets Stdout and so on as for any exec.Cmd, but not Env. It
// needs root and, on the host, util-linux's unshare, coreutils' chroot and
// a static busybox (busybox-static).
func (t *Tree) Command(ctx context.Context, binds []Bind, env []string, argv ...string) (*exec.Cmd, error) {
	var tail []string // the binds, "--", the environment, the program
	for _, b := range binds {
		p := path.Clean(b.Path)
		if !strings.HasPrefix(p, "/run/") || p == "/run/.softroce" || strings.HasPrefix(p, "/run/.softroce/") {
			return nil, fmt.Errorf("debroot: bind target %s is not under /run (or is under the reserved /run/.softroce)", b.Path)
		}
		tail = append(tail, b.Host, p)
	}
	tail = append(tail, "--")
	for _, kv := range env {
		if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
			return nil, fmt.Errorf("debroot: environment entry %q is not NAME=VALUE", kv)
		}
		tail = append(tail, kv)
	}
	if len(argv) == 0 || !path.IsAbs(argv[0]) {
		return nil, fmt.Errorf("debroot: the program must be an absolute path in the tree, not %q", argv)
	}
	tail = append(tail, argv...)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	args := []string{"--mount", "--propagation", "private", "/bin/sh", "-c", runScript, "sh"}
	for _, tool := range []string{"mount", "mkdir", "chroot", "busybox"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		args = append(args, p)
	}
	args = append(args, t.Dir)
	args = append(args, tail...)
	cmd := exec.CommandContext(ctx, unshare, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd, nil
}

// HostPaths makes the named environment variables of env usable inside
// the tree: each whose value is an absolute host path gets the directory
// holding it bound at /run/host/N and is rewritten to the path there. It
// is how a program in the tree reaches what a daemon on the host offers
// it (LD_PRELOAD's library, SYSFS_PATH's tree, the socket in SOFTROCE_SOCK):
// the directory is bound, not the file, so a socket or a file the daemon
// replaces stays reachable. Variables not named, and values that are not
// absolute paths, are passed as they are. The directories must be
// searchable by Nobody.
func HostPaths(env []string, names ...string) ([]string, []Bind) {
	out := make([]string, 0, len(env))
	var binds []Bind
	dirs := make(map[string]string) // host directory → path in the tree
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(names, k) || !path.IsAbs(v) {
			out = append(out, kv)
			continue
		}
		v = path.Clean(v)
		dir, base := path.Split(v)
		dir = path.Clean(dir)
		in, ok := dirs[dir]
		if !ok {
			in = fmt.Sprintf("/run/host/%d", len(binds))
			dirs[dir] = in
			binds = append(binds, Bind{Host: dir, Path: in})
		}
		out = append(out, k+"="+path.Join(in, base))
	}
	return out, binds
}
