package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// instruction is one instruction of a Containerfile: its keyword in upper
// case and its arguments, continuation lines joined.
type instruction struct {
	cmd, args string
}

// stage is one FROM of a Containerfile and the instructions after it.
type stage struct {
	from, name string
	ins        []instruction
}

// containerfile is a parsed Containerfile: the ARGs before the first FROM
// and the stages.
type containerfile struct {
	args   map[string]string
	stages []stage
}

// expand replaces ${NAME} and $NAME in s with the default of the global
// ARG NAME, as a FROM line is expanded when no --build-arg is given.
func (cf *containerfile) expand(s string) string {
	return os.Expand(s, func(k string) string { return cf.args[k] })
}

// parseContainerfile reads the Containerfile at path: comments and blank
// lines dropped, lines ending in a backslash joined to the next.
func parseContainerfile(t *testing.T, path string) *containerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cf := &containerfile{args: map[string]string{}}
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && line == "" {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			line += s + " "
			continue
		}
		line += l
		cmd, args, _ := strings.Cut(line, " ")
		line = ""
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			s := stage{from: cf.expand(f[0])}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			cf.stages = append(cf.stages, s)
		case len(cf.stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			cf.args[k] = v
		case len(cf.stages) == 0:
			t.Fatalf("%s: %s before the first FROM", path, in.cmd)
		default:
			cf.stages[len(cf.stages)-1].ins = append(cf.stages[len(cf.stages)-1].ins, in)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cf
}

// the returns the instructions cmd of s.
func (s *stage) the(cmd string) []string {
	var out []string
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// env returns the ENV settings of s (KEY=VALUE form).
func (s *stage) env(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range s.the("ENV") {
		for _, kv := range strings.Fields(a) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("ENV %q: want KEY=VALUE", a)
			}
			m[k] = v
		}
	}
	return m
}

const (
	containerfilePath = "container/Containerfile"
	repoRoot          = ".."
)

// image is the image's added files, built once per test binary by the
// Containerfile's build stage.
var image struct {
	once sync.Once
	dest string // DESTDIR: the image's root for the added files
	out  string // the build step's output
	err  error
}

// buildImage runs the RUN steps of the Containerfile's build stage on this
// machine, as the build stage would run them in /src (the source tree,
// COPY . .), with the stage's ARGs, DESTDIR a fresh directory readable by
// every user, and returns that directory.
func buildImage(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		testenv.Require(t, false, "no C compiler (cc) to build the preload library")
	}
	cf := parseContainerfile(t, containerfilePath)
	build := cf.stages[0]
	image.once.Do(func() {
		dest, err := os.MkdirTemp("", "softroce-image-")
		if err != nil {
			image.err = err
			return
		}
		os.Chmod(dest, 0o755)
		image.dest = dest
		for _, run := range build.the("RUN") {
			cmd := exec.Command("sh", "-c", run)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), "DESTDIR="+dest)
			out, err := cmd.CombinedOutput()
			image.out += string(out)
			if err != nil {
				image.err = err
				return
			}
		}
	})
	if image.err != nil {
		t.Fatalf("the build stage's RUN steps: %v\n%s", image.err, image.out)
	}
	return image.dest
}

func TestMain(m *testing.M) {
	code := m.Run()
	if image.dest != "" {
		os.RemoveAll(image.dest)
	}
	os.Exit(code)
}

// TestContainerfileStages: the image is built from Debian 12 (bookworm)
// with the Go that go.mod names in the build stage and Debian 12 in the
// final one; the final stage copies the build stage's DESTDIR, installs
// the RDMA userspace with apt, runs as a user that is not root, and points
// XDG_CACHE_HOME at the prebuilt preload library.
func TestContainerfileStages(t *testing.T) {
	cf := parseContainerfile(t, containerfilePath)
	if len(cf.stages) != 2 {
		t.Fatalf("%d stages, want build and final", len(cf.stages))
	}
	build, final := cf.stages[0], cf.stages[1]
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if want := "golang:" + string(m[1]) + "-bookworm"; build.from != want || build.name != "build" {
		t.Errorf("build stage FROM %s AS %s, want %s AS build", build.from, build.name, want)
	}
	if final.from != "debian:12-slim" && final.from != "debian:12" && final.from != "debian:bookworm-slim" {
		t.Errorf("final stage FROM %s, want Debian 12", final.from)
	}
	if cf.args["DESTDIR"] == "" {
		t.Error("no global ARG DESTDIR with a default")
	}
	if got := final.the("COPY"); len(got) != 1 || got[0] != "--from=build ${DESTDIR}/ /" {
		t.Errorf("final COPY %q, want the build stage's DESTDIR at /", got)
	}
	if u := final.the("USER"); len(u) != 1 || strings.HasPrefix(u[0], "0") || strings.HasPrefix(u[0], "root") {
		t.Errorf("USER %q: the image must run as a user that is not root", u)
	}
	if got := final.env(t)["XDG_CACHE_HOME"]; got == "" {
		t.Error("the final stage sets no XDG_CACHE_HOME: softroce would look for the preload library in the user's home")
	}
	if pk := aptPackages(t, final); len(pk) == 0 {
		t.Error("the final stage installs no packages")
	}
}

