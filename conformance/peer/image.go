package peer

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/elfdeps"
)

// imageFormat changes whenever the image layout or init changes in a way
// the hashed inputs would not show; it is part of the cache key.
const imageFormat = "softroce-peer-image-1"

//go:embed rootfs
var rootfsFS embed.FS

// Image is a bootable rxe peer: a Debian kernel and a base initramfs. It is
// immutable once built; Start appends a per-run archive to it.
type Image struct {
	// Kernel is the path of the vmlinuz to boot.
	Kernel string
	// Initrd is the path of the base initramfs (gzip-compressed newc cpio).
	Initrd string
	// Release is the kernel release, as `uname -r` prints it in the VM.
	Release string
	// Modules are the kernel modules /init loads, in load order
	// (dependencies first).
	Modules []string
	// Hash identifies the inputs the image was built from (kernel package,
	// modules, tools, libraries, init); the image lives in a cache
	// directory named after it.
	Hash string
	// Debian is the Debian release the kernel and the tools come from.
	Debian Release
}

// Release is a Debian release a peer image is built from: its kernel
// (with rdma_rxe) and its rdma-core, perftest, iproute2 and tcpdump.
type Release string

const (
	// Bookworm is Debian 12: kernel 6.1, and the tools and libraries of
	// this host (which must be Debian 12).
	Bookworm Release = "bookworm"
	// Trixie is Debian 13: kernel 6.12, rdma-core 56 and perftest 25.01,
	// taken from Debian 13's packages unpacked into a tree
	// (internal/debroot) without installing anything on the host; the
	// libraries are resolved inside that tree.
	Trixie Release = "trixie"
	// Forky is Linux 7.3 (Debian 13's trixie-backports kernel, the newest
	// Debian serves) with Debian 14 "forky"'s userspace: rdma-core 65,
	// perftest, iproute2, tcpdump and the glibc (2.43) they need, from a
	// forky tree (internal/debroot). The image is a whole root file
	// system, so forky's libc in it does not touch the host.
	Forky Release = "forky"
)

// Releases are the releases BuildImageFor knows, oldest first.
var Releases = []Release{Bookworm, Trixie, Forky}

// forkyKernel is the kernel package of the Forky image, from
// trixie-backports. From 7.x Debian splits it: linux-image-V is empty and
// depends on linux-binary-V (the vmlinuz) and linux-modules-V (the .ko.xz
// files).
const forkyKernel = "7.3.4+deb13-amd64"

// ForkyPeer is the Debian 14 userspace of the Forky image: rdma-core 65's
// libraries, providers and tools, perftest, iproute2, tcpdump and
// libfabric's fi_info and fi_pingpong.
func ForkyPeer() debroot.Config {
	return debroot.Config{
		Suite: "forky",
		Packages: []string{
			"libc6", "libibverbs1", "ibverbs-providers", "ibverbs-utils",
			"librdmacm1t64", "rdmacm-utils", "perftest", "iproute2", "tcpdump", "libgcc-s1",
			"libfabric-bin",
		},
	}
}

// trixieBackports is the suite the Forky image's kernel comes from.
func trixieBackports() debroot.Config { return debroot.Config{Suite: "trixie-backports"} }

// rootModules are the modules the VM needs; resolveModules adds their
// dependencies. rdma_rxe is the peer; ib_uverbs gives userspace verbs;
// rdma_ucm gives RDMA CM to rping/ucmatose/udaddy; virtio_net and
// virtio_pci drive qemu's virtio-net-pci NIC; crc32_generic is the
// "crc32" shash rxe allocates for the ICRC (rxe_icrc_init), which the
// kernel would otherwise request_module() from a modprobe we lack.
// 8021q gives VLAN interfaces (ip link add … type vlan).
var rootModules = []string{"virtio_pci", "virtio_net", "crc32_generic", "rdma_rxe", "ib_uverbs", "rdma_ucm", "8021q"}

// rootModules7 are rootModules for 7.x, whose linux-modules package has no
// modules.builtin: virtio_pci is built in (as from 6.12), and rxe computes
// the ICRC with the crc32 library (built in) since 6.14, so crc32_generic
// is gone.
var rootModules7 = []string{"virtio_net", "rdma_rxe", "ib_uverbs", "rdma_ucm", "8021q"}

