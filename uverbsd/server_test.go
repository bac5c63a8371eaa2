package uverbsd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/uverbsd"
)

var (
	buildOnce sync.Once
	buildDir  string
	soPath    string
	probePath string
	buildErr  error
)

// tools builds the preload library and the probe program once per test
// binary.
func tools(t *testing.T) (so, probe string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "uverbsd-test-")
		if buildErr != nil {
			return
		}
		soPath, buildErr = preload.Path(preload.Config{CacheDir: buildDir})
		if buildErr != nil {
			return
		}
		probePath = filepath.Join(buildDir, "probe")
		out, err := exec.Command("cc", "-O1", "-Wall", "-pthread", "-o", probePath, "testdata/probe.c").CombinedOutput()
		if err != nil {
			buildErr = errors.New("cc probe.c: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		if errors.Is(buildErr, exec.ErrNotFound) && os.Getenv("CI") == "" {
			t.Skip(buildErr)
		}
		t.Fatal(buildErr)
	}
	return soPath, probePath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// fakeFile is a File whose commands are the probe's: it reverses the
// command's data into the response address, hands over a pipe holding
// "event", and maps a memfd holding "ring" at offset 8192. A command whose
// data starts with "block" says so on held and waits for release.
type fakeFile struct {
	mem       uverbsd.Memory
	closed    chan struct{}
	writes    chan struct{}
	held      chan struct{}
	release   chan struct{}
	mu        sync.Mutex
	keep      []*os.File
	at        []uint64 // where the passed files' numbers go
	stored    []string // per FilesStored: "ok" when each number is the one at its address
	doorbells []uint32 // the QP handles of the one-way doorbells rung
	// takes scripts what each Doorbell of a handle returns as the WQEs it
	// took, in order (then 0); watch, if set, is the watch page as the
	// client maps it, whose word of the handle each Doorbell records in
	// seen.
	takes map[uint32][]int
	busy  uint32 // a handle whose every Doorbell takes a WQE (0: none)
	watch []uint32
	seen  []uint32
	// holdRing, if set, is the Doorbell call (counting from 1) that
	// says so on held and waits for release; rings counts the calls,
	// ringsAtWrite the calls made before each Write.
	holdRing, rings int
	ringsAtWrite    []int
}

func (f *fakeFile) FilesStored(fds []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := "ok"
	if len(fds) != len(f.at) {
		res = "count"
	}
	for i, fd := range fds {
		var b [4]byte
		if i < len(f.at) {
			if _, err := f.mem.ReadAt(b[:], f.at[i]); err != nil || binary.NativeEndian.Uint32(b[:]) != fd {
				res = "mismatch"
			}
		}
	}
	f.stored = append(f.stored, res)
}

func (f *fakeFile) Write(buf []byte) (uverbsd.Reply, error) {
	f.mu.Lock()
	f.ringsAtWrite = append(f.ringsAtWrite, f.rings)
	f.mu.Unlock()
	select {
	case f.writes <- struct{}{}:
	default:
	}
	if _, null := uverbs.NullPostSend(buf); null {
		// The kernel's answer to a doorbell of a QP at RTS: the header's
		// checks (ib_uverbs_write's verify_hdr), the request's
		// (ib_uverbs_post_send), then the response and zeros over the
		// rest of its room (uverbs_response).
		hdr := (*uverbs.CmdHdr)(unsafe.Pointer(&buf[0]))
		cmd := (*uverbs.PostSend)(unsafe.Pointer(&buf[8]))
		switch {
		case int(hdr.In_words)*4 != len(buf):
			return uverbsd.Reply{}, unix.EINVAL
		case hdr.Out_words < 1:
			return uverbsd.Reply{}, unix.ENOSPC
		case slices.ContainsFunc(buf[8+unsafe.Sizeof(*cmd):], func(b byte) bool { return b != 0 }):
			return uverbsd.Reply{}, unix.EOPNOTSUPP
		case cmd.Wqe_size < uint32(unsafe.Sizeof(uverbs.SendWr{})):
			return uverbsd.Reply{}, unix.EINVAL
		case cmd.Wqe_size > uverbs.KmallocMax:
			return uverbsd.Reply{}, unix.ENOMEM
		}
		if _, err := f.mem.WriteAt(make([]byte, 4*int(hdr.Out_words)), cmd.Response); err != nil {
			return uverbsd.Reply{}, unix.EFAULT
		}
		return uverbsd.Reply{N: len(buf)}, nil
	}
	if len(buf) != 24 {
		return uverbsd.Reply{}, unix.EINVAL
	}
	resp := binary.NativeEndian.Uint64(buf)
	n := binary.NativeEndian.Uint32(buf[8:])
	if n == 0xffff {
		return uverbsd.Reply{}, unix.ENOSPC
	}
	if string(buf[12:17]) == "block" {
		f.held <- struct{}{}
		<-f.release
	}
	data := slices.Clone(buf[12:24])
	slices.Reverse(data)
	if _, err := f.mem.WriteAt(data, resp); err != nil {
		return uverbsd.Reply{}, err
	}
	if string(buf[12:17]) != "hello" {
		return uverbsd.Reply{N: len(buf)}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return uverbsd.Reply{}, err
	}
	w.WriteString("event")
	w.Close()
	f.mu.Lock()
	f.keep = append(f.keep, r)
	f.at = []uint64{resp + 16}
	f.mu.Unlock()
	return uverbsd.Reply{N: len(buf), Files: []uverbsd.PassFile{{File: r, At: resp + 16}}}, nil
}

