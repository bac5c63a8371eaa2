package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

var serveRuns = flag.Int("serveruns", 0, "how many daemons TestServedDeviceIsOpenableOnceListed starts in each of its two ways (0: 50 under CI=true, 5 otherwise)")

// serveRunCount is -serveruns, or its default: CI's root run starts 50
// daemons each way (the programs run as nobody there too); other runs,
// CI's unprivileged one included, 5, since each costs seconds.
func serveRunCount() int {
	switch {
	case *serveRuns > 0:
		return *serveRuns
	case testenv.InCI():
		return 50
	}
	return 5
}

// userEnv returns the export lines' variables that `softroce env -d NAME`
// prints for the user of home (what a script evals).
func userEnv(t *testing.T, home, name string) []string {
	t.Helper()
	out, err := userCommand(t, home, nil, "softroce", "env", "-d", name).Output()
	if err != nil {
		t.Fatalf("softroce env: %v", err)
	}
	return exportVars(t, string(out))
}

// exportVars parses export lines as `eval` would set them (the values
// softroce prints need no unquoting in the tests' directories).
func exportVars(t *testing.T, out string) []string {
	t.Helper()
	var env []string
	for _, l := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(l, "export "); ok {
			if strings.Contains(kv, "'") {
				t.Fatalf("quoted export line %q", l)
			}
			env = append(env, kv)
		}
	}
	return env
}

// runUser runs cmd with a bound and returns its combined output and error.
func runUser(t *testing.T, cmd *exec.Cmd, bound time.Duration) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(bound):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%q still running after %v (killed):\n%s", cmd.Args, bound, out.String())
		return "", nil
	}
}

// TestServedDeviceIsOpenableOnceListed: an unprivileged user starts
// `softroce serve` and polls for the device as one polls for a kernel
// device (Debian's ibv_devices, in the environment softroce env prints);
// the moment it is listed, `ibv_devinfo -d NAME` opens it, and so does
// `softroce run -- ibv_devinfo -d NAME`.
// Then the same with `softroce serve --background` and ibv_devinfo right
// after it returns. Every run must succeed (-serveruns of each).
func TestServedDeviceIsOpenableOnceListed(t *testing.T) {
	devices := distroTool(t, "ibv_devices", "ibverbs-utils")
	devinfo := distroTool(t, "ibv_devinfo", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	env := userEnv(t, home, "rxe0")
	t.Run("listed", func(t *testing.T) {
		for i := range serveRunCount() {
			serve := userCommand(t, home, nil, "softroce", "serve", "-d", "rxe0")
			var serveOut bytes.Buffer
			serve.Stdout, serve.Stderr = &serveOut, &serveOut
			if err := serve.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				out, _ := userCommand(t, home, env, devices).Output()
				if strings.Contains(string(out), "rxe0") {
					break
				}
				if time.Now().After(deadline) {
					serve.Process.Kill()
					serve.Wait()
					t.Fatalf("run %d: rxe0 not listed after 30 s; serve:\n%s", i, serveOut.String())
				}
				time.Sleep(2 * time.Millisecond)
			}
			// Opened directly, as a program in the printed environment
			// does, then through softroce run, which must use the
			// daemon (not wait, not serve its own).
			out, err := runUser(t, userCommand(t, home, env, devinfo, "-d", "rxe0"), 30*time.Second)
			if err == nil {
				var out2 string
				out2, err = runUser(t, userCommand(t, home, nil, "softroce", "run", "-d", "rxe0", "--", devinfo, "-d", "rxe0"), 30*time.Second)
				out += out2
			}
			serve.Process.Signal(syscall.SIGTERM)
			serveErr := serve.Wait()
			if err != nil || !strings.Contains(out, "hca_id:\trxe0") {
				t.Fatalf("run %d: ibv_devinfo -d rxe0 the moment it was listed: %v\n%s\nserve:\n%s", i, err, out, serveOut.String())
			}
			if serveErr != nil {
				t.Fatalf("run %d: serve after SIGTERM: %v\n%s", i, serveErr, serveOut.String())
			}
		}
	})
	t.Run("background", func(t *testing.T) {
		for i := range serveRunCount() {
			out, err := runUser(t, userCommand(t, home, nil, "softroce", "serve", "--background", "-d", "rxe0"), 70*time.Second)
			if err != nil {
				t.Fatalf("run %d: serve --background: %v\n%s", i, err, out)
			}
			if got := exportVars(t, out); strings.Join(got, " ") != strings.Join(env, " ") {
				t.Fatalf("run %d: serve --background printed %q, want softroce env's %q", i, got, env)
			}
			out, err = runUser(t, userCommand(t, home, env, devinfo, "-d", "rxe0"), 30*time.Second)
			if err != nil || !strings.Contains(out, "hca_id:\trxe0") {
				t.Fatalf("run %d: ibv_devinfo -d rxe0 right after serve --background: %v\n%s", i, err, out)
			}
			if out, err := runUser(t, userCommand(t, home, nil, "softroce", "stop", "-d", "rxe0"), 40*time.Second); err != nil {
				t.Fatalf("run %d: softroce stop: %v\n%s", i, err, out)
			}
		}
	})
}