// peerTool is a host binary copied into the image, with the Debian
// package that installs it (for the error message when it is missing).
type peerTool struct{ name, pkg string }

var peerTools = []peerTool{
	{"ibv_devinfo", "ibverbs-utils"},
	{"ibv_devices", "ibverbs-utils"},
	{"ibv_rc_pingpong", "ibverbs-utils"},
	{"ibv_uc_pingpong", "ibverbs-utils"},
	{"ibv_ud_pingpong", "ibverbs-utils"},
	{"ibv_srq_pingpong", "ibverbs-utils"},
	{"ibv_xsrq_pingpong", "ibverbs-utils"},
	{"ibv_asyncwatch", "ibverbs-utils"},
	{"ib_write_bw", "perftest"},
	{"ib_write_lat", "perftest"},
	{"ib_read_bw", "perftest"},
	{"ib_read_lat", "perftest"},
	{"ib_send_bw", "perftest"},
	{"ib_send_lat", "perftest"},
	{"ib_atomic_bw", "perftest"},
	{"ib_atomic_lat", "perftest"},
	{"rping", "rdmacm-utils"},
	{"ucmatose", "rdmacm-utils"},
	{"udaddy", "rdmacm-utils"},
	{"rdma_server", "rdmacm-utils"},
	{"rdma_client", "rdmacm-utils"},
	{"rdma_xserver", "rdmacm-utils"},
	{"rdma_xclient", "rdmacm-utils"},
	{"rstream", "rdmacm-utils"},
	{"riostream", "rdmacm-utils"},
	{"mckey", "rdmacm-utils"},
	{"ip", "iproute2"},
	{"rdma", "iproute2"},
	{"tcpdump", "tcpdump"},
}

// fabricTools are libfabric's tools, in the Forky image only (its
// verbs;ofi_rxm provider on rxe 7.3: fi_info, fi_pingpong).
var fabricTools = []peerTool{
	{"fi_info", "libfabric-bin"},
	{"fi_pingpong", "libfabric-bin"},
}

// The rxe verbs provider: libibverbs finds drivers through
// /etc/libibverbs.d/*.driver and loads lib<name>-rdmav*.so from its
// provider directory.
const (
	providerGlob = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so"
	providerConf = "/etc/libibverbs.d/rxe.driver"
)

// libgccS is the unwinder glibc dlopens at the first pthread_exit.
const libgccS = "/lib/x86_64-linux-gnu/libgcc_s.so.1"

// DefaultCacheDir is where BuildImage keeps the kernel package and built
// images when the caller passes "": $SOFTROCE_PEER_CACHE if set, else
// /var/cache/softroce-peer for root, else the user cache directory.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTROCE_PEER_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/softroce-peer"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "softroce-peer")
	}
	return filepath.Join(os.TempDir(), "softroce-peer")
}

// BuildImage returns the Debian 12 rxe peer image (BuildImageFor with
// Bookworm).
func BuildImage(ctx context.Context, cacheDir string) (*Image, error) {
	return BuildImageFor(ctx, cacheDir, Bookworm)
}

