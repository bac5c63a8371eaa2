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