// Doorbell records a one-way doorbell's QP handle; handle 13 is refused.
func (f *fakeFile) Doorbell(handle uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rings++
	if f.rings == f.holdRing {
		f.mu.Unlock()
		f.held <- struct{}{}
		<-f.release
		f.mu.Lock()
	}
	f.doorbells = append(f.doorbells, handle)
	if f.watch != nil && handle < uint32(len(f.watch)) {
		f.seen = append(f.seen, atomic.LoadUint32(&f.watch[handle]))
	}
	if handle == 13 {
		return 0, unix.EINVAL
	}
	took := 0
	if t := f.takes[handle]; len(t) > 0 {
		took, f.takes[handle] = t[0], t[1:]
	}
	if handle == f.busy {
		took = 1
	}
	return took, nil
}

func (f *fakeFile) Mmap(off, length uint64) (*os.File, int64, error) {
	if off != 8192 || length != 4096 {
		return nil, 0, unix.EINVAL
	}
	fd, err := unix.MemfdCreate("ring", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, err
	}
	mf := os.NewFile(uintptr(fd), "ring")
	mf.Truncate(8192)
	mf.WriteAt([]byte("ring"), 4096)
	f.mu.Lock()
	f.keep = append(f.keep, mf)
	f.mu.Unlock()
	return mf, 4096, nil
}

func (f *fakeFile) Close() error {
	f.mu.Lock()
	for _, k := range f.keep {
		k.Close()
	}
	f.mu.Unlock()
	close(f.closed)
	return nil
}

type harness struct {
	srv   *uverbsd.Server
	node  *node.Node
	dir   string
	files chan *fakeFile
}

func newHarness(t *testing.T, opts ...func(*uverbsd.Config)) *harness {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1, MAC: []byte{2, 0, 0, 0, 0, 9}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	h := &harness{node: n, dir: filepath.Join(t.TempDir(), "rxe0"), files: make(chan *fakeFile, 16)}
	cfg := uverbsd.Config{Device: n.Device(), Dir: h.dir, Logf: t.Logf,
		Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File {
			f := &fakeFile{mem: mem, closed: make(chan struct{}), writes: make(chan struct{}, 1),
				held: make(chan struct{}, 1), release: make(chan struct{})}
			h.files <- f
			return f
		}}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := uverbsd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

func (h *harness) command(so, prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), h.srv.Env(so)...)
	return cmd
}

func TestPreloadPresentsTheDeviceNode(t *testing.T) {
	so, probe := tools(t)
	h := newHarness(t)
	out, err := h.command(so, probe).CombinedOutput()
	t.Logf("probe:\n%s", out)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	select {
	case f := <-h.files:
		select {
		case <-f.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the File was not closed after the probe closed its descriptor")
		}
		if !slices.Equal(f.stored, []string{"ok"}) {
			t.Errorf("FilesStored calls: %q, want one with the number the client stored", f.stored)
		}
	default:
		t.Fatal("no File opened")
	}
}

// TestWriteFromAnUnreadableBufferIsEFAULT: a write() to the uverbs or the
// rdma_cm descriptor from a buffer that cannot be read (NULL, an unmapped
// page, one whose command or last bytes lie on a PROT_NONE page) fails
// with EFAULT, as the copy_from_user of ib_uverbs_write and ucma_write,
// and the program goes on: nothing reached the daemon, and the next
// command on the same descriptor works. A write shorter than a command
// header is EINVAL, its buffer never read, as the kernel's; one whose range
// leaves the user address space (SIZE_MAX bytes, 1<<62 bytes, the kernel's
// half) is EFAULT whatever its length, as vfs_write's access_ok.
func TestWriteFromAnUnreadableBufferIsEFAULT(t *testing.T) {
	so, probe := tools(t)
	h := newHarness(t)
	out, err := h.command(so, probe, "efault").CombinedOutput()
	t.Logf("probe:\n%s", out)
	if err != nil {
		t.Fatalf("probe efault: %v", err)
	}
	const goodCommands = 9 // the probe's uverbs commands that work
	if got := strings.Count(string(out), "\nok uverbs command"); got != goodCommands {
		t.Fatalf("the probe reported %d good uverbs commands, want %d", got, goodCommands)
	}
	select {
	case f := <-h.files:
		<-f.closed
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.ringsAtWrite) != goodCommands {
			t.Errorf("the File got %d commands, want %d: a faulting write reached the daemon", len(f.ringsAtWrite), goodCommands)
		}
	default:
		t.Fatal("no File opened")
	}
}