// BuildImageFor returns the rxe peer image of Debian release rel, building
// it under cacheDir ("" means DefaultCacheDir) unless an image of the same
// inputs is there already. It fetches the kernel package that the
// release's linux-image-amd64 depends on with `apt-get download` (for
// Bookworm from the host's sources, or $SOFTROCE_PEER_KERNEL_DEB; for
// Trixie from Debian 13's, through internal/debroot), unpacks it with
// `dpkg-deb -x`, and packs busybox, the modules rdma_rxe, VLANs and the
// NIC need (compressed modules are decompressed with the host's xz), the
// rdma-core/perftest/iproute2/tcpdump binaries with their shared libraries,
// the rxe provider and /init into a gzip newc initramfs. The tools come
// from this host for Bookworm (which must then be Debian 12 amd64 with
// ibverbs-utils, ibverbs-providers, rdmacm-utils, perftest, iproute2 and
// tcpdump installed) and from a Debian 13 tree (debroot.TrixiePeer) for
// Trixie. busybox-static comes from the host in both.
func BuildImageFor(ctx context.Context, cacheDir string, rel Release) (*Image, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("build peer image: %w", err)
	}
	var userland string // the root the tools come from; "" is the host
	var deb string
	var extra []string // more kernel packages unpacked into deb's tree
	var err error
	switch rel {
	case Bookworm:
		deb = os.Getenv("SOFTROCE_PEER_KERNEL_DEB")
		if deb == "" {
			deb, err = fetchKernelDeb(ctx, filepath.Join(cacheDir, "deb"))
		}
	case Trixie:
		deb, err = debroot.Download(ctx, debroot.TrixiePeer(), "linux-image-amd64", "linux-image-", filepath.Join(cacheDir, "deb"))
		if err == nil {
			var tr *debroot.Tree
			if tr, err = debroot.Build(ctx, debroot.TrixiePeer()); err == nil {
				userland = tr.Dir
			}
		}
	case Forky:
		debDir := filepath.Join(cacheDir, "deb")
		for _, p := range []string{"linux-binary-", "linux-modules-"} {
			var d string
			if d, err = debroot.Download(ctx, trixieBackports(), p+forkyKernel, "", debDir); err != nil {
				break
			}
			extra = append(extra, d)
		}
		if err == nil {
			deb, extra = extra[0], extra[1:]
			var tr *debroot.Tree
			if tr, err = debroot.Build(ctx, ForkyPeer()); err == nil {
				userland = tr.Dir
			}
		}
	default:
		return nil, fmt.Errorf("build peer image: unknown Debian release %q (want one of %v)", rel, Releases)
	}
	if err != nil {
		return nil, fmt.Errorf("build %s peer image: %w", rel, err)
	}
	kroot, err := kernelTree(ctx, cacheDir, deb, extra...)
	if err != nil {
		return nil, fmt.Errorf("build %s peer image: %w", rel, err)
	}
	modBase := filepath.Join(kroot, "lib/modules")
	if _, err := os.Stat(modBase); err != nil {
		modBase = filepath.Join(kroot, "usr/lib/modules") // merged /usr in the package
	}
	rels, err := os.ReadDir(modBase)
	if err != nil || len(rels) != 1 {
		return nil, fmt.Errorf("build peer image: want one kernel release under %s (err %v)", modBase, err)
	}
	release := rels[0].Name()
	kernel := filepath.Join(kroot, "boot", "vmlinuz-"+release)
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(modBase, release, "vmlinuz") // 7.x's linux-binary
		if _, err := os.Stat(kernel); err != nil {
			return nil, fmt.Errorf("build peer image: %w", err)
		}
	}

	roots, tools := rootModules, peerTools
	if rel == Forky {
		roots, tools = rootModules7, append(slices.Clone(peerTools), fabricTools...)
	}
	tree, mods, err := imageTree(filepath.Join(modBase, release), userland, roots, tools)
	if err != nil {
		return nil, fmt.Errorf("build %s peer image: %w", rel, err)
	}
	hash := treeHash(tree, deb)
	img := &Image{Kernel: kernel, Release: release, Modules: mods, Hash: hash, Debian: rel}
	dir := filepath.Join(cacheDir, "image-"+hash[:16])
	img.Initrd = filepath.Join(dir, "initrd.gz")
	if _, err := os.Stat(img.Initrd); err == nil {
		return img, nil
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := tree.writeTo(zw); err != nil {
		return nil, fmt.Errorf("build peer image: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("build peer image: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("build peer image: %w", err)
	}
	if err := writeFileAtomic(img.Initrd, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("build peer image: %w", err)
	}
	return img, nil
}

// imageTree assembles the base initramfs for the kernel whose modules are
// in modDir, with the tools and libraries of the root file system
// userland ("" for the host), the modules roots with their dependencies
// and the tools, returning it and the module load order.
func imageTree(modDir, userland string, roots []string, tools []peerTool) (*cpioTree, []string, error) {
	inRoot := func(p string) string { return filepath.Join("/", userland, p) }
	t := newCPIOTree()
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "root", "etc/softroce", "usr/lib64", "usr/sbin", "sbin"} {
		t.mkdirAll(d)
	}
	t.put(cpioEntry{Name: "dev/console", Mode: modeCharDev | 0o600, RMajor: 5, RMinor: 1})
	// Debian's merged /usr: /lib and /lib64 are links into /usr.
	t.symlink("lib", "usr/lib")
	t.symlink("lib64", "usr/lib64")
	t.file("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n::1 localhost\n"))
	t.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	t.file("etc/group", 0o644, []byte("root:x:0:\n"))

	// busybox and its applets in /bin; the real tools in /usr/bin come
	// first in PATH.
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, nil, fmt.Errorf("busybox (apt-get install busybox-static): %w", err)
	}
	t.file("bin/busybox", 0o755, bb)
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			t.symlink("bin/"+a, "busybox")
		}
	}
	if err := fs.WalkDir(rootfsFS, "rootfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := rootfsFS.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "rootfs/")
		if name != "init" {
			name = "bin/" + name
		}
		t.file(name, 0o755, b)
		return nil
	}); err != nil {
		return nil, nil, err
	}

	// Tools, the provider, and every library they need.
	var elfs []string
	for _, tool := range tools {
		p, err := findTool(userland, tool.name)
		if err != nil {
			return nil, nil, fmt.Errorf("%s (apt-get install %s): %w", tool.name, tool.pkg, err)
		}
		b, err := os.ReadFile(inRoot(p))
		if err != nil {
			return nil, nil, err
		}
		t.file("usr/bin/"+tool.name, 0o755, b)
		elfs = append(elfs, p)
	}
	provs, _ := filepath.Glob(inRoot(providerGlob))
	for i, p := range provs {
		provs[i] = "/" + strings.TrimPrefix(strings.TrimPrefix(p, userland), "/")
	}
	if len(provs) == 0 {
		return nil, nil, fmt.Errorf("rxe provider %s (apt-get install ibverbs-providers): %w", providerGlob, fs.ErrNotExist)
	}
	conf, err := os.ReadFile(inRoot(providerConf))
	if err != nil {
		return nil, nil, fmt.Errorf("rxe provider (apt-get install ibverbs-providers): %w", err)
	}
	t.file(providerConf, 0o644, conf)
	for _, p := range provs {
		b, err := os.ReadFile(inRoot(p))
		if err != nil {
			return nil, nil, err
		}
		t.file(p, 0o755, b)
		elfs = append(elfs, p)
	}
	// glibc dlopens libgcc_s for pthread_exit and thread cancellation
	// (rping's threads exit that way); no DT_NEEDED names it, so without
	// it rping aborts ("libgcc_s.so.1 must be installed for pthread_exit
	// to work") and loses its buffered output.
	if _, err := os.Stat(inRoot(libgccS)); err != nil {
		return nil, nil, fmt.Errorf("%s (apt-get install libgcc-s1): %w", libgccS, err)
	}
	elfs = append(elfs, libgccS)
	libs, err := elfdeps.SharedLibs(userland, elfs)
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(libs, libgccS) {
		libs = append(libs, libgccS)
	}
	for _, l := range libs {
		b, err := os.ReadFile(inRoot(l))
		if err != nil {
			return nil, nil, err
		}
		t.file(usrPath(l), 0o755, b)
	}

	// Modules, flat in /lib/modules, loaded in the order of
	// /etc/softroce/modules.
	paths, err := resolveModules(modDir, roots)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, p := range paths {
		b, err := readModule(p)
		if err != nil {
			return nil, nil, err
		}
		n := moduleName(p)
		t.file("usr/lib/modules/"+n+".ko", 0o644, b)
		names = append(names, n)
	}
	t.file("etc/softroce/modules", 0o644, []byte(strings.Join(names, "\n")+"\n"))
	return t, names, nil
}

