package debroot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// archiveKeyring is the Debian archive keyring of the host
// (debian-archive-keyring), which signs the other suites' Release files
// too.
const archiveKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// apt runs the host's apt-get and apt-cache on a private configuration:
// a sources file naming only one suite, and lists, caches and an empty
// dpkg status of its own, so the host's apt state is never read or
// changed.
type apt struct {
	dir  string // the private apt directory
	opts []string
}

func newApt(cache string, cfg Config) (*apt, error) {
	mirror := cfg.Mirror
	if mirror == "" {
		mirror = os.Getenv("SOFTROCE_DEBIAN_MIRROR")
	}
	if mirror == "" {
		m, err := hostMirror()
		if err != nil {
			return nil, fmt.Errorf("debroot: %w (set SOFTROCE_DEBIAN_MIRROR to a Debian archive URI)", err)
		}
		mirror = m
	}
	dir := filepath.Join(cache, "apt", cfg.Suite)
	for _, d := range []string{"lists/partial", "archives/partial", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
	}
	src := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", archiveKeyring, mirror, cfg.Suite)
	srcFile := filepath.Join(dir, "sources.list")
	if old, err := os.ReadFile(srcFile); err != nil || string(old) != src {
		if err := os.WriteFile(srcFile, []byte(src), 0o644); err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		os.Remove(filepath.Join(dir, "updated")) // new sources: refresh the lists
	}
	return &apt{dir: dir, opts: []string{
		"-o", "Dir::Etc::sourcelist=" + srcFile,
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::Etc::preferences=" + filepath.Join(dir, "preferences"),
		"-o", "Dir::Etc::preferencesparts=" + filepath.Join(dir, "preferences.d"),
		"-o", "Dir::State=" + dir,
		"-o", "Dir::State::lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::State::status=/dev/null",
		"-o", "Dir::Cache=" + dir,
		"-o", "Dir::Cache::archives=" + filepath.Join(dir, "archives"),
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false",
		"-o", "APT::Sandbox::User=root",
		"-q",
	}}, nil
}

func (a *apt) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	return output(ctx, dir, name, append(append([]string{}, a.opts...), args...)...)
}

// update refreshes the lists unless the last refresh is younger than
// ListsMaxAge.
func (a *apt) update(ctx context.Context) error {
	stamp := filepath.Join(a.dir, "updated")
	if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < ListsMaxAge {
		return nil
	}
	if _, err := a.run(ctx, "", "apt-get", "update"); err != nil {
		return fmt.Errorf("debroot: %w", err)
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// closure returns roots and their run-time dependencies: Depends and
// Pre-Depends, the first alternative of each group (for a virtual package,
// its first provider), leaving out the groups scriptOnly satisfies and the
// packages in omit.
func (a *apt) closure(ctx context.Context, roots, omit []string) ([]string, error) {
	seen := make(map[string]bool)
	for _, p := range omit {
		seen[p] = true
	}
	next := append([]string{}, roots...)
	for len(next) > 0 {
		var batch []string
		for _, p := range next {
			if !seen[p] {
				seen[p] = true
				batch = append(batch, p)
			}
		}
		if len(batch) == 0 {
			break
		}
		out, err := a.run(ctx, "", "apt-cache", append([]string{"depends",
			"--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
			"--no-replaces", "--no-enhances"}, batch...)...)
		if err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		deps, err := parseDepends(out)
		if err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
		next = deps
	}
	pkgs := make([]string, 0, len(seen))
	for p := range seen {
		if slices.Contains(omit, p) {
			continue
		}
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	return pkgs, nil
}

// parseDepends reads `apt-cache depends` output and returns, for every
// dependency group, the package that satisfies it (see closure). The
// output has a line per package, then "  Depends: NAME" lines, with
// " |Depends:" marking a line whose group continues on the next line and
// "<NAME>" a virtual package whose providers follow, indented by four.
func parseDepends(out []byte) ([]string, error) {
	type alt struct {
		name      string
		providers []string
	}
	var (
		deps  []string
		group []alt
		open  bool // the last dependency line ended with '|'
	)
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		g := group
		group = nil
		for _, a := range g {
			if scriptOnly[strings.Trim(a.name, "<>")] {
				return nil
			}
		}
		for _, a := range g {
			if !strings.HasPrefix(a.name, "<") {
				deps = append(deps, a.name)
				return nil
			}
			if len(a.providers) > 0 {
				deps = append(deps, a.providers[0])
				return nil
			}
		}
		return fmt.Errorf("no package provides %s", g[0].name)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "    "): // a provider of the last virtual package
			if len(group) > 0 {
				g := &group[len(group)-1]
				g.providers = append(g.providers, strings.TrimSpace(l))
			}
		case strings.HasPrefix(l, "  ") || strings.HasPrefix(l, " |"):
			key, name, ok := strings.Cut(strings.TrimSpace(l[2:]), ":")
			if !ok {
				return nil, fmt.Errorf("apt-cache depends: unexpected line %q", l)
			}
			if key != "Depends" && key != "PreDepends" {
				continue
			}
			if !open {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			group = append(group, alt{name: strings.TrimSpace(name)})
			open = l[1] == '|'
		default: // the next package
			if err := flush(); err != nil {
				return nil, err
			}
			open = false
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return deps, sc.Err()
}

// versions returns the candidate version of each package.
func (a *apt) versions(ctx context.Context, pkgs []string) (map[string]string, error) {
	out, err := a.run(ctx, "", "apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...)
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	v := make(map[string]string)
	for _, para := range strings.Split(string(out), "\n\n") {
		f := parseControl([]byte(para))
		if f["Package"] != "" {
			v[f["Package"]] = f["Version"]
		}
	}
	for _, p := range pkgs {
		if v[p] == "" {
			return nil, fmt.Errorf("debroot: no version of %s in the lists", p)
		}
	}
	return v, nil
}

// hostMirror returns the archive URI the host's apt uses for the host's
// own release (the suite named VERSION_CODENAME in /etc/os-release), read
// from the one-line and deb822 sources files.
func hostMirror() (string, error) {
	osr, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "", err
	}
	var codename string
	for _, l := range strings.Split(string(osr), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
			codename = strings.Trim(v, `"`)
		}
	}
	if codename == "" {
		return "", errors.New("no VERSION_CODENAME in /etc/os-release")
	}
	files := []string{"/etc/apt/sources.list"}
	for _, g := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if uri := mirrorIn(string(b), codename, strings.HasSuffix(f, ".sources")); uri != "" {
			return uri, nil
		}
	}
	return "", fmt.Errorf("no apt source on this host names the suite %s", codename)
}

// mirrorIn returns the URI of the first "deb" source in text whose suites
// include suite, or "". deb822 says whether text is a .sources file.
func mirrorIn(text, suite string, deb822 bool) string {
	if !deb822 {
		for _, l := range strings.Split(text, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 || f[0] != "deb" {
				continue
			}
			f = f[1:]
			if len(f) > 0 && strings.HasPrefix(f[0], "[") {
				for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
					f = f[1:]
				}
				if len(f) > 0 {
					f = f[1:]
				}
			}
			if len(f) >= 2 && f[1] == suite {
				return f[0]
			}
		}
		return ""
	}
	for _, para := range strings.Split(text, "\n\n") {
		fields := make(map[string]string)
		for _, l := range strings.Split(para, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, "#") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if !strings.Contains(" "+fields["types"]+" ", " deb ") {
			continue
		}
		for _, s := range strings.Fields(fields["suites"]) {
			if s == suite {
				if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
					return uris[0]
				}
			}
		}
	}
	return ""
}