// TestServeBackgroundFailsWithTheReason: serve --background exits
// non-zero with the reason when the daemon cannot start (the name taken,
// a bad flag, a link that cannot be opened), and leaves no daemon behind;
// wait and stop say when no daemon serves the name.
func TestServeBackgroundFailsWithTheReason(t *testing.T) {
	needCC(t)
	home := userHome(t)
	if out, err := runUser(t, userCommand(t, home, nil, "softroce", "serve", "--background", "-d", "rxe1"), 70*time.Second); err != nil {
		t.Fatalf("serve --background: %v\n%s", err, out)
	}
	t.Cleanup(func() { userCommand(t, home, nil, "softroce", "stop", "-d", "rxe1").Run() })
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--background", "-d", "rxe1"}, 1, "another daemon (pid "},
		{[]string{"serve", "--background", "-d", "rxe2", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"serve", "--background", "-d", "eth0"}, 1, "the rxe provider serves only names starting with"},
		// A TAP that is not there: creating one needs CAP_NET_ADMIN,
		// which the user has not.
		{[]string{"serve", "--background", "-d", "rxe2", "--tap", "srnosuch0"}, 1, "srnosuch0"},
		{[]string{"wait", "-d", "rxe2", "--timeout", "100ms"}, 1, "rxe2: no daemon served it within 100ms"},
		{[]string{"stop", "-d", "rxe2"}, 1, "rxe2: no daemon serves it"},
	} {
		cmd := userCommand(t, home, nil, "softroce", tc.args...)
		out, err := runUser(t, cmd, 70*time.Second)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("softroce %q: exit %d (%v), want %d with %q:\n%s", tc.args, code, err, tc.code, tc.want, out)
		}
	}
	if out, err := runUser(t, userCommand(t, home, nil, "softroce", "wait", "-d", "rxe2", "--timeout", "50ms"), 10*time.Second); err == nil {
		t.Fatalf("a daemon serves rxe2 after its failed starts:\n%s", out)
	}
	if out, err := runUser(t, userCommand(t, home, nil, "softroce", "wait", "-d", "rxe1"), 10*time.Second); err != nil {
		t.Fatalf("wait -d rxe1 with its daemon serving: %v\n%s", err, out)
	}
}