// usrPath maps a host path to its place in the image's merged /usr.
func usrPath(p string) string {
	for _, d := range []string{"/lib/", "/lib64/", "/bin/", "/sbin/"} {
		if strings.HasPrefix(p, d) {
			return "/usr" + p
		}
	}
	return p
}

// findTool returns the path of a program inside the root file system
// root ("" for the host).
func findTool(root, name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(filepath.Join("/", root, p)); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("tool %s: %w", name, fs.ErrNotExist)
}

// treeHash hashes the image format, the kernel package and every entry.
func treeHash(t *cpioTree, deb string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", imageFormat, filepath.Base(deb))
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := t.entries[n]
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", n, e.Mode, len(e.Data))
		h.Write(e.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// kernelTree returns the directory holding the unpacked kernel package
// deb and the packages extra, unpacking them on first use.
func kernelTree(ctx context.Context, cacheDir, deb string, extra ...string) (root string, err error) {
	root = filepath.Join(cacheDir, "kernel", strings.TrimSuffix(filepath.Base(deb), ".deb"))
	done := root + ".done"
	if _, err := os.Stat(done); err == nil {
		return root, nil
	}
	os.RemoveAll(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	for _, d := range append([]string{deb}, extra...) {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, root).CombinedOutput(); err != nil {
			return "", fmt.Errorf("dpkg-deb -x %s: %w: %s", d, err, out)
		}
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	return root, nil
}

// fetchKernelDeb downloads (once) the linux-image-* package that
// linux-image-amd64 depends on into dir and returns its path.
func fetchKernelDeb(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "linux-image-amd64").Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends linux-image-amd64: %w", err)
	}
	var pkg string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			pkg = f[1]
			break
		}
	}
	if pkg == "" {
		return "", fmt.Errorf("apt-cache depends linux-image-amd64: no linux-image-* dependency in %q", out)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb")); len(m) > 0 {
		sort.Strings(m)
		return m[len(m)-1], nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-o", "APT::Sandbox::User=root", pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s: %w: %s", pkg, err, out)
	}
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) == 0 {
		return "", fmt.Errorf("apt-get download %s: no .deb in %s: %w", pkg, dir, fs.ErrNotExist)
	}
	sort.Strings(m)
	return m[len(m)-1], nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// addTree adds the directories, regular files and symbolic links of the
