package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon's floor: what a doorbell answered by the daemon costs at the
// least is one blocking round trip between two processes over a unix
// SOCK_SEQPACKET socket, the kind the preload library and the daemon
// speak, taken under the load that perftest's two busy-polling processes
// put on the machine. The peers are this program itself, started again
// with floorRoleEnv set: init turns such a process into the echo peer or
// a busy-polling one before main runs, whatever program imports bench.

// floorRoleEnv names the role a re-started process plays: "echo" or
// "spin".
const floorRoleEnv = "SOFTROCE_BENCH_FLOOR_ROLE"

// floorMsg is the size of a round trip's request and answer, about a
// doorbell's frame and its answer.
const floorMsg = 64

func init() {
	switch os.Getenv(floorRoleEnv) {
	case "echo":
		floorEcho(3)
		os.Exit(0)
	case "spin":
		for {
		}
	}
}

// floorEcho answers every message read from fd with itself until the
// other end closes.
func floorEcho(fd int) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		if _, err := unix.Write(fd, buf[:n]); err != nil {
			return
		}
	}
}

// floorPeer starts this program again in role, its fd 3 being extra (if
// not nil); it dies with the caller's thread at the latest.
func floorPeer(role string, extra *os.File) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := exec.Command(exe)
	c.Env = append(os.Environ(), floorRoleEnv+"="+role)
	if extra != nil {
		c.ExtraFiles = []*os.File{extra}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("starting the floor's %s peer: %w", role, err)
	}
	return c, nil
}

// socketFloor returns the median of n blocking round trips of floorMsg
// bytes to an echo process over a unix SOCK_SEQPACKET socket pair, with
// spinners busy-polling processes running beside them.
func socketFloor(n, spinners int) (time.Duration, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	mine, theirs := fds[0], os.NewFile(uintptr(fds[1]), "floor")
	defer unix.Close(mine)
	echo, err := floorPeer("echo", theirs)
	theirs.Close()
	if err != nil {
		return 0, err
	}
	peers := []*exec.Cmd{echo}
	defer func() {
		for _, p := range peers {
			p.Process.Kill()
			p.Wait()
		}
	}()
	for range spinners {
		p, err := floorPeer("spin", nil)
		if err != nil {
			return 0, err
		}
		peers = append(peers, p)
	}
	msg, ans := make([]byte, floorMsg), make([]byte, 4096)
	rtts := make([]time.Duration, 0, n)
	for i := range n + n/10 { // the first tenth warms up
		t0 := time.Now()
		if _, err := unix.Write(mine, msg); err != nil {
			return 0, err
		}
		for {
			m, err := unix.Read(mine, ans)
			if err == unix.EINTR {
				continue
			}
			if err != nil || m != floorMsg {
				return 0, errors.Join(fmt.Errorf("the floor's echo answered %d bytes", m), err)
			}
			break
		}
		if i >= n/10 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	slices.Sort(rtts)
	return percentile(rtts, 0.5), nil
}
