package peer

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
)

var testImage struct {
	sync.Mutex
	imgs map[Release]*Image
}

// buildTestImage builds (or finds in the cache) the Debian 12 peer image,
// once per test binary, skipping the test where the host lacks the Debian
// packages the image is made of.
func buildTestImage(t *testing.T) *Image { return buildTestImageFor(t, Bookworm) }

// buildTestImageFor is buildTestImage for the Debian release rel.
func buildTestImageFor(t *testing.T, rel Release) *Image {
	t.Helper()
	testImage.Lock()
	defer testImage.Unlock()
	if img := testImage.imgs[rel]; img != nil {
		return img
	}
	_, err := os.Stat("/usr/bin/qemu-system-x86_64")
	testenv.Require(t, err == nil, "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	_, err = os.Stat("/bin/busybox")
	testenv.Require(t, err == nil, "busybox is not installed (apt-get install busybox-static)")
	if rel != Bookworm {
		_, err = exec.LookPath("xz")
		testenv.Require(t, err == nil, "xz is not installed (apt-get install xz-utils)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	img, err := BuildImageFor(ctx, "", rel)
	if err != nil {
		t.Fatalf("BuildImageFor %s: %v", rel, err)
	}
	t.Logf("%s image %s (kernel %s, %d modules) ready in %v", rel, img.Initrd, img.Release, len(img.Modules), time.Since(start).Round(time.Millisecond))
	if testImage.imgs == nil {
		testImage.imgs = make(map[Release]*Image)
	}
	testImage.imgs[rel] = img
	return img
}

func TestImageBuild(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImage(t)
	if !strings.HasPrefix(img.Release, "6.1.") || img.Debian != Bookworm {
		t.Errorf("kernel release %q of %s, want Debian 12's 6.1", img.Release, img.Debian)
	}
	checkImage(t, img)
}

// TestImageBuildTrixie checks the Debian 13 image as TestImageBuild checks
// Debian 12's, and that its kernel is 6.12 and its tools and libraries are
// the files of Debian 13's packages (rdma-core 56, perftest 25.01), not
// the host's.
func TestImageBuildTrixie(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, Trixie)
	if !strings.HasPrefix(img.Release, "6.12.") || img.Debian != Trixie {
		t.Errorf("kernel release %q of %s, want Debian 13's 6.12", img.Release, img.Debian)
	}
	byName := checkImage(t, img)
	tr := debroot.ForTest(t, debroot.TrixiePeer())
	for pkg, prefix := range map[string]string{"ibverbs-providers": "56.", "libibverbs1": "56.", "perftest": "25.01"} {
		if v := tr.Versions[pkg]; !strings.HasPrefix(v, prefix) {
			t.Errorf("the Debian 13 tree has %s %q, want %s*", pkg, v, prefix)
		}
	}
	for _, p := range []string{"/usr/bin/ib_write_bw", "/usr/bin/ibv_rc_pingpong", "/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"} {
		want, err := os.ReadFile(filepath.Join(tr.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := byName[strings.TrimPrefix(p, "/")].Data; !bytes.Equal(got, want) {
			t.Errorf("%s in the image (%d bytes) is not the Debian 13 tree's (%d bytes)", p, len(got), len(want))
		}
		if host, err := os.ReadFile(p); err == nil && bytes.Equal(host, want) {
			t.Errorf("%s: the host's file and Debian 13's are the same", p)
		}
	}
}

// TestImageBuildForky checks the Linux 7.3 image as TestImageBuild checks
// Debian 12's, and that its kernel is trixie-backports' 7.3 and its tools
// and libraries are the files of Debian 14's packages (rdma-core 65, its
// glibc), not the host's.
func TestImageBuildForky(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, Forky)
	if !strings.HasPrefix(img.Release, "7.3.") || img.Debian != Forky {
		t.Errorf("kernel release %q of %s, want trixie-backports' 7.3", img.Release, img.Debian)
	}
	byName := checkImage(t, img)
	tr := debroot.ForTest(t, ForkyPeer())
	for pkg, prefix := range map[string]string{"ibverbs-providers": "65.", "libibverbs1": "65.", "libc6": "2.43"} {
		if v := tr.Versions[pkg]; !strings.HasPrefix(v, prefix) {
			t.Errorf("the Debian 14 tree has %s %q, want %s*", pkg, v, prefix)
		}
	}
	for _, p := range []string{"/usr/bin/ib_write_bw", "/usr/bin/ibv_rc_pingpong", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav65.so"} {
		want, err := os.ReadFile(filepath.Join(tr.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := byName[strings.TrimPrefix(p, "/")].Data; !bytes.Equal(got, want) {
			t.Errorf("%s in the image (%d bytes) is not the Debian 14 tree's (%d bytes)", p, len(got), len(want))
		}
		if host, err := os.ReadFile(p); err == nil && bytes.Equal(host, want) {
			t.Errorf("%s: the host's file and Debian 14's are the same", p)
		}
	}
}

// checkImage checks the content every peer image must have and returns
// the image's entries by name.
func checkImage(t *testing.T, img *Image) map[string]cpioEntry {
	f, err := os.Open(img.Initrd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readCPIO(zr)
	if err != nil {
		t.Fatalf("read initramfs: %v", err)
	}
	byName := make(map[string]cpioEntry)
	for _, e := range entries {
		byName[e.Name] = e
	}
	isELF := func(e cpioEntry) bool { return bytes.HasPrefix(e.Data, []byte("\x7fELF")) }
	var want []string
	want = append(want, "init", "bin/busybox", "bin/softroce-agent", "bin/softroce-listening",
		"etc/libibverbs.d/rxe.driver", "etc/softroce/modules",
		"usr/lib64/ld-linux-x86-64.so.2", "usr/lib/x86_64-linux-gnu/libc.so.6",
		"usr/lib/x86_64-linux-gnu/libibverbs.so.1", "usr/lib/x86_64-linux-gnu/librdmacm.so.1")
	for _, tool := range peerTools {
		want = append(want, "usr/bin/"+tool.name)
	}
	mods := []string{"rdma_rxe", "ib_core", "ib_uverbs", "udp_tunnel", "ip6_udp_tunnel", "virtio_net", "rdma_ucm", "8021q"}
	if img.Debian != Forky {
		mods = append(mods, "crc32_generic") // 7.x's rxe uses the crc32 library
	}
	if img.Debian == Bookworm {
		mods = append(mods, "virtio", "virtio_pci") // built in from Debian 13's 6.12 on
	}
	for _, m := range mods {
		want = append(want, "usr/lib/modules/"+m+".ko")
	}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			e, ok := byName[name]
			if !ok {
				t.Fatalf("%s missing from the image", name)
			}
			if e.Mode&modeTypeBit != modeFile {
				t.Errorf("%s: mode %o, want a regular file", name, e.Mode)
			}
			if (strings.HasPrefix(name, "usr/") || name == "bin/busybox") && !isELF(e) {
				t.Errorf("%s is not an ELF file", name)
			}
		})
	}
	if e := byName["dev/console"]; e.Mode&modeTypeBit != modeCharDev || e.RMajor != 5 || e.RMinor != 1 {
		t.Errorf("dev/console: mode %o rdev %d:%d, want char 5:1", e.Mode, e.RMajor, e.RMinor)
	}
	if e := byName["bin/sh"]; e.Mode&modeTypeBit != modeSymlink || string(e.Data) != "busybox" {
		t.Errorf("bin/sh: mode %o -> %q, want a link to busybox", e.Mode, e.Data)
	}
	if len(fileGlob(byName, "usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav")) == 0 {
		t.Error("the rxe provider librxe-rdmav*.so is missing")
	}
	// Load order: every module after the modules it depends on.
	order := strings.Fields(string(byName["etc/softroce/modules"].Data))
	pos := make(map[string]int)
	for i, m := range order {
		pos[m] = i
	}
	uverbs := [2]string{"ib_uverbs", "rdma_rxe"}
	if img.Debian == Forky {
		uverbs = [2]string{"ib_uverbs_support", "ib_uverbs"} // 7.x: rxe needs neither
	}
	for _, pair := range [][2]string{{"ib_core", "rdma_rxe"}, uverbs, {"udp_tunnel", "rdma_rxe"}, {"ib_cm", "rdma_ucm"}, {"garp", "8021q"}} {
		a, okA := pos[pair[0]]
		b, okB := pos[pair[1]]
		if !okA || !okB || a >= b {
			t.Errorf("module order %v: want %s before %s", order, pair[0], pair[1])
		}
	}
	if got := strings.Join(order, " "); got != strings.Join(img.Modules, " ") {
		t.Errorf("etc/softroce/modules %q, Image.Modules %q", got, img.Modules)
	}

	// A rebuild with the same inputs is a cache hit with the same hash.
	start := time.Now()
	again, err := BuildImageFor(context.Background(), "", img.Debian)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash != img.Hash || again.Initrd != img.Initrd {
		t.Errorf("rebuild: hash %s at %s, want %s at %s", again.Hash, again.Initrd, img.Hash, img.Initrd)
	}
	t.Logf("cached rebuild in %v", time.Since(start).Round(time.Millisecond))
	return byName
}

func fileGlob(m map[string]cpioEntry, prefix string) []string {
	var out []string
	for n := range m {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func TestCPIORoundTrip(t *testing.T) {
	tr := newCPIOTree()
	tr.file("a/b/c.txt", 0o644, []byte("hello"))
	tr.file("a/x", 0o755, []byte("1234"))
	tr.file("empty", 0o600, nil)
	tr.symlink("a/link", "b/c.txt")
	tr.put(cpioEntry{Name: "dev/console", Mode: modeCharDev | 0o600, RMajor: 5, RMinor: 1})
	var buf bytes.Buffer
	if err := tr.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not a multiple of 4", buf.Len())
	}
	// A second archive appended after zero padding, as the kernel allows.
	buf.Write(make([]byte, 8))
	cw := newCPIOWriter(&buf)
	if err := cw.add(cpioEntry{Name: "cmd.sh", Mode: modeFile | 0o755, Data: []byte("exit 3\n")}); err != nil {
		t.Fatal(err)
	}
	if err := cw.close(); err != nil {
		t.Fatal(err)
	}
	got, err := readCPIO(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	want := "a a/b a/b/c.txt a/link a/x dev dev/console empty cmd.sh"
	if strings.Join(names, " ") != want {
		t.Fatalf("entries %q, want %q", strings.Join(names, " "), want)
	}
	check := []struct {
		name string
		mode uint32
		data string
	}{
		{"a", modeDir | 0o755, ""},
		{"a/b/c.txt", modeFile | 0o644, "hello"},
		{"a/link", modeSymlink | 0o777, "b/c.txt"},
		{"empty", modeFile | 0o600, ""},
		{"cmd.sh", modeFile | 0o755, "exit 3\n"},
	}
	for _, c := range check {
		t.Run(c.name, func(t *testing.T) {
			for _, e := range got {
				if e.Name == c.name {
					if e.Mode != c.mode || string(e.Data) != c.data {
						t.Errorf("mode %o data %q, want %o %q", e.Mode, e.Data, c.mode, c.data)
					}
					return
				}
			}
			t.Fatal("missing")
		})
	}
}

func TestCPIOTruncated(t *testing.T) {
	tr := newCPIOTree()
	tr.file("f", 0o644, []byte("some content"))
	var buf bytes.Buffer
	if err := tr.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for n := 1; n < len(full); n++ {
		if _, err := readCPIO(bytes.NewReader(full[:n])); err == nil {
			t.Errorf("truncated to %d of %d bytes: no error", n, len(full))
		}
	}
	if _, err := readCPIO(io.MultiReader(strings.NewReader("070702"), bytes.NewReader(full[6:]))); err == nil {
		t.Error("bad magic: no error")
	}
}