// TestBadPointersToStatAndOpenGetTheKernelsAnswers: with the library
// preloaded, the stat family on the device (its path or its descriptor)
// into a buffer that cannot be written (NULL, an unmapped or read-only
// page, one running into such a page) fails with EFAULT, as cp_new_stat,
// after the lookup (a device that does not exist is ENOENT); AT_EMPTY_PATH
// with a NULL path is the descriptor's stat where the kernel takes it;
// read() into any buffer is EINVAL (the command file has no read); the
// open and stat families given a path that cannot be read (NULL, an
// unmapped page, one running into a PROT_NONE page), the device's or any
// file's, fail with EFAULT, as getname (EINVAL where the flags are refused
// first); and the program goes on.
func TestBadPointersToStatAndOpenGetTheKernelsAnswers(t *testing.T) {
	probeChecks(t, newHarness(t), "badptr", 44) // the probe's open, then badptr's checks
}

// probeChecks runs the probe in mode against h and fails the test unless
// it exits 0 having printed "ok" for checks checks; it returns the output.
func probeChecks(t *testing.T, h *harness, mode string, checks int) string {
	t.Helper()
	so, probe := tools(t)
	out, err := h.command(so, probe, mode).CombinedOutput()
	t.Logf("probe:\n%s", out)
	if err != nil {
		t.Fatalf("probe %s: %v", mode, err)
	}
	if got := strings.Count(string(out), "ok "); got != checks {
		t.Errorf("the probe reported %d checks passed, want %d", got, checks)
	}
	return string(out)
}

// liveProbe is the probe running in a mode that steps on the test's
// lines on its stdin; out holds what it printed so far.
type liveProbe struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
	lines *bufio.Scanner
}

// startProbe starts the probe in mode against h, with env added.
func startProbe(t *testing.T, h *harness, mode string, env ...string) *liveProbe {
	t.Helper()
	so, probe := tools(t)
	p := &liveProbe{cmd: h.command(so, probe, mode)}
	p.cmd.Env = append(p.cmd.Env, env...)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	p.lines = bufio.NewScanner(io.TeeReader(stdout, &p.out))
	return p
}

// until reads the probe's lines up to the one that starts with want.
func (p *liveProbe) until(t *testing.T, want string) {
	t.Helper()
	for p.lines.Scan() {
		if strings.HasPrefix(p.lines.Text(), want) {
			return
		}
	}
	t.Fatalf("no %q from the probe\n%s", want, p.out.String())
}

// step sends the probe a line, its cue for the next step.
func (p *liveProbe) step(line string) { io.WriteString(p.stdin, line+"\n") }

// wait reads the rest of the probe's output and waits for its end.
func (p *liveProbe) wait() error {
	for p.lines.Scan() {
	}
	return p.cmd.Wait()
}

// TestFileFlagsAreTheDevicesFlags: the device's descriptors carry the
// flags the kernel's character device file would: F_GETFL (fcntl and
// fcntl64) reports the open's flags with O_LARGEFILE; F_SETFL keeps
// setfl's flags (O_APPEND, O_NONBLOCK), drops O_ASYNC (no fasync),
// refuses O_DIRECT (EINVAL); FIONBIO sets and clears O_NONBLOCK, FIOASYNC
// is ENOTTY, FIOCLEX and FIONCLEX set the descriptor's close-on-exec;
// commands go on working on an O_NONBLOCK uverbs descriptor, as the
// kernel's write() is synchronous; opens with O_CREAT|O_EXCL, O_DIRECTORY
// and O_DIRECT get EEXIST, ENOTDIR and EINVAL; and an rdma_cm descriptor
// opened O_NONBLOCK, or made so, answers GET_EVENT with EAGAIN.
func TestFileFlagsAreTheDevicesFlags(t *testing.T) {
	probeChecks(t, newHarness(t), "fdflags", 1+26) // the probe's open, then fdflags's
}

