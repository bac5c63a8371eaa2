// Package debroot builds minimal root file system trees from the Debian
// packages of a chosen suite, for tests that run another distribution's
// unmodified binaries in a chroot (for example Debian 13's rdma-core and
// perftest on a Debian 12 host).
//
// The host's apt is used with a private configuration and state: a
// sources file naming only the requested suite, lists and caches under
// the package's cache directory, no dpkg status. The packages are fetched
// with `apt-get download` and unpacked with `dpkg-deb -x`; nothing is
// installed on the host and no maintainer script runs. The mirror is the
// one the host's apt uses for its own release, or $SOFTROCE_DEBIAN_MIRROR.
//
// A tree is cached under the cache directory in a directory named after
// the suite and a hash of the exact package versions, so it is rebuilt
// only when the suite's packages change. The apt lists are refreshed when
// they are older than ListsMaxAge.
package debroot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/elfdeps"
)

// treeFormat changes whenever the layout of a built tree changes in a way
// the package versions would not show; it is part of the cache key.
const treeFormat = "softroce-debroot-2"

// ListsMaxAge is how old the private apt lists may be before Build
// refreshes them with `apt-get update`.
const ListsMaxAge = 24 * time.Hour

// scriptOnly are packages that other packages depend on only for their
// maintainer scripts (libibverbs1's postinst adds a group with adduser,
// from Debian 14 with systemd-sysusers; debconf asks questions at
// configure time). No script runs in a tree, so a dependency group naming
// one of them is left out.
var scriptOnly = map[string]bool{
	"adduser":                     true,
	"debconf":                     true,
	"debconf-2.0":                 true,
	"cdebconf":                    true,
	"systemd-sysusers":            true,
	"systemd-standalone-sysusers": true,
}

// Config says which tree to build.
type Config struct {
	// Suite is the Debian suite (codename) the packages come from, for
	// example "trixie". Required.
	Suite string
	// Packages are the packages the tree must hold; their run-time
	// dependencies (Depends and Pre-Depends, first alternative) are
	// added. Required.
	Packages []string
	// CacheDir holds the apt state and the built trees; "" means
	// DefaultCacheDir().
	CacheDir string
	// Mirror is the Debian archive URI; "" means $SOFTROCE_DEBIAN_MIRROR,
	// else the URI the host's apt sources use for the host's release.
	Mirror string
}

// Tree is a built root file system tree. It is immutable once built.
type Tree struct {
	// Dir is the root of the tree (what chroot takes).
	Dir string
	// Versions maps every package unpacked in the tree to its version.
	Versions map[string]string
}

// DefaultCacheDir is where Build keeps apt state and trees when
// Config.CacheDir is "": $SOFTROCE_DEBROOT_CACHE if set, else
// /var/cache/softroce-debroot for root, else the user cache directory.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTROCE_DEBROOT_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/softroce-debroot"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "softroce-debroot")
	}
	return filepath.Join(os.TempDir(), "softroce-debroot")
}

// Build returns the tree cfg describes, building it unless a tree of the
// same package versions is in the cache already. It needs apt-get,
// apt-cache and dpkg-deb on the host and the network to reach the mirror
// (unless the lists and the tree are cached and fresh).
func Build(ctx context.Context, cfg Config) (*Tree, error) {
	if cfg.Suite == "" || len(cfg.Packages) == 0 {
		return nil, errors.New("debroot: Config.Suite and Config.Packages are required")
	}
	cache := cfg.CacheDir
	if cache == "" {
		cache = DefaultCacheDir()
	}
	a, err := newApt(cache, cfg)
	if err != nil {
		return nil, err
	}
	// One build at a time per cache (test binaries of several packages
	// may run at once): apt's own locks would fail the second, and a tree
	// must not be replaced while another process renames it into place.
	lock, err := os.OpenFile(filepath.Join(a.dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("debroot: lock %s: %w", lock.Name(), err)
	}
	if err := a.update(ctx); err != nil {
		return nil, err
	}
	pkgs, err := a.closure(ctx, cfg.Packages)
	if err != nil {
		return nil, err
	}
	versions, err := a.versions(ctx, pkgs)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "trees", cfg.Suite+"-"+treeKey(versions))
	t := &Tree{Dir: dir, Versions: versions}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return t, nil
	}
	if err := build(ctx, a, dir, versions); err != nil {
		return nil, fmt.Errorf("debroot: build %s tree: %w", cfg.Suite, err)
	}
	return t, nil
}

