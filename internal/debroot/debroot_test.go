package debroot

import (
	"slices"
	"testing"
)

func TestParseDependsTakesFirstAlternativeAndProvider(t *testing.T) {
	out := []byte(`libpam-modules
  PreDepends: libaudit1
  PreDepends: libc6
 |PreDepends: debconf
  PreDepends: <debconf-2.0>
    cdebconf
    debconf
  PreDepends: libpam-modules-bin
perftest
  Depends: ibverbs-providers
  Depends: <librdmacm1>
    librdmacm1t64
 |Depends: libfoo1
  Depends: libbar1
  Breaks: libold
  Recommends: libnice
libibverbs1
  Depends: adduser
  Depends: libnl-3-200
libibverbs1
 |Depends: systemd
 |Depends: systemd-standalone-sysusers
  Depends: <systemd-sysusers>
    systemd-standalone-sysusers
    systemd
  Depends: libnl-route-3-200
`)
	got, err := parseDepends(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"libaudit1", "libc6", "libpam-modules-bin", "ibverbs-providers", "librdmacm1t64", "libfoo1", "libnl-3-200", "libnl-route-3-200"}
	if !slices.Equal(got, want) {
		t.Errorf("parseDepends = %v, want %v", got, want)
	}
}

func TestParseDependsRejectsUnprovidedVirtual(t *testing.T) {
	if _, err := parseDepends([]byte("p\n  Depends: <nothing-provides-me>\n")); err == nil {
		t.Error("no error for a virtual package nothing provides")
	}
}

func TestMirrorInReadsBothSourceFormats(t *testing.T) {
	for _, c := range []struct {
		name, text string
		deb822     bool
		want       string
	}{
		{"one-line", "# c\ndeb-src http://src/debian bookworm main\ndeb http://a/debian bookworm main\n", false, "http://a/debian"},
		{"one-line options", "deb [arch=amd64 signed-by=/k.gpg] http://b/debian bookworm main\n", false, "http://b/debian"},
		{"one-line other suite", "deb http://a/debian bookworm-security main\n", false, ""},
		{"deb822", "Types: deb\nURIs: http://s/debian-security\nSuites: bookworm-security\n\nTypes: deb deb-src\n# note\nURIs: http://c/debian\nSuites: bookworm bookworm-updates\nComponents: main\n", true, "http://c/debian"},
		{"deb822 source only", "Types: deb-src\nURIs: http://c/debian\nSuites: bookworm\n", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := mirrorIn(c.text, "bookworm", c.deb822); got != c.want {
				t.Errorf("mirrorIn = %q, want %q", got, c.want)
			}
		})
	}
}

func TestTreeKeyChangesWithAnyVersion(t *testing.T) {
	a := map[string]string{"libc6": "2.41-12", "perftest": "25.01.0+0.80-1"}
	b := map[string]string{"perftest": "25.01.0+0.80-1", "libc6": "2.41-12"}
	if treeKey(a) != treeKey(b) {
		t.Error("the key depends on map order")
	}
	c := map[string]string{"libc6": "2.41-12+deb13u1", "perftest": "25.01.0+0.80-1"}
	if treeKey(a) == treeKey(c) {
		t.Error("the key ignores a version change")
	}
}