// TestAccessFamilyAnswersAsTheDeviceNode: access, euidaccess, eaccess and
// faccessat of the device answer as do_faccessat for a character device
// of mode 0666 that root owns: read and write allowed, execute refused
// (EACCES, root too), a device the sysfs tree lacks ENOENT, a bad mode or
// flag EINVAL, a NULL path EFAULT; AT_EMPTY_PATH asks of the descriptor.
// UCX takes only the devices access() finds readable and writable.
func TestAccessFamilyAnswersAsTheDeviceNode(t *testing.T) {
	probeChecks(t, newHarness(t), "access", 1+13) // the probe's open, then access_checks's
}

// TestAccessModeOfTheOpenGovernsReadAndWrite: the device opened
// read-only, write-only or with O_ACCMODE (neither read nor write) answers
// write() and read() as vfs_write and vfs_read check the file's mode:
// EBADF without the access (nothing reaches the daemon), else the
// command's answer and the command file's EINVAL for read; and mmap() as
// do_mmap: EACCES where the mode does not allow the mapping.
func TestAccessModeOfTheOpenGovernsReadAndWrite(t *testing.T) {
	h := newHarness(t)
	probeChecks(t, h, "accmode", 12) // the probe's open, then a write, a read and mmaps in each of three modes
	commands := 0
	for range 4 {
		select {
		case f := <-h.files:
			<-f.closed
			f.mu.Lock()
			commands += len(f.ringsAtWrite)
			f.mu.Unlock()
		case <-time.After(10 * time.Second):
			t.Fatal("the probe's four opens did not reach the daemon")
		}
	}
	if commands != 1 {
		t.Errorf("the daemon got %d commands, want 1 (the write-only descriptor's)", commands)
	}
}

// TestDuplicatesAreTheSameDeviceFile: a duplicate of the device's
// descriptor (dup, F_DUPFD, F_DUPFD_CLOEXEC, dup2, dup3) is the same open
// file, as the kernel's f_dupfd and do_dup2 make it: fstat shows the
// device, commands get their answers, mmap maps the file's memory, the
// file's flags are every number's (F_SETFL on one shows in F_GETFL of
// another), each number close-on-exec as asked; a forked child has every
// number, as the kernel's dup_fd copies the table at fork; the file
// outlives the original's close and is released (ib_uverbs_close) only
// when the program's last number of it is closed. An rdma_cm descriptor's duplicate has the open's flags, takes
// commands, and keeps the file (the daemon's connection) after the
// original's close, until it is closed itself.
func TestDuplicatesAreTheSameDeviceFile(t *testing.T) {
	h := newHarness(t)
	p := startProbe(t, h, "dup")
	var f *fakeFile
	select {
	case f = <-h.files:
	case <-time.After(10 * time.Second):
		t.Fatal("no File opened")
	}
	p.until(t, "one left")
	select {
	case <-f.closed:
		t.Fatalf("the File was released while a duplicate of its descriptor was open\n%s", p.out.String())
	case <-time.After(200 * time.Millisecond):
	}
	p.step("go")
	p.until(t, "all closed")
	select {
	case <-f.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("the File was not released after the last number was closed\n%s", p.out.String())
	}
	p.step("go")
	// The rdma_cm file: the program's descriptor is its eventfd, the
	// connection the library's alone; the duplicate keeps it open.
	p.until(t, "rdma_cm dup left")
	time.Sleep(200 * time.Millisecond)
	if n := h.srv.Clients(); n != 1 {
		t.Fatalf("Clients() = %d with the rdma_cm file's duplicate open, want 1\n%s", n, p.out.String())
	}
	p.step("go")
	p.until(t, "rdma_cm closed")
	for deadline := time.Now().Add(5 * time.Second); h.srv.Clients() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Clients() = %d after the rdma_cm file's last number was closed\n%s", h.srv.Clients(), p.out.String())
		}
	}
	p.step("go")
	err := p.wait()
	t.Logf("probe:\n%s", p.out.String())
	if err != nil {
		t.Fatalf("probe dup: %v", err)
	}
	const checks = 1 + 42 // the probe's open, then dups's (two of them its forked child's)
	if got := strings.Count(p.out.String(), "ok "); got != checks {
		t.Errorf("the probe reported %d checks passed, want %d", got, checks)
	}
}

func TestThreadsSharingADescriptorGetTheirOwnReplies(t *testing.T) {
	so, probe := tools(t)
	h := newHarness(t)
	out, err := h.command(so, probe, "threads").CombinedOutput()
	if err != nil {
		t.Fatalf("probe threads: %v\n%s", err, out)
	}
}