// treeKey hashes the format and the sorted name=version list.
func treeKey(versions map[string]string) string {
	names := make([]string, 0, len(versions))
	for n := range versions {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintln(h, treeFormat)
	for _, n := range names {
		fmt.Fprintf(h, "%s=%s\n", n, versions[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// build downloads the packages, unpacks them into a fresh directory next
// to dir, adds the merged-/usr links, a dpkg database and the account
// files, checks every program's libraries resolve inside the tree and
// renames the directory to dir.
func build(ctx context.Context, a *apt, dir string, versions map[string]string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	root := filepath.Join(tmp, "root")
	for _, d := range []string{debs, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	var specs []string
	for n, v := range versions {
		specs = append(specs, n+"="+v)
	}
	sort.Strings(specs)
	if _, err := a.run(ctx, debs, "apt-get", append([]string{"download"}, specs...)...); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil {
		return err
	}
	if len(files) != len(versions) {
		return fmt.Errorf("apt-get download fetched %d packages, want %d", len(files), len(versions))
	}
	sort.Strings(files)
	dpkgDir := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates"} {
		if err := os.MkdirAll(filepath.Join(dpkgDir, d), 0o755); err != nil {
			return err
		}
	}
	var status bytes.Buffer
	for _, f := range files {
		if err := unpack(ctx, f, root, dpkgDir, versions, &status); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dpkgDir, "status"), status.Bytes(), 0o644); err != nil {
		return err
	}
	if err := finishTree(root); err != nil {
		return err
	}
	if err := checkLibs(root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, ".complete"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir) // a partial tree of an interrupted build
	return os.Rename(root, dir)
}

// unpack extracts one package into root with `dpkg-deb -X` (which lists
// what it extracts) and records it in the tree's dpkg database: the
// control fields with a Status line in status, the file list in
// info/PACKAGE.list, so `dpkg --root` and `dpkg-query --root` answer for
// the tree.
func unpack(ctx context.Context, deb, root, dpkgDir string, versions map[string]string, status *bytes.Buffer) error {
	control, err := output(ctx, "", "dpkg-deb", "-f", deb)
	if err != nil {
		return err
	}
	fields := parseControl(control)
	name, version := fields["Package"], fields["Version"]
	if want, ok := versions[name]; !ok || want != version {
		return fmt.Errorf("%s is %s %s, not a package asked for (%s %q)", filepath.Base(deb), name, version, name, want)
	}
	list, err := output(ctx, "", "dpkg-deb", "-X", deb, root)
	if err != nil {
		return err
	}
	var paths []string
	for _, l := range strings.Split(string(list), "\n") {
		l = strings.TrimSuffix(strings.TrimPrefix(l, "."), "/")
		if l == "" {
			l = "/."
		}
		paths = append(paths, l)
	}
	paths = paths[:len(paths)-1] // the empty string after the last newline
	if err := os.WriteFile(filepath.Join(dpkgDir, "info", name+".list"), []byte(strings.Join(paths, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	for i, l := range strings.Split(strings.TrimRight(string(control), "\n"), "\n") {
		status.WriteString(l + "\n")
		if i == 0 {
			// No maintainer script ran: the package is unpacked, not
			// configured.
			status.WriteString("Status: install ok unpacked\n")
		}
	}
	status.WriteString("\n")
	return nil
}

// parseControl returns the single-line fields of a deb control paragraph.
func parseControl(b []byte) map[string]string {
	f := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == ' ' || l[0] == '\t' {
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// finishTree adds what an installed system has and unpacking does not
// give: the merged-/usr links (/bin, /sbin, /lib, /lib64 pointing into
// /usr, as Debian systems since 12 have them; the ELF interpreter is
// /lib64/ld-linux-x86-64.so.2), /tmp, /run, /dev, /proc, /sys and /etc/passwd
// and /etc/group naming root and nobody.
func finishTree(root string) error {
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if _, err := os.Lstat(filepath.Join(root, d)); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, "usr", d), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("usr/"+d, filepath.Join(root, d)); err != nil {
			return err
		}
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o777|fs.ModeSticky); err != nil {
		return err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(root, n), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkLibs fails unless every program in /usr/bin and every verbs
// provider of the tree finds its interpreter and libraries inside the
// tree: a dependency the closure missed shows here, not as a loader error
// in a test.
func checkLibs(root string) error {
	var elfs []string
	for _, g := range []string{"usr/bin/*", "usr/lib/x86_64-linux-gnu/libibverbs/*.so"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return err
		}
		for _, p := range m {
			st, err := os.Lstat(p)
			if err != nil || !st.Mode().IsRegular() || !isELF(p) {
				continue
			}
			elfs = append(elfs, "/"+strings.TrimPrefix(p, root+"/"))
		}
	}
	if len(elfs) == 0 {
		return errors.New("no programs in the tree")
	}
	_, err := elfdeps.SharedLibs(root, elfs)
	return err
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 4)
	n, _ := f.Read(b)
	return n == 4 && string(b) == "\x7fELF"
}

// output runs a command and returns its standard output; the error
// carries its standard error.
func output(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Download fetches one package of cfg's suite (cfg.Packages is not used)
// into dir with `apt-get download`, without its dependencies, and returns
// the path of the .deb file. A virtual or meta package is followed to the
// package its first Depends names when that name starts with follow (for
// example "linux-image-amd64" with follow "linux-image-" gives the
// kernel package of the suite's current ABI). A package already in dir is
// not fetched again. Nothing is installed or unpacked.
func Download(ctx context.Context, cfg Config, pkg, follow, dir string) (string, error) {
	if cfg.Suite == "" || pkg == "" {
		return "", errors.New("debroot: Download needs Config.Suite and a package name")
	}
	cache := cfg.CacheDir
	if cache == "" {
		cache = DefaultCacheDir()
	}
	a, err := newApt(cache, cfg)
	if err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(a.dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("debroot: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("debroot: lock %s: %w", lock.Name(), err)
	}
	if err := a.update(ctx); err != nil {
		return "", err
	}
	if follow != "" {
		out, err := a.run(ctx, "", "apt-cache", "depends", "--no-recommends", "--no-suggests",
			"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", pkg)
		if err != nil {
			return "", fmt.Errorf("debroot: %w", err)
		}
		deps, err := parseDepends(out)
		if err != nil {
			return "", fmt.Errorf("debroot: %w", err)
		}
		i := slices.IndexFunc(deps, func(d string) bool { return strings.HasPrefix(d, follow) })
		if i < 0 {
			return "", fmt.Errorf("debroot: %s in %s depends on no %s* package (%v)", pkg, cfg.Suite, follow, deps)
		}
		pkg = deps[i]
	}
	v, err := a.versions(ctx, []string{pkg})
	if err != nil {
		return "", err
	}
	// apt-get download names the file NAME_VERSION_ARCH.deb with the
	// epoch's colon escaped.
	glob := filepath.Join(dir, pkg+"_"+strings.ReplaceAll(v[pkg], ":", "%3a")+"_*.deb")
	if m, _ := filepath.Glob(glob); len(m) == 1 {
		return m[0], nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("debroot: %w", err)
	}
	if _, err := a.run(ctx, dir, "apt-get", "download", pkg+"="+v[pkg]); err != nil {
		return "", fmt.Errorf("debroot: %w", err)
	}
	m, _ := filepath.Glob(glob)
	if len(m) != 1 {
		return "", fmt.Errorf("debroot: apt-get download %s=%s: no %s: %w", pkg, v[pkg], glob, fs.ErrNotExist)
	}
	return m[0], nil
}