// host directory dir to cw under the name prefix, parents first.
func addTree(cw *cpioWriter, dir, prefix string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join(prefix, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		perm := uint32(info.Mode().Perm())
		if info.Mode()&fs.ModeSticky != 0 {
			perm |= 0o1000 // /tmp
		}
		switch {
		case d.IsDir():
			return cw.add(cpioEntry{Name: name, Mode: modeDir | perm})
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return cw.add(cpioEntry{Name: name, Mode: modeSymlink | 0o777, Data: []byte(target)})
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return cw.add(cpioEntry{Name: name, Mode: modeFile | perm, Data: data})
		}
		return nil // device nodes, sockets: none in a tree
	})
}

// writeRunInitrd writes the base initramfs followed by a small archive
// holding /cmd.sh (none when cmd is empty), padded so the second archive
// starts on the 4-byte boundary the kernel's unpacker requires.
func writeRunInitrd(path, base, cmd string) error { return writeRunArchive(path, base, cmd, nil, "") }

// writeRunArchive is writeRunInitrd with programs (name → content) added
// to the run archive as /bin/NAME, mode 0755, and the tree chroot ("" for
// none) as /chroot.
func writeRunArchive(path, base, cmd string, programs map[string][]byte, chroot string) error {
	b, err := os.ReadFile(base)
	if err != nil {
		return err
	}
	if cmd != "" || len(programs) > 0 || chroot != "" {
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		var buf bytes.Buffer
		cw := newCPIOWriter(&buf)
		if cmd != "" {
			if err := cw.add(cpioEntry{Name: "cmd.sh", Mode: modeFile | 0o755, Data: []byte(cmd)}); err != nil {
				return err
			}
		}
		names := make([]string, 0, len(programs))
		for n := range programs {
			if n == "" || strings.Contains(n, "/") {
				return fmt.Errorf("run archive: program name %q: want a file name", n)
			}
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := cw.add(cpioEntry{Name: "bin/" + n, Mode: modeFile | 0o755, Data: programs[n]}); err != nil {
				return err
			}
		}
		if chroot != "" {
			if err := addTree(cw, chroot, "chroot"); err != nil {
				return err
			}
		}
		if err := cw.close(); err != nil {
			return err
		}
		b = append(b, buf.Bytes()...)
	}
	return os.WriteFile(path, b, 0o644)
}