// TestCloseWaitsForTheCallInFlight: a thread closes the descriptor while
// another thread's command is in flight on it. As the kernel's fdget
// holds the file for the write, the command completes with its response
// and the File is released (ib_uverbs_close) only after it returns.
func TestCloseWaitsForTheCallInFlight(t *testing.T) {
	h := newHarness(t)
	p := startProbe(t, h, "closewait")
	f := <-h.files
	release := sync.OnceFunc(func() { close(f.release) })
	defer release()
	select {
	case <-f.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking command never came")
	}
	p.step("close")
	p.until(t, "closed")
	select {
	case <-f.closed:
		t.Fatal("the File was released while a command was in flight on it")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := p.wait(); err != nil || !strings.Contains(p.out.String(), "ok in-flight write") {
		t.Fatalf("probe closewait: %v\n%s", err, p.out.String())
	}
	select {
	case <-f.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the File was not released after the command returned")
	}
}

func TestKilledClientClosesItsFile(t *testing.T) {
	so, probe := tools(t)
	h := newHarness(t)
	cmd := h.command(so, probe, "hang")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if line == "ok open\n" {
		line, err = br.ReadString('\n')
	}
	if err != nil || !strings.HasPrefix(line, "wrote 24") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("probe said %q (%v)", line, err)
	}
	f := <-h.files
	select {
	case <-f.closed:
		t.Fatal("File closed while the client lives")
	case <-time.After(100 * time.Millisecond):
	}
	if n := h.srv.Clients(); n != 1 {
		t.Errorf("Clients() = %d with one client, want 1", n)
	}
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-f.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the File was not closed after the client was killed")
	}
	for deadline := time.Now().Add(5 * time.Second); h.srv.Clients() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Clients() = %d after the client was killed", h.srv.Clients())
		}
	}
}

func TestSocketDirectoryIsPrivate(t *testing.T) {
	h := newHarness(t)
	st, err := os.Stat(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Fatalf("%s: mode %v, want drwx------", h.dir, st.Mode())
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := uverbsd.PrivateDir(open); !errors.Is(err, unix.EPERM) {
		t.Fatalf("PrivateDir of a 0755 directory: %v, want EPERM", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(h.dir, link); err != nil {
		t.Fatal(err)
	}
	if err := uverbsd.PrivateDir(link); !errors.Is(err, unix.EPERM) {
		t.Fatalf("PrivateDir of a symbolic link: %v, want EPERM", err)
	}
	// A second daemon on the same directory is refused while the first
	// serves.
	if _, err := uverbsd.New(uverbsd.Config{Device: h.node.Device(), Dir: h.dir}); !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("second daemon: %v, want EADDRINUSE", err)
	}
}

// exchange sends one raw packet and returns the reply's header.
func exchange(t testing.TB, c *net.UnixConn, pkt []byte, oob []byte) preload.Header {
	t.Helper()
	if _, _, err := c.WriteMsgUnix(pkt, oob, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, _, _, _, err := c.ReadMsgUnix(buf, make([]byte, 64))
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	h, _, err := preload.ParseFrame(buf[:n])
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	return h
}

func TestStaleSocketIsReplaced(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dir := filepath.Join(t.TempDir(), "rxe0")
	if err := uverbsd.PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	// A socket left by a daemon that died: bound, nobody listening.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, uverbsd.SocketName)}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if uverbsd.Serving(dir) {
		t.Fatal("a stale socket reads as serving")
	}
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir})
	if err != nil {
		t.Fatalf("New over a stale socket: %v", err)
	}
	go srv.Serve()
	defer srv.Close()
	if !uverbsd.Serving(dir) {
		t.Fatal("the new daemon does not answer")
	}
}

