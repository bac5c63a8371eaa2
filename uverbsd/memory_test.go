package uverbsd

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestProcMemoryReadsWritesAndFaults(t *testing.T) {
	m := procMemory{pid: os.Getpid(), pidfd: openPidFD(os.Getpid())}
	defer m.pidfd.close()
	src := []byte("client memory")
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	got := make([]byte, len(src))
	if n, err := m.ReadAt(got, addr); err != nil || n != len(src) || !bytes.Equal(got, src) {
		t.Fatalf("ReadAt = %d %q %v", n, got, err)
	}
	if _, err := m.WriteAt([]byte("CLIENT"), addr); err != nil || string(src) != "CLIENT memory" {
		t.Fatalf("WriteAt: %v, memory %q", err, src)
	}
	runtime.KeepAlive(src)
	for _, a := range []uint64{0, 1 << 62, ^uint64(0) - 3} {
		if _, err := m.ReadAt(got, a); !errors.Is(err, unix.EFAULT) {
			t.Errorf("ReadAt(%#x) = %v, want EFAULT", a, err)
		}
	}
}

func TestProcMemoryOfAGoneProcessFaults(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	m := procMemory{pid: cmd.Process.Pid, pidfd: openPidFD(cmd.Process.Pid)}
	defer m.pidfd.close()
	if m.pidfd == nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skip("no pidfd on this kernel")
	}
	if !m.pidfd.alive() {
		t.Fatal("a running process reads as gone")
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its pid may now name another process
	if _, err := m.ReadAt(make([]byte, 8), 0x400000); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("ReadAt of a reaped client = %v, want EFAULT", err)
	}
	if m.pidfd.alive() {
		t.Fatal("a reaped process reads as alive")
	}
}
