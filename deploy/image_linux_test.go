package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
)

// The local base images CI builds the Containerfile from, with no
// container registry: Debian 12 trees made by debootstrap from Debian's
// mirror, imported into podman's storage under these names.
const (
	localBase    = "localhost/softroce-ci/debian:12-slim"
	localGCC     = "localhost/softroce-ci/debian-gcc:12"
	localGo      = "localhost/softroce-ci/golang:bookworm"
	builtImage   = "localhost/softroce-ci/softroce:test"
	rootfsFormat = "softroce-image-rootfs-1" // part of the cache file names
	// rootfsMaxAge is how old a cached tree may be before it is made
	// again: the final stage's apt-get brings what it installs up to
	// date anyway, so the tree only needs to be a recent Debian 12.
	rootfsMaxAge = 30 * 24 * time.Hour
)

// imageCacheDir is where the base trees are kept between runs:
// $SOFTROCE_IMAGE_CACHE, else /var/cache/softroce-image.
func imageCacheDir() string {
	if d := os.Getenv("SOFTROCE_IMAGE_CACHE"); d != "" {
		return d
	}
	return "/var/cache/softroce-image"
}

// podmanConfig is how the test runs podman on this machine.
type podmanConfig struct {
	conf    string   // a containers.conf
	ulimits []string // --ulimit flags for podman build, which ignores the conf's
}

// podman runs podman with args and the configuration of c, failing t with
// its output on an error.
func podman(t *testing.T, c *podmanConfig, args ...string) string {
	t.Helper()
	if args[0] == "build" {
		args = append(append([]string{"build"}, c.ulimits...), args[1:]...)
	}
	cmd := exec.Command("podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+c.conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, tail(out, 40))
	}
	return string(out)
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// podmanConf writes a containers.conf for this machine and returns its
// path. It changes how podman runs containers, not what they may do:
//   - runtime runc: crun (podman's default) refuses a host whose cgroup v2
//     hierarchy has controllers while v1 is mounted ("cgroups in hybrid
//     mode not supported"), as CI's machine has;
//   - ulimits at the host's own hard limits: podman's default raises
//     RLIMIT_NOFILE and RLIMIT_NPROC to 1048576, which fails with EPERM
//     where root lacks CAP_SYS_RESOURCE, as on CI's machine; and podman,
//     failing that, sets its own RLIMIT_NPROC to 32768, above which the
//     runtime it starts cannot go either.
func podmanConf(t *testing.T) *podmanConfig {
	t.Helper()
	var nofile, nproc unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &nproc); err != nil {
		t.Fatal(err)
	}
	ulimits := []string{fmt.Sprintf("nofile=%d:%d", min(nofile.Max, 1<<20), min(nofile.Max, 1<<20)),
		fmt.Sprintf("nproc=%d:%d", min(nproc.Max, 32<<10), min(nproc.Max, 32<<10))}
	conf := fmt.Sprintf("[containers]\ndefault_ulimits = [%q, %q]\n\n[engine]\nruntime = \"runc\"\n", ulimits[0], ulimits[1])
	c := &podmanConfig{conf: filepath.Join(t.TempDir(), "containers.conf")}
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range ulimits {
		c.ulimits = append(c.ulimits, "--ulimit", u)
	}
	return c
}

// rootfs returns a tar of a Debian 12 tree made by debootstrap (variant
// minbase) with the packages include, from the cache when it holds one
// younger than rootfsMaxAge.
func rootfs(t *testing.T, name string, include ...string) string {
	t.Helper()
	dir := imageCacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, fmt.Sprintf("%s-%s.tar", rootfsFormat, name))
	if st, err := os.Stat(tarball); err == nil && time.Since(st.ModTime()) < rootfsMaxAge {
		return tarball
	}
	tree, err := os.MkdirTemp(dir, "tree-")
	if err != nil {
		t.Fatal(err)
	}
	defer removeTree(t, tree)
	args := []string{"--variant=minbase"}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	mirror := os.Getenv("SOFTROCE_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	args = append(args, "bookworm", tree, mirror)
	start := time.Now()
	if out, err := exec.Command("debootstrap", args...).CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s: %v\n%s", strings.Join(args, " "), err, tail(out, 30))
	}
	// A tree for an image: no package lists (the final stage fetches its
	// own), the mirror's sources as debootstrap wrote them.
	os.RemoveAll(filepath.Join(tree, "var/lib/apt/lists"))
	os.RemoveAll(filepath.Join(tree, "var/cache/apt/archives"))
	tmp := tarball + ".tmp"
	if out, err := exec.Command("tar", "-C", tree, "--numeric-owner", "-cf", tmp, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("made %s in %v", tarball, time.Since(start).Round(time.Second))
	return tarball
}

