package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/softroce/softroce/uverbsd"
)

// serve --background starts the daemon as a child process (this
// executable, the same arguments) in a session of its own, its output in
// a log file, and waits until the child says, on a pipe, that the device
// can be opened. The child finds the pipe and its log through these
// variables.
const (
	readyFDEnv  = "SOFTROCE_SERVE_READY_FD"
	readyLogEnv = "SOFTROCE_SERVE_LOG"
	// readyLine is what the child writes on the pipe once the device
	// is published and its socket accepts.
	readyLine = "ready\n"
	// backgroundStartWait bounds the wait for the child: long enough for
	// a TAP's duplicate address detection, short enough for a CI job.
	backgroundStartWait = 60 * time.Second
	// serveLogName is the log of a background daemon in its directory.
	serveLogName = "serve.log"
)

// backgroundChild reports whether this serve is the child of a serve
// --background: ready, then, tells the parent the device can be opened
// and moves the log to its name (serveLogName in dir).
func backgroundChild() (ready func(dir string), err error) {
	v, ok := os.LookupEnv(readyFDEnv)
	if !ok {
		return nil, nil
	}
	log := os.Getenv(readyLogEnv)
	os.Unsetenv(readyFDEnv)
	os.Unsetenv(readyLogEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a descriptor", readyFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "ready")
	syscall.CloseOnExec(fd)
	return func(dir string) {
		if log != "" {
			os.Rename(log, filepath.Join(dir, serveLogName))
		}
		f.WriteString(readyLine)
		f.Close()
	}, nil
}

// serveBackground runs serve's arguments in a child and returns once it
// is ready (printing the export lines that softroce env prints), or with
// the child's reason when it ended before (its log, on stderr).
func serveBackground(e *env, name, dir, so string) error {
	if pid, held := uverbsd.Held(dir); held {
		return fmt.Errorf("%s: another daemon (pid %d) serves it (softroce stop -d %s ends it)", name, pid, name)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := uverbsd.PrivateDir(dir); err != nil {
		return err
	}
	log, err := os.CreateTemp(dir, ".serve-*.log")
	if err != nil {
		return err
	}
	defer log.Close()
	r, w, err := os.Pipe()
	if err != nil {
		os.Remove(log.Name())
		return err
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		w.Close()
		os.Remove(log.Name())
		return err
	}
	defer null.Close()
	cmd := exec.Command(exe, append([]string{"serve"}, e.args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, log, log
	cmd.ExtraFiles = []*os.File{w} // descriptor 3
	cmd.Env = append(os.Environ(), readyFDEnv+"=3", readyLogEnv+"="+log.Name())
	// A session of its own: the terminal's or the CI step's end (SIGHUP,
	// its process group's signals) does not end the daemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		os.Remove(log.Name())
		return err
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64))
		got <- b
	}()
	var line []byte
	select {
	case line = <-got:
	case <-time.After(backgroundStartWait):
		cmd.Process.Kill()
		line = <-got
		cmd.Wait()
		os.Remove(log.Name())
		return fmt.Errorf("%s: the daemon (pid %d) was not ready within %v; killed", name, cmd.Process.Pid, backgroundStartWait)
	}
	if bytes.Equal(line, []byte(readyLine)) {
		// Reaped by init once this process ends; never waited for.
		pid := cmd.Process.Pid
		cmd.Process.Release()
		fmt.Fprintf(e.stderr, "softroce serve: %s served by pid %d in the background (log %s; softroce stop -d %s ends it)\n",
			name, pid, filepath.Join(dir, serveLogName), name)
		fmt.Fprint(e.stdout, exportLines(uverbsd.Env(dir, so)))
		return nil
	}
	werr := cmd.Wait()
	out, _ := os.ReadFile(log.Name())
	os.Remove(log.Name())
	e.stderr.Write(out)
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() > 0 {
		return &exitError{code: ee.ExitCode()}
	}
	return fmt.Errorf("%s: the daemon ended before it was ready: %v", name, werr)
}