// TestKilledDaemonIsReplacedWithoutCleanup: a daemon ended by SIGKILL
// leaves its lock file, socket and tree. A program started then, in the
// environment the daemon printed, gets its error within a second (the
// device cannot be opened); one started through `softroce run` gets a
// daemon of its own; then `softroce serve` of the same name starts
// without any cleanup and serves.
func TestKilledDaemonIsReplacedWithoutCleanup(t *testing.T) {
	devinfo := distroTool(t, "ibv_devinfo", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	env := userEnv(t, home, "rxe0")
	serve := userCommand(t, home, nil, "softroce", "serve", "-d", "rxe0")
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	wait := userCommand(t, home, nil, "softroce", "wait", "-d", "rxe0")
	if out, err := runUser(t, wait, 40*time.Second); err != nil {
		serve.Process.Kill()
		serve.Wait()
		t.Fatalf("softroce wait: %v\n%s", err, out)
	}
	serve.Process.Kill()
	serve.Wait()
	dir := filepath.Join(home, "run", "softroce", "rxe0")
	for _, p := range []string{"lock", "sock", "sysfs/class/infiniband_verbs/uverbs0/ibdev"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("the killed daemon left no %s: %v (the test proves nothing)", p, err)
		}
	}
	start := time.Now()
	out, err := runUser(t, userCommand(t, home, env, devinfo, "-d", "rxe0"), 10*time.Second)
	if err == nil || time.Since(start) > time.Second || !strings.Contains(out, "softroce: no daemon serves") {
		t.Fatalf("ibv_devinfo on the killed daemon's device: %v after %v, want a failure within 1 s saying no daemon serves it:\n%s", err, time.Since(start), out)
	}
	t.Logf("ibv_devinfo on the killed daemon's device (%v): %s", time.Since(start), out)
	out, err = runUser(t, userCommand(t, home, nil, "softroce", "run", "-d", "rxe0", "--", devinfo, "-d", "rxe0"), 30*time.Second)
	if err != nil || !strings.Contains(out, "hca_id:\trxe0") {
		t.Fatalf("softroce run after the kill: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	bg := userCommand(t, home, nil, "softroce", "serve", "--background", "-d", "rxe0")
	if out, err := runUser(t, bg, 70*time.Second); err != nil || ctx.Err() != nil {
		t.Fatalf("serve --background after the kill: %v\n%s", err, out)
	}
	t.Cleanup(func() { userCommand(t, home, nil, "softroce", "stop", "-d", "rxe0").Run() })
	out, err = runUser(t, userCommand(t, home, env, devinfo, "-d", "rxe0"), 30*time.Second)
	if err != nil || !strings.Contains(out, "hca_id:\trxe0") {
		t.Fatalf("ibv_devinfo on the new daemon: %v\n%s", err, out)
	}
}

// readmeCIRecipe returns the shell lines of README.md's CI recipe: the
// first sh block after the paragraph that starts "The CI recipe:".
func readmeCIRecipe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\nThe CI recipe:")
	if !ok {
		t.Fatal(`README.md has no paragraph starting "The CI recipe:"`)
	}
	_, after, ok = strings.Cut(after, "\n```sh\n")
	if !ok {
		t.Fatal("README.md's CI recipe has no sh block")
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok || strings.Count(block, "\n") != 1 {
		t.Fatalf("README.md's CI recipe is not two lines:\n%s", block)
	}
	return block + "\n"
}

// TestREADMECIRecipe runs README.md's CI recipe as written, with sh -e,
// as an unprivileged user with softroce on the PATH: it must succeed, and
// leave a daemon that softroce stop ends.
func TestREADMECIRecipe(t *testing.T) {
	distroTool(t, "ibv_devinfo", "ibverbs-utils")
	needCC(t)
	recipe := readmeCIRecipe(t)
	home := userHome(t)
	userEnv(t, home, "rxe0") // puts softroce in home
	path := "PATH=" + home + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	out, err := runUser(t, userCommand(t, home, []string{path}, "sh", "-ec", recipe), 90*time.Second)
	stop := userCommand(t, home, nil, "softroce", "stop", "-d", "rxe0")
	stopOut, stopErr := runUser(t, stop, 40*time.Second)
	if err != nil {
		t.Fatalf("the README's CI recipe:\n%s\nfailed: %v\n%s", recipe, err, out)
	}
	if stopErr != nil {
		t.Fatalf("softroce stop after the recipe: %v\n%s", stopErr, stopOut)
	}
}
