package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holder is verbs_removal.c running in the background, as the user.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bytes.Buffer
	done  chan error
}

// startHolder starts verbs_removal (with args) in env and waits for it to
// have the device open.
func startHolder(t *testing.T, home, prog string, env []string, args ...string) *holder {
	t.Helper()
	h := &holder{cmd: userCommand(t, home, env, prog, args...), out: &bytes.Buffer{}, done: make(chan error, 1)}
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	h.cmd.Stderr = &errb
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if line != "open\n" {
		h.cmd.Process.Kill()
		h.cmd.Wait()
		t.Fatalf("verbs_removal: %q %v\n%s", line, err, errb.String())
	}
	go func() {
		rest, _ := io.ReadAll(br)
		err := h.cmd.Wait()
		h.out.Write(rest)
		h.out.Write(errb.Bytes())
		h.done <- err
	}()
	t.Cleanup(func() { h.cmd.Process.Kill() })
	return h
}

// wait returns the holder's output once it has ended, failing the test
// if it has not within bound.
func (h *holder) wait(t *testing.T, bound time.Duration) (string, error) {
	t.Helper()
	select {
	case err := <-h.done:
		return h.out.String(), err
	case <-time.After(bound):
		t.Fatalf("verbs_removal still running %v later: it hangs", bound)
		return "", nil
	}
}

