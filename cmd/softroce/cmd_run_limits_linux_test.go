package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

// hogNofile is the daemon's RLIMIT_NOFILE in TestConnectionHogLeavesPingpongsRunning:
// half of it is the clients' connections' budget (uverbsd.Config.MaxFiles).
const hogNofile = 512

// TestConnectionHogLeavesPingpongsRunning: while one program opens the
// device three times as often as the daemon has descriptors
// (`prlimit --nofile=512`) and holds what it got for 10 s, an ibv_rc_pingpong pair
// on the same daemon completes with its data checked; the hog's opens past
// its share fail with EMFILE ("Too many open files"), the daemon names it
// on its stderr and its coverage report counts the refusals (failed verb
// daemon:OPEN), and after the hog a new pair completes too.
func TestConnectionHogLeavesPingpongsRunning(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	_, err := exec.LookPath("prlimit")
	testenv.Require(t, err == nil, "prlimit is not installed (util-linux)")
	home := userHome(t)
	userCommand(t, home, nil, "softroce") // copies softroce into home
	var serveErr lockedBuffer
	serve := userCommand(t, home, nil, "prlimit", fmt.Sprintf("--nofile=%d:%d", hogNofile, hogNofile), "--",
		filepath.Join(home, "softroce"), "serve", "-d", "rxe17", "--ip", "10.78.0.1/24")
	serve.Stderr = &serveErr
	env := startServe(t, serve)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(home, "hog.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(home, "run", "release-hog")
	hog := userCommand(t, home, append(env, "SOFTROCE_HOG_OPENS="+strconv.Itoa(3*hogNofile), "SOFTROCE_HOG_RELEASE="+release),
		bin, "-test.run=^TestHelperConnectionHog$", "-test.v")
	hogOut, err := hog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	hog.Stderr = hog.Stdout
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	defer hog.Process.Kill()
	// The hog says how its opens went once it holds its connections.
	lines := bufio.NewScanner(hogOut)
	var counts string
	for lines.Scan() {
		if c, ok := strings.CutPrefix(lines.Text(), "hog holds: "); ok {
			counts = c
			break
		}
	}
	held := time.Now()
	if counts == "" {
		hog.Wait()
		t.Fatalf("the hog ended before holding its connections; daemon stderr:\n%s", serveErr.String())
	}
	t.Logf("the hog's %d opens: %s", 3*hogNofile, counts)
	if !strings.Contains(counts, "too many open files:") {
		t.Errorf("no open of the hog failed with EMFILE: %s", counts)
	}
	pingpongs(t, home, env, tool, []string{"-d", "rxe17", "-g", "1", "-n", "500", "-c", "-p", "18851"},
		"4096000 bytes in", "4096000 bytes in")
	// The hog holds its connections for 10 s, then lets go; the daemon
	// serves on.
	time.Sleep(time.Until(held.Add(10 * time.Second)))
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if err := hog.Wait(); err != nil {
		t.Errorf("hog: %v", err)
	}
	pingpongs(t, home, env, tool, []string{"-d", "rxe17", "-g", "1", "-n", "100", "-c", "-p", "18852"},
		"819200 bytes in", "819200 bytes in")
	if !strings.Contains(serveErr.String(), "(hog.test): connection refused: ") {
		t.Errorf("the daemon's stderr does not name the hog:\n%s", serveErr.String())
	}
	// The coverage report counts the refused opens.
	out, err := userCommand(t, home, nil, "softroce", "coverage", "--live", "-d", "rxe17").CombinedOutput()
	if err != nil || !regexp.MustCompile(`daemon:OPEN +EMFILE +\d+`).Match(out) {
		t.Errorf("softroce coverage --live: %v; no daemon:OPEN EMFILE in:\n%s", err, out)
	}
}

// TestHelperConnectionHog is the hog of TestConnectionHogLeavesPingpongsRunning
// (it runs only in that test's child): it opens the device
// SOFTROCE_HOG_OPENS times, prints how each open went ("hog holds:
// ..."), and holds the connections it got until SOFTROCE_HOG_RELEASE
// exists (at most 60 s).
func TestHelperConnectionHog(t *testing.T) {
	opens, _ := strconv.Atoi(os.Getenv("SOFTROCE_HOG_OPENS"))
	if opens == 0 {
		t.Skip("the child of TestConnectionHogLeavesPingpongsRunning")
	}
	sock := os.Getenv("SOFTROCE_SOCK")
	counts := map[string]int{}
	var held []*net.UnixConn
	buf := make([]byte, 256)
	for range opens {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			counts["dial: "+err.Error()]++
			continue
		}
		open := preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode))
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var h preload.Header
		if _, _, err = c.WriteMsgUnix(open, nil, nil); err == nil {
			var n int
			if n, _, _, _, err = c.ReadMsgUnix(buf, make([]byte, 64)); err == nil {
				h, _, err = preload.ParseFrame(buf[:n])
			}
		}
		switch {
		case err != nil:
			counts["OPEN: "+err.Error()]++
			c.Close()
		case h.Ret == 0:
			held = append(held, c)
		default:
			counts[unix.Errno(-h.Ret).Error()]++
			c.Close()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "opened: %d", len(held))
	for k, v := range counts {
		fmt.Fprintf(&b, ", %s: %d", k, v)
	}
	fmt.Printf("hog holds: %s\n", b.String())
	release := os.Getenv("SOFTROCE_HOG_RELEASE")
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(release); err == nil {
			break
		}
	}
	for _, c := range held {
		c.Close()
	}
}

// lockedBuffer is a bytes.Buffer one goroutine writes while another reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