// removeTree removes a debootstrap tree, unmounting first what a failed
// debootstrap may have left mounted in it (its /proc), so that the removal
// never reaches into the host's file systems.
func removeTree(t *testing.T, tree string) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Error(err)
		return
	}
	var under []string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], tree+"/") {
			under = append(under, f[1])
		}
	}
	for i := len(under) - 1; i >= 0; i-- {
		if err := unix.Unmount(under[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v; leaving %s", under[i], err, tree)
			return
		}
	}
	os.RemoveAll(tree)
}

// buildContext copies the tracked files of the source tree into a fresh
// directory and vendors the modules there with the host's Go, so that the
// build stage needs no module proxy.
func buildContext(t *testing.T) string {
	t.Helper()
	ctx := t.TempDir()
	files, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		src := filepath.Join(repoRoot, f)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or a symbolic link
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(ctx, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "mod", "vendor")
	cmd.Dir = ctx
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod vendor: %v\n%s", err, out)
	}
	return ctx
}

// TestImageBuildsAndRunsUnprivileged: podman builds the Containerfile
// with no registry (--pull=never; the base images are local: Debian 12
// from debootstrap, with gcc and the host's Go for the build stage,
// passed as GO_IMAGE and BASE_IMAGE), and the image runs Debian's
// ibv_devices and a pingpong pair under `softroce run` as uid 1000 with no
// privilege: no --privileged, no device, no added capability, podman's
// default seccomp profile, no network.
//
// It takes about 2 minutes on the shared two-core machine with the base
// trees cached under /var/cache/softroce-image (most of it compiling
// softroce in the build stage; the final stage's apt-get fetches Debian's
// RDMA packages), and 2.5 minutes more to make the trees with debootstrap
// (two of them: Debian 12 minbase, and with gcc for the build stage).
func TestImageBuildsAndRunsUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"podman", "runc", "debootstrap", "git", "go"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed (Debian packages podman, runc, debootstrap)")
	}
	conf := podmanConf(t)
	start := time.Now()

	base := rootfs(t, "minbase")
	gcc := rootfs(t, "gcc", "gcc", "libc6-dev")
	podman(t, conf, "import", base, localBase)
	podman(t, conf, "import", gcc, localGCC)
	gofile := filepath.Join(t.TempDir(), "Containerfile")
	if err := os.WriteFile(gofile, []byte("FROM "+localGCC+"\nCOPY . /usr/local/go\n"+
		"ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	podman(t, conf, "build", "--pull=never", "--network", "none", "-f", gofile, "-t", localGo, strings.TrimSpace(string(goroot)))
	t.Logf("base images in %v", time.Since(start).Round(time.Second))

	ctx := buildContext(t)
	// The build stage's image is left untagged: remove what the build
	// leaves that was not there before.
	dangling := func() []string {
		return strings.Fields(podman(t, conf, "images", "--quiet", "--no-trunc", "--filter", "dangling=true"))
	}
	before := dangling()
	t.Cleanup(func() {
		for _, id := range dangling() {
			if !slices.Contains(before, id) {
				exec.Command("podman", "rmi", id).Run()
			}
		}
	})
	build := time.Now()
	podman(t, conf, "build", "--pull=never", "--network", "host",
		"--build-arg", "GO_IMAGE="+localGo, "--build-arg", "BASE_IMAGE="+localBase,
		"-f", filepath.Join(ctx, "deploy", containerfilePath), "-t", builtImage, ctx)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", builtImage).Run() })
	t.Logf("image built in %v", time.Since(build).Round(time.Second))

	run := func(args ...string) string {
		t.Helper()
		return podman(t, conf, append([]string{"run", "--rm", "--network", "none", "--user", "1000", builtImage}, args...)...)
	}
	out := run("run", "--", "ibv_devices")
	t.Logf("softroce run -- ibv_devices:\n%s", out)
	if !strings.Contains(out, "rxe0") {
		t.Errorf("softroce run -- ibv_devices in the image: no rxe0 in\n%s", out)
	}
	// A pingpong pair on the container's one device, over its loopback:
	// the server in the background, the client against it.
	pp := "ibv_rc_pingpong -g 0 -n 100 -c & sleep 1; ibv_rc_pingpong -g 0 -n 100 -c 127.0.0.1; c=$?; wait $!; s=$?; exit $((c|s))"
	out = run("run", "--", "sh", "-c", pp)
	t.Logf("an ibv_rc_pingpong pair:\n%s", out)
	if strings.Count(out, "100 iters") != 2 {
		t.Errorf("ibv_rc_pingpong pair in the image: want both sides' \"100 iters\" in\n%s", out)
	}
	t.Logf("whole test in %v", time.Since(start).Round(time.Second))
}