func TestMalformedFramesGetErrorsAndTheDaemonLivesOn(t *testing.T) {
	h := newHarness(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := preload.Header{Op: preload.OpOpen, Aux: preload.Version}
	write := preload.Header{Op: preload.OpWrite}
	lenLie := preload.Frame(write, []byte("abcd"))
	binary.NativeEndian.PutUint32(lenLie[4:], 100)
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	share := preload.Header{Op: preload.OpShare}
	shareRange := make([]byte, 16)
	binary.NativeEndian.PutUint64(shareRange, 0x10000)
	binary.NativeEndian.PutUint64(shareRange[8:], 4096)
	cases := []struct {
		name string
		pkt  []byte
		oob  []byte
		want unix.Errno
	}{
		{"short header", []byte{1, 2, 3}, nil, unix.EINVAL},
		{"write before open", preload.Frame(write, []byte("x")), nil, unix.EINVAL},
		{"wrong version", preload.Frame(preload.Header{Op: preload.OpOpen, Aux: 99}, []byte(uverbsd.UverbsNode)), nil, unix.EPROTO},
		{"unknown node", preload.Frame(open, []byte("uverbs1")), nil, unix.ENODEV},
		{"oversized frame", preload.Frame(write, make([]byte, preload.MaxPayload+1)), nil, unix.E2BIG},
		{"descriptors sent", preload.Frame(open, []byte(uverbsd.UverbsNode)), unix.UnixRights(int(r.Fd())), unix.EINVAL},
		{"open", preload.Frame(open, []byte(uverbsd.UverbsNode)), nil, 0},
		{"share a pipe", preload.Frame(share, shareRange), unix.UnixRights(int(r.Fd())), unix.EINVAL},
		{"share two descriptors", preload.Frame(share, shareRange), unix.UnixRights(int(r.Fd()), int(w.Fd())), unix.EINVAL},
		{"share no descriptor", preload.Frame(share, shareRange), nil, unix.EINVAL},
		{"a descriptor with a write", preload.Frame(write, []byte("x")), unix.UnixRights(int(r.Fd())), unix.EINVAL},
		{"fds unasked", preload.Frame(preload.Header{Op: preload.OpFds}, make([]byte, 4)), nil, unix.EINVAL},
		{"open twice", preload.Frame(open, []byte(uverbsd.UverbsNode)), nil, unix.EINVAL},
		{"length lie", lenLie, nil, unix.EINVAL},
		{"unknown op", preload.Frame(preload.Header{Op: 77}, nil), nil, unix.EINVAL},
		{"mmap short", preload.Frame(preload.Header{Op: preload.OpMmap}, []byte{1}), nil, unix.EINVAL},
		{"mmap unknown offset", preload.Frame(preload.Header{Op: preload.OpMmap}, make([]byte, 16)), nil, unix.EINVAL},
		{"command the File refuses", preload.Frame(write, []byte("x")), nil, unix.EINVAL},
	}
	for _, tc := range cases {
		rh := exchange(t, c, tc.pkt, tc.oob)
		if rh.Ret != -int32(tc.want) {
			t.Errorf("%s: reply Ret %d, want %d (%v)", tc.name, rh.Ret, -int32(tc.want), tc.want)
		}
		if tc.name == "open" && rh.Aux&preload.FeatureSharePages == 0 {
			t.Errorf("open: reply Aux %#x does not offer shared pages", rh.Aux)
		}
	}
	// The daemon still serves a well-behaved client.
	so, probe := tools(t)
	if out, err := h.command(so, probe).CombinedOutput(); err != nil {
		t.Fatalf("probe after the abuse: %v\n%s", err, out)
	}
}

func TestSysfsTree(t *testing.T) {
	h := newHarness(t)
	root := h.srv.SysfsPath()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := map[string]string{
		"class/infiniband_verbs/abi_version":              "6\n",
		"class/infiniband_verbs/uverbs0/ibdev":            "rxe0\n",
		"class/infiniband_verbs/uverbs0/dev":              "231:192\n",
		"class/infiniband_verbs/uverbs0/abi_version":      "2\n",
		"class/misc/rdma_cm/abi_version":                  "4\n",
		"class/infiniband/rxe0/node_type":                 "1: CA\n",
		"class/infiniband/rxe0/node_guid":                 "0000:00ff:fe00:0009\n",
		"class/infiniband/rxe0/ports/1/state":             "4: ACTIVE\n",
		"class/infiniband/rxe0/ports/1/phys_state":        "5: LinkUp\n",
		"class/infiniband/rxe0/ports/1/link_layer":        "Ethernet\n",
		"class/infiniband/rxe0/ports/1/lid":               "0x0\n",
		"class/infiniband/rxe0/ports/1/gids/0":            "fe80:0000:0000:0000:0000:00ff:fe00:0009\n",
		"class/infiniband/rxe0/ports/1/gids/1":            "0000:0000:0000:0000:0000:0000:0000:0000\n",
		"class/infiniband/rxe0/ports/1/gid_attrs/types/0": "RoCE v2\n",
		"class/infiniband/rxe0/ports/1/pkeys/0":           "0xffff\n",
	}
	for p, w := range want {
		if got := read(p); got != w {
			t.Errorf("%s = %q, want %q", p, got, w)
		}
	}
	// An empty file stands for an attribute whose read fails (the preload
	// library reads it as EINVAL): only the GID types of unused slots and
	// the netdevs of GIDs the kernel has no netdev for.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if fi, ferr := os.Stat(p); err == nil && ferr == nil && fi.Mode().IsRegular() && fi.Size() == 0 &&
			!strings.Contains(p, "/gid_attrs/types/") && !strings.Contains(p, "/gid_attrs/ndevs/") {
			t.Errorf("%s is empty: a read would fail", p)
		}
		return nil
	})
	// The kernel's attribute of an unused slot fails its read: an empty
	// file here, which the preload library reads as EINVAL.
	if got := read("class/infiniband/rxe0/ports/1/gid_attrs/types/1"); got != "" {
		t.Errorf("types/1 of an empty slot: %q, want an empty file", got)
	}
	// The in-memory link is no interface of the kernel's: libibverbs
	// would fail to turn a netdev name into an ifindex (ENODEV), so the
	// GID's netdev reads as none (an empty file: the read fails, as the
	// kernel's for a GID without a netdev). Every slot has the file.
	for _, i := range []string{"0", "1", "1023"} {
		if fi, err := os.Stat(filepath.Join(root, "class/infiniband/rxe0/ports/1/gid_attrs/ndevs", i)); err != nil || fi.Size() != 0 {
			t.Errorf("ndevs/%s of a GID on an in-memory link: %v, want an empty file", i, err)
		}
	}
	// The GID files follow the table: an address added to the host
	// becomes GID 1.
	if err := h.node.Host().AddAddr(mustPrefix(t, "10.9.0.1/24")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := read("class/infiniband/rxe0/ports/1/gids/1")
		if got == "0000:0000:0000:0000:0000:ffff:0a09:0001\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gids/1 = %q after adding 10.9.0.1", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := read("class/infiniband/rxe0/ports/1/gid_attrs/types/1"); got != "RoCE v2\n" {
		t.Errorf("types/1 = %q", got)
	}
	if !bytes.Contains([]byte(read("class/infiniband/rxe0/ports/1/rate")), []byte("Gb/sec")) {
		t.Errorf("rate %q", read("class/infiniband/rxe0/ports/1/rate"))
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRDMACMNode: opening rdma_cm gives the File's token and passes its
// event file (an eventfd with nothing counted); its commands are the
// rdma_ucm ABI's, with the kernel's errnos, and it has no mmap.
func TestRDMACMNode(t *testing.T) {
	h := newHarness(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.WriteMsgUnix(preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.RDMACMNode)), nil, nil); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4*4))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	rh, payload, err := preload.ParseFrame(buf[:n])
	if err != nil || rh.Ret != 0 || len(payload) != 4 || binary.NativeEndian.Uint32(payload) == 0 {
		t.Fatalf("open rdma_cm: %+v %x %v", rh, payload, err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("open rdma_cm passed %d control messages: %v", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("open rdma_cm passed %v: %v", fds, err)
	}
	ev := fds[0]
	defer unix.Close(ev)
	if err := unix.SetNonblock(ev, true); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Read(ev, make([]byte, 8)); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("read of the event file with no event: %v, want EAGAIN", err)
	}
	getEvent := func() []byte { // RDMA_USER_CM_CMD_GET_EVENT, in 8, out 0
		b := make([]byte, 16)
		binary.NativeEndian.PutUint32(b, 12)
		binary.NativeEndian.PutUint16(b[4:], 8)
		return b
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want unix.Errno
	}{
		{"short command", preload.Frame(preload.Header{Op: preload.OpWrite}, []byte{1}), unix.EINVAL},
		{"unknown command", preload.Frame(preload.Header{Op: preload.OpWrite}, []byte{99, 0, 0, 0, 0, 0, 0, 0}), unix.EINVAL},
		{"GET_EVENT without room", preload.Frame(preload.Header{Op: preload.OpWrite}, getEvent()), unix.ENOSPC},
		{"mmap", preload.Frame(preload.Header{Op: preload.OpMmap}, make([]byte, 16)), unix.ENODEV},
	} {
		if rh := exchange(t, c, tc.pkt, nil); rh.Ret != -int32(tc.want) {
			t.Errorf("%s: reply Ret %d, want %d (%v)", tc.name, rh.Ret, -int32(tc.want), tc.want)
		}
	}
}

