package debroot

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// buildTimeout bounds a build in ForTest: the download on a slow mirror.
const buildTimeout = 10 * time.Minute

var forTest struct {
	sync.Mutex
	trees map[string]*Tree
	errs  map[string]error
}

// ForTest returns the tree cfg describes for a test, built once per test
// binary (later calls with the same suite and packages reuse it). It
// needs root (testenv.RequireRoot) and the host tools Build and Command
// use (testenv.Require: skipped locally, failed under CI); a failed build
// fails t.
func ForTest(t testing.TB, cfg Config) *Tree {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb", "unshare", "chroot", "busybox"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed (apt, dpkg, util-linux, coreutils, busybox-static)")
	}
	key := cfg.Suite + " " + strings.Join(cfg.Packages, " ") + " -" + strings.Join(cfg.Omit, " -")
	forTest.Lock()
	defer forTest.Unlock()
	if forTest.trees == nil {
		forTest.trees = make(map[string]*Tree)
		forTest.errs = make(map[string]error)
	}
	tr, built := forTest.trees[key]
	err := forTest.errs[key]
	if !built && err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		tr, err = Build(ctx, cfg)
		cancel()
		forTest.trees[key], forTest.errs[key] = tr, err
	}
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// RequireUserArgv skips t (fails it under CI) unless UserArgv's command
// lines can run here: nobody may make a user namespace (unshare --user
// --map-root-user, as setpriv makes the root test nobody).
func RequireUserArgv(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"unshare", "--user", "--map-root-user", "--mount", "true").CombinedOutput()
	testenv.Require(t, err == nil, "this host allows no unprivileged user namespace ("+strings.TrimSpace(string(out))+"), which UserArgv needs")
}
