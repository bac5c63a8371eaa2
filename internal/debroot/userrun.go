package debroot

import (
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// userScript is runScript for a user without privilege. `unshare --user
// --map-root-user --mount` gives it a user namespace in which it is root
// (and on the host the invoking user) and a mount namespace of its own,
// where it mounts a tmpfs on the tree's /run and /tmp (the cached tree is
// not written), the binds, the host's /proc and /dev. The variables named
// in $vars (whose values are host paths) are bound directory by directory
// at /run/env/NAME and rewritten to the path there, as HostPaths does, so
// a program under `softroce run` reaches the preload library, sysfs tree
// and socket that run gave it. The program then runs as nobody (65534) of
// a nested user namespace, mapped to that root, with no capability: the
// nested unshare keeps its capabilities (--keep-caps, as ambient ones) only
// for chroot, and busybox's setpriv drops them all before the program. The
// arguments are the host paths of mount, mkdir, chroot, busybox and
// unshare, the tree, the variable names (one word, space-separated), the
// number of binds, the binds as pairs, the environment, and the program's
// argv (busybox env takes the first word without "=" for the program).
const userScript = `set -e
mount=$1 mkdir=$2 chroot=$3 busybox=$4 unshare=$5 root=$6 vars=$7 nb=$8; shift 8
"$mount" -t tmpfs -o mode=0755 softroce-run "$root/run"
"$mount" -t tmpfs -o mode=1777 softroce-tmp "$root/tmp"
"$mkdir" "$root/run/.softroce"; : > "$root/run/.softroce/busybox"
"$mount" --bind "$busybox" "$root/run/.softroce/busybox"
while [ "$nb" -gt 0 ]; do
	if [ -d "$1" ]; then "$mkdir" -p "$root$2"; else "$mkdir" -p "${root}${2%/*}"; : > "$root$2"; fi
	"$mount" --bind "$1" "$root$2"
	shift 2; nb=$((nb - 1))
done
for name in $vars; do
	eval "v=\${$name-}"
	case $v in
	/*)	"$mkdir" -p "$root/run/env/$name"
		"$mount" --bind "${v%/*}/" "$root/run/env/$name"
		set -- "$name=/run/env/$name/${v##*/}" "$@";;
	?*)	set -- "$name=$v" "$@";;
	esac
done
"$mount" --rbind /proc "$root/proc"
"$mount" --rbind /dev "$root/dev"
caps= i=0 last=$(cat /proc/sys/kernel/cap_last_cap)
while [ "$i" -le "$last" ]; do caps=$caps${caps:+,}-cap_$i; i=$((i + 1)); done
exec "$unshare" --user --map-user=65534 --map-group=65534 --keep-caps "$chroot" "$root" \
	/run/.softroce/busybox setpriv --inh-caps="$caps" --ambient-caps="$caps" /run/.softroce/busybox env -i "$@"
`

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// UserArgv returns a host command line that runs argv (a path inside the
// tree and its arguments) chrooted into the tree with the environment env
// plus the variables named in vars, taken from the command line's own
// environment with their host paths mapped into the tree (the LD_PRELOAD,
// SYSFS_PATH and SOFTROCE_SOCK that `softroce run` or `softroce serve`
// gives), and binds as Command has them. Unlike Command it needs no
// privilege: the program runs as nobody without capabilities in user
// namespaces of its own, which is the invoking user on the host (files it
// makes outside the tmpfs /run and /tmp are the user's, its requests to
// the daemon are the user's), in a private mount namespace. It can be
// given to `softroce run --`. It needs unprivileged user namespaces, and
// on the host util-linux's unshare (2.38: --map-user, --keep-caps),
// coreutils' chroot and cat, and a static busybox (its setpriv).
func (t *Tree) UserArgv(binds []Bind, env, vars []string, argv ...string) ([]string, error) {
	for _, v := range vars {
		if !envName.MatchString(v) {
			return nil, fmt.Errorf("debroot: %q is not a variable name", v)
		}
	}
	tail := []string{strings.Join(vars, " "), strconv.Itoa(len(binds))}
	for _, b := range binds {
		p := path.Clean(b.Path)
		if !strings.HasPrefix(p, "/run/") || p == "/run/.softroce" || strings.HasPrefix(p, "/run/.softroce/") ||
			p == "/run/env" || strings.HasPrefix(p, "/run/env/") {
			return nil, fmt.Errorf("debroot: bind target %s is not under /run (or is under the reserved /run/.softroce or /run/env)", b.Path)
		}
		tail = append(tail, b.Host, p)
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || !envName.MatchString(k) {
			return nil, fmt.Errorf("debroot: environment entry %q is not NAME=VALUE", kv)
		}
		tail = append(tail, kv)
	}
	if len(argv) == 0 || !path.IsAbs(argv[0]) || strings.Contains(argv[0], "=") {
		return nil, fmt.Errorf("debroot: the program must be an absolute path in the tree, not %q", argv)
	}
	tail = append(tail, argv...)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	args := []string{unshare, "--user", "--map-root-user", "--mount", "--propagation", "private", "/bin/sh", "-c", userScript, "sh"}
	for _, tool := range []string{"mount", "mkdir", "chroot", "busybox", "unshare"} {
		p, err := lookTool(tool)
		if err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		args = append(args, p)
	}
	args = append(args, t.Dir)
	return append(args, tail...), nil
}

// lookTool finds tool in PATH, else in /usr/sbin and /sbin, which a user's
// PATH often lacks (chroot is there; in the user namespace the tree is
// entered through, the user may run it).
func lookTool(tool string) (string, error) {
	p, err := exec.LookPath(tool)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if q, err2 := exec.LookPath(dir + "/" + tool); err2 == nil {
			return q, nil
		}
	}
	return "", err
}