// TestCloseEndsConnectionsWaitingForFrames checks that Close ends a
// connection whose goroutine waits for the client's next frame (in poll,
// on its own thread), and that the client then reads the end.
func TestCloseEndsConnectionsWaitingForFrames(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: filepath.Join(t.TempDir(), "rxe0"),
		Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File {
			return &fakeFile{mem: mem, closed: make(chan struct{}), writes: make(chan struct{}, 1)}
		}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	var conns []*net.UnixConn
	for range 3 {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil); h.Ret != 0 {
			t.Fatalf("OPEN: %d", h.Ret)
		}
		conns = append(conns, c)
	}
	closeServer(t, srv, served)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _, _, _, err := c.ReadMsgUnix(make([]byte, 64), nil); n != 0 || (err != nil && !errors.Is(err, io.EOF)) {
			t.Errorf("client %d read %d bytes, %v after Close, want the end", i, n, err)
		}
	}
}

// BenchmarkFrameRoundTrip measures one WRITE frame and its reply through
// the daemon's connection (a File that does nothing but answer): the
// doorbell's transport, without the device. The client is another process
// (this test binary, TestFrameClientHelper), as a program is: a client
// goroutine in the daemon's own process would measure Go's scheduling of
// its own goroutines instead.
func BenchmarkFrameRoundTrip(b *testing.B) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: filepath.Join(b.TempDir(), "rxe0"), NoRDMACM: true,
		Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File { return nopFile{} }})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFrameClientHelper$")
	cmd.Env = append(os.Environ(), "UVERBSD_FRAME_CLIENT="+srv.SocketPath(), "UVERBSD_FRAME_COUNT="+strconv.Itoa(b.N))
	b.ResetTimer()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("client: %v\n%s", err, out)
	}
}