// TestStopRemovesTheDeviceAsTheKernel: softroce stop (SIGTERM) removes the
// device as the kernel removes an rxe device (ib_unregister_device,
// ib_uverbs_remove_one): at once it is no longer listed nor opened, while
// a program that has it open keeps it and the daemon waits for it to
// close; a program that outlives the grace period gets
// IB_EVENT_DEVICE_FATAL on its async event file and EIO from its next
// verb; a second SIGTERM ends the wait at once; the coverage profile is
// written; and a serve of the same name right after works.
func TestStopRemovesTheDeviceAsTheKernel(t *testing.T) {
	devices := distroTool(t, "ibv_devices", "ibverbs-utils")
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_removal")
	env := userEnv(t, home, "rxe0")
	serve := func(args ...string) {
		t.Helper()
		args = append([]string{"serve", "--background", "-d", "rxe0"}, args...)
		if out, err := runUser(t, userCommand(t, home, nil, "softroce", args...), 70*time.Second); err != nil {
			t.Fatalf("softroce %q: %v\n%s", args, err, out)
		}
	}
	stop := func(args ...string) (string, error, time.Duration) {
		t.Helper()
		start := time.Now()
		out, err := runUser(t, userCommand(t, home, nil, "softroce", append([]string{"stop", "-d", "rxe0"}, args...)...), 70*time.Second)
		return out, err, time.Since(start)
	}
	t.Cleanup(func() { stop("--timeout", "1s") })

	t.Run("grace period over", func(t *testing.T) {
		cov := filepath.Join(home, "run", "removal.cov")
		serve("--grace", "1s", "--coverage", cov)
		h := startHolder(t, home, prog, env)
		out, err, took := stop()
		if err != nil || took < time.Second || took > 10*time.Second {
			t.Fatalf("stop: %v after %v, want success after the 1 s grace period\n%s", err, took, out)
		}
		got, err := h.wait(t, 5*time.Second)
		if err != nil || !strings.Contains(got, "event: local catastrophic error\n") ||
			!strings.Contains(got, "alloc_pd after the event: Input/output error") {
			t.Fatalf("the program past the grace period: %v\n%s\nwant IB_EVENT_DEVICE_FATAL (ibv_event_type_str: local catastrophic error), then EIO", err, got)
		}
		if st, err := os.Stat(cov); err != nil || st.Size() == 0 {
			t.Fatalf("the coverage profile after stop: %v", err)
		}
	})

	t.Run("waits for the programs", func(t *testing.T) {
		serve("--grace", "60s")
		h := startHolder(t, home, prog, env, "close")
		stopped := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err, _ := stop()
			stopped <- err
		}()
		time.Sleep(500 * time.Millisecond)
		out, _ := userCommand(t, home, env, devices).Output()
		if strings.Contains(string(out), "rxe0") {
			t.Errorf("rxe0 still listed once removed:\n%s", out)
		}
		if out, err := runUser(t, userCommand(t, home, env, prog), 10*time.Second); err == nil {
			t.Errorf("a new open of the removed device succeeded:\n%s", out)
		}
		select {
		case err := <-stopped:
			t.Fatalf("stop returned (%v) while a program has the device open", err)
		default:
		}
		h.stdin.Write([]byte("close\n"))
		got, err := h.wait(t, 10*time.Second)
		if err != nil || !strings.Contains(got, "close: 0") {
			t.Fatalf("the program closing the removed device: %v\n%s", err, got)
		}
		if err := <-stopped; err != nil || time.Since(start) > 20*time.Second {
			t.Fatalf("stop once the program closed: %v after %v", err, time.Since(start))
		}
	})

	t.Run("perftest and rping", func(t *testing.T) {
		bw := distroTool(t, "ib_write_bw", "perftest")
		rping := distroTool(t, "rping", "rdmacm-utils")
		serve("--grace", "1s", "--ip", "10.0.0.1/24")
		start := func(name string, args ...string) *stopProg {
			return startStopProg(t, name, userCommand(t, home, env, args[0], args[1:]...))
		}
		progs := []*stopProg{
			start("ib_write_bw server", bw, "-d", "rxe0", "-x", "1", "-D", "30", "-p", "18777"),
			start("rping server", rping, "-s", "-a", "10.0.0.1", "-p", "17999", "-C", "1000000", "-v"),
		}
		time.Sleep(time.Second)
		progs = append(progs,
			start("ib_write_bw client", bw, "-d", "rxe0", "-x", "1", "-D", "30", "-p", "18777", "127.0.0.1"),
			start("rping client", rping, "-c", "-a", "10.0.0.1", "-p", "17999", "-C", "1000000", "-v"))
		time.Sleep(2 * time.Second)
		for _, p := range progs {
			select {
			case err := <-p.done:
				t.Fatalf("%s ended (%v) before the stop:\n%s", p.name, err, p.out.String())
			default:
			}
		}
		out, err, took := stop()
		if err != nil || took > 10*time.Second {
			t.Fatalf("stop: %v after %v\n%s", err, took, out)
		}
		for _, p := range progs {
			select {
			case err := <-p.done:
				// Each fails its next call on the device (EIO), or
				// ends on its peer's end; rping on its rdma_cm IDs'
				// RDMA_CM_EVENT_DEVICE_REMOVAL.
				t.Logf("%s: %v", p.name, err)
				if strings.HasPrefix(p.name, "rping") && !strings.Contains(p.out.String(), "cma detected device removal!!!!\n") {
					t.Errorf("%s without RDMA_CM_EVENT_DEVICE_REMOVAL:\n%s", p.name, tail(p.out.String(), 2000))
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s still running 10 s after the grace period: it hangs\n%s", p.name, p.out.String())
			}
		}
		serve()
		if out, err := runUser(t, userCommand(t, home, env, devices), 10*time.Second); err != nil || !strings.Contains(out, "rxe0") {
			t.Fatalf("ibv_devices on the next serve: %v\n%s", err, out)
		}
		stop()
	})

	t.Run("rping hears the device removal", func(t *testing.T) {
		// cma_process_remove: each rdma_cm ID on the device gets
		// RDMA_CM_EVENT_DEVICE_REMOVAL, on which rping ends; the stop
		// then waits for nothing like its grace period.
		rping := distroTool(t, "rping", "rdmacm-utils")
		serve("--grace", "30s", "--ip", "10.0.0.1/24")
		start := func(name string, args ...string) *stopProg {
			return startStopProg(t, name, userCommand(t, home, env, rping, args...))
		}
		server := start("rping server", "-s", "-a", "10.0.0.1", "-p", "17998", "-C", "1000000", "-v")
		time.Sleep(time.Second)
		client := start("rping client", "-c", "-a", "10.0.0.1", "-p", "17998", "-C", "1000000", "-v")
		time.Sleep(2 * time.Second)
		for _, p := range []*stopProg{server, client} {
			select {
			case err := <-p.done:
				t.Fatalf("%s ended (%v) before the stop:\n%s", p.name, err, p.out.String())
			default:
			}
		}
		out, err, took := stop()
		if err != nil || took > 10*time.Second {
			t.Fatalf("stop: %v after %v, want the programs ended well within the 30 s grace period\n%s", err, took, out)
		}
		for _, p := range []*stopProg{server, client} {
			select {
			case err := <-p.done:
				got := p.out.String()
				if !strings.Contains(got, "cma detected device removal!!!!\n") {
					t.Errorf("%s (%v) without RDMA_CM_EVENT_DEVICE_REMOVAL:\n%s", p.name, err, tail(got, 2000))
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s still running after the stop returned:\n%s", p.name, tail(p.out.String(), 2000))
			}
		}
	})

	t.Run("second SIGTERM", func(t *testing.T) {
		serve("--grace", "60s")
		h := startHolder(t, home, prog, env)
		if out, err, _ := stop("--timeout", "500ms"); err == nil || !strings.Contains(out, "has not ended within 500ms") {
			t.Fatalf("stop --timeout 500ms with a program holding the device: %v\n%s", err, out)
		}
		out, err, took := stop()
		if err != nil || took > 10*time.Second {
			t.Fatalf("a second stop: %v after %v, want the end at once\n%s", err, took, out)
		}
		if got, err := h.wait(t, 5*time.Second); err != nil || !strings.Contains(got, "event: local catastrophic error\n") {
			t.Fatalf("the program after the second SIGTERM: %v\n%s", err, got)
		}
		serve()
		if out, err := runUser(t, userCommand(t, home, env, devices), 10*time.Second); err != nil || !strings.Contains(out, "rxe0") {
			t.Fatalf("ibv_devices on the next serve: %v\n%s", err, out)
		}
	})
}

// tail is the last n bytes of s (a long-running program's output).
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// stopProg is a program attached to the device while it is stopped: its
// output and its end.
type stopProg struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

// startStopProg starts cmd as the program name; the test's end kills it.
func startStopProg(t *testing.T, name string, cmd *exec.Cmd) *stopProg {
	t.Helper()
	p := &stopProg{name: name, cmd: cmd, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}
