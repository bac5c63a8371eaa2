package uverbsd

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu/dma"
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

func TestMemFileReadsWritesAndFaults(t *testing.T) {
	pidfd := openPidFD(os.Getpid())
	defer pidfd.close()
	m := openMemFile(os.Getpid(), pidfd)
	if m == nil {
		t.Skip("no /proc/PID/mem or no pidfd")
	}
	defer m.close()
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
	// A mapping followed by a hole: the transfer that reaches into the
	// hole fails with EFAULT.
	p, err := unix.MmapPtr(-1, 0, nil, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(p))
	if err := unix.MunmapPtr(unsafe.Add(p, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadAt(make([]byte, 8), base+4096-4); !errors.Is(err, unix.EFAULT) {
		t.Errorf("ReadAt across the hole = %v, want EFAULT", err)
	}
	if _, err := m.WriteAt(make([]byte, 8), base+4096); !errors.Is(err, unix.EFAULT) {
		t.Errorf("WriteAt in the hole = %v, want EFAULT", err)
	}
	unix.MunmapPtr(p, 4096)
	for _, a := range []uint64{0, 1 << 62, ^uint64(0) - 3} {
		if _, err := m.ReadAt(got, a); !errors.Is(err, unix.EFAULT) {
			t.Errorf("ReadAt(%#x) = %v, want EFAULT", a, err)
		}
	}
	m.close()
	if _, err := m.ReadAt(got, addr); !errors.Is(err, unix.EFAULT) || !errors.Is(err, dma.ErrSpaceGone) {
		t.Errorf("ReadAt after close = %v, want EFAULT and ErrSpaceGone", err)
	}
}

// TestMemFileOfAGoneProcessFaults checks that the MR space of a client
// that exited reaches nothing, before and after its pid is reaped (and may
// name another process).
func TestMemFileOfAGoneProcessFaults(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pidfd := openPidFD(cmd.Process.Pid)
	defer pidfd.close()
	m := openMemFile(cmd.Process.Pid, pidfd)
	if m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skip("no /proc/PID/mem or no pidfd")
	}
	defer m.close()
	// Some mapped address of the child: the start of its first mapping.
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	start, err := strconv.ParseUint(strings.SplitN(string(maps), "-", 2)[0], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadAt(make([]byte, 8), start); err != nil {
		t.Fatalf("ReadAt of a live client: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its pid may now name another process
	for _, write := range []bool{false, true} {
		_, err := m.xfer(make([]byte, 8), start, write)
		if !errors.Is(err, unix.EFAULT) || !errors.Is(err, dma.ErrSpaceGone) {
			t.Errorf("transfer (write %v) after the client exited = %v, want EFAULT and ErrSpaceGone", write, err)
		}
	}
}

// BenchmarkClientMemory compares the two ways the daemon reaches a
// client's MR (here its own memory): process_vm_readv/writev after the
// pidfd check, and /proc/PID/mem.
func BenchmarkClientMemory(b *testing.B) {
	pidfd := openPidFD(os.Getpid())
	defer pidfd.close()
	mf := openMemFile(os.Getpid(), pidfd)
	if mf == nil {
		b.Skip("no /proc/PID/mem or no pidfd")
	}
	defer mf.close()
	src := make([]byte, 64<<10)
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	for _, s := range []struct {
		name  string
		space dma.Space
	}{{"process_vm", procMemory{pid: os.Getpid(), pidfd: pidfd}}, {"memfile", mf}} {
		for _, size := range []int{64, 4096, 64 << 10} {
			for _, write := range []bool{false, true} {
				op := "read"
				if write {
					op = "write"
				}
				b.Run(s.name+"/"+op+"/"+strconv.Itoa(size), func(b *testing.B) {
					buf := make([]byte, size)
					b.SetBytes(int64(size))
					for b.Loop() {
						var err error
						if write {
							_, err = s.space.WriteAt(buf, addr)
						} else {
							_, err = s.space.ReadAt(buf, addr)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
	runtime.KeepAlive(src)
}

// TestOnDemandHonoursProtections: /proc/PID/mem writes a page the client
// mapped read-only (as the kernel reaches pinned pages), while the
// OnDemand view of the same memory, which ODP MRs use, faults as the
// client's own write would (hmm_range_fault on a VMA without VM_WRITE),
// and reads it.
func TestOnDemandHonoursProtections(t *testing.T) {
	pidfd := openPidFD(os.Getpid())
	defer pidfd.close()
	mf := openMemFile(os.Getpid(), pidfd)
	if mf == nil {
		t.Skip("no /proc/PID/mem or no pidfd")
	}
	defer mf.close()
	p, err := unix.MmapPtr(-1, 0, nil, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.MunmapPtr(p, 4096)
	page := unsafe.Slice((*byte)(p), 4096)
	page[0] = 'a'
	if err := unix.Mprotect(page, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	addr := uint64(uintptr(p))
	if _, err := mf.WriteAt([]byte("b"), addr); err != nil || page[0] != 'b' {
		t.Fatalf("memFile write to a read-only page: %v, page holds %q", err, page[0])
	}
	for name, s := range map[string]dma.Space{"memFile": mf.OnDemand(), "procMemory": procMemory{pid: os.Getpid(), pidfd: pidfd}.OnDemand()} {
		if _, err := s.WriteAt([]byte("c"), addr); !errors.Is(err, unix.EFAULT) || page[0] != 'b' {
			t.Errorf("%s OnDemand write to a read-only page: %v, page holds %q; want EFAULT", name, err, page[0])
		}
		got := make([]byte, 1)
		if _, err := s.ReadAt(got, addr); err != nil || got[0] != 'b' {
			t.Errorf("%s OnDemand read: %v %q", name, err, got)
		}
	}
}