// TestFrameClientHelper is BenchmarkFrameRoundTrip's client process: it
// opens the device and sends UVERBSD_FRAME_COUNT frames, each after the
// previous one's reply.
func TestFrameClientHelper(t *testing.T) {
	sock := os.Getenv("UVERBSD_FRAME_CLIENT")
	if sock == "" {
		t.Skip("the client process of BenchmarkFrameRoundTrip")
	}
	count, _ := strconv.Atoi(os.Getenv("UVERBSD_FRAME_COUNT"))
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil); h.Ret != 0 {
		t.Fatalf("OPEN: %d", h.Ret)
	}
	frame := preload.Frame(preload.Header{Op: preload.OpWrite}, make([]byte, 32))
	buf := make([]byte, 64)
	for range count {
		if _, _, err := c.WriteMsgUnix(frame, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := c.ReadMsgUnix(buf, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// nopFile answers every write with its length.
type nopFile struct{}

func (nopFile) Write(buf []byte) (uverbsd.Reply, error) { return uverbsd.Reply{N: len(buf)}, nil }
func (nopFile) Mmap(off, length uint64) (*os.File, int64, error) {
	return nil, 0, unix.ENODEV
}
func (nopFile) Close() error { return nil }

// closeServer closes srv with clients still connected and fails t unless
// Close returns within 20 s without error and Serve (whose result served
// carries) then returns nil.
func closeServer(t *testing.T, srv *uverbsd.Server, served <-chan error) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return with clients connected")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestOneWayDoorbellsGetNoReply: a daemon with OneWayDoorbells offers them
// at OPEN; a one-way POST_SEND with no WRs rings the File's doorbell and
// gets no reply, as does one the File refuses; a one-way frame that is not
// such a doorbell is dropped; the next command gets its own reply, which
// says AuxSyncDoorbells once the daemon wants answered doorbells. Without
// OneWayDoorbells, OPEN offers none and a one-way doorbell rings nothing.
func TestOneWayDoorbellsGetNoReply(t *testing.T) {
	for _, on := range []bool{true, false} {
		h := newHarness(t, func(c *uverbsd.Config) { c.OneWayDoorbells = on })
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rh := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil)
		if got := rh.Aux&preload.FeatureOneWayDoorbells != 0; got != on {
			t.Fatalf("OneWayDoorbells %v: OPEN offers them: %v", on, got)
		}
		f := <-h.files
		doorbell := func(handle, wrs uint32) []byte {
			hdr := uverbs.CmdHdr{Command: uverbs.CmdPostSend, In_words: 8, Out_words: 1}
			cmd := uverbs.PostSend{Qp_handle: handle, Wr_count: wrs, Wqe_size: 128}
			b := append(unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr)), unsafe.Slice((*byte)(unsafe.Pointer(&cmd)), unsafe.Sizeof(cmd))...)
			return preload.Frame(preload.Header{Op: preload.OpWrite, Aux: preload.WriteOneWay}, b)
		}
		for _, pkt := range [][]byte{doorbell(3, 0), doorbell(13, 0), doorbell(4, 1),
			preload.Frame(preload.Header{Op: preload.OpWrite, Aux: preload.WriteOneWay}, []byte("not a command"))} {
			if _, _, err := c.WriteMsgUnix(pkt, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		h.srv.SetSyncDoorbells(true)
		payload := make([]byte, 24)
		binary.NativeEndian.PutUint64(payload, 0x1000)
		rh = exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, payload), nil)
		if rh.Op != preload.OpWrite || rh.Aux&preload.AuxSyncDoorbells == 0 {
			t.Errorf("the command after the doorbells: reply %+v, want its own with AuxSyncDoorbells", rh)
		}
		f.mu.Lock()
		got := slices.Clone(f.doorbells)
		f.mu.Unlock()
		want := []uint32{3, 13}
		if !on {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("OneWayDoorbells %v: doorbells rung %v, want %v", on, got, want)
		}
	}
}