// aptPackages returns the packages the stage's RUN steps apt-get install.
func aptPackages(t *testing.T, s stage) []string {
	t.Helper()
	var pk []string
	for _, run := range s.the("RUN") {
		for _, step := range strings.Split(run, "&&") {
			f := strings.Fields(step)
			if len(f) < 2 || f[0] != "apt-get" || !slices.Contains(f, "install") {
				continue
			}
			for _, w := range f[1:] {
				if w != "install" && !strings.HasPrefix(w, "-") {
					pk = append(pk, w)
				}
			}
		}
	}
	return pk
}

// TestContainerfilePackagesResolveOnDebian12: the packages of the final
// stage's apt-get install resolve on this Debian 12 machine (apt-get
// install --simulate, with the same --no-install-recommends), so the
// final stage's RUN step would find them; CI's machine is Debian 12.
func TestContainerfilePackagesResolveOnDebian12(t *testing.T) {
	osr, _ := os.ReadFile("/etc/os-release")
	testenv.Require(t, strings.Contains(string(osr), "VERSION_CODENAME=bookworm"), "not a Debian 12 (bookworm) machine")
	_, err := exec.LookPath("apt-get")
	testenv.Require(t, err == nil, "no apt-get")
	cf := parseContainerfile(t, containerfilePath)
	pk := aptPackages(t, cf.stages[len(cf.stages)-1])
	for _, want := range []string{"ibverbs-utils", "ibverbs-providers", "perftest"} {
		if !slices.Contains(pk, want) {
			t.Errorf("the image does not install %s", want)
		}
	}
	out, err := exec.Command("apt-get", append([]string{"install", "--simulate", "--no-install-recommends"}, pk...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get install --simulate %s: %v\n%s", strings.Join(pk, " "), err, out)
	}
}

// TestContainerfileBuildStageRuns: the build stage's RUN step, run here,
// puts softroce at /usr/local/bin and its preload library in the final
// stage's XDG_CACHE_HOME; the softroce it built, given that XDG_CACHE_HOME
// and no C compiler on PATH (as in the final image), runs Debian's
// ibv_devices on its device: the preload library is found, not built.
func TestContainerfileBuildStageRuns(t *testing.T) {
	dest := buildImage(t)
	cf := parseContainerfile(t, containerfilePath)
	cache := cf.stages[len(cf.stages)-1].env(t)["XDG_CACHE_HOME"]
	bin := filepath.Join(dest, "usr/local/bin/softroce")
	if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("softroce in the image: %v", err)
	}
	libs, _ := filepath.Glob(filepath.Join(dest, cache, "softroce", "libsoftroce-preload-*.so"))
	if len(libs) != 1 {
		t.Fatalf("preload libraries in the image's cache: %q, want one", libs)
	}
	tool, err := exec.LookPath("ibv_devices")
	testenv.Require(t, err == nil, "ibv_devices is not installed (Debian package ibverbs-utils)")
	empty := t.TempDir()
	cmd := exec.Command(bin, "run", "-d", "rxe5", "--", tool)
	cmd.Env = []string{"PATH=" + empty, "XDG_CACHE_HOME=" + filepath.Join(dest, cache), "XDG_RUNTIME_DIR=" + t.TempDir(), "HOME=" + empty}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rxe5") {
		t.Fatalf("the image's softroce run -- ibv_devices without a compiler: %v\n%s", err, out)
	}
	if after, _ := filepath.Glob(filepath.Join(dest, cache, "softroce", "*")); len(after) != 1 {
		t.Errorf("the cache changed when the image's softroce ran: %q", after)
	}
}
