package uverbsd_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/uverbsd"
)

// limitServer serves a device with cfg's bounds, its Files answering
// every write (nopFile) unless cfg.Open says otherwise; cfg's Device and
// Dir are set here.
func limitServer(t *testing.T, cfg uverbsd.Config) (*uverbsd.Server, <-chan error) {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg.Device, cfg.Dir, cfg.NoRDMACM = n.Device(), filepath.Join(t.TempDir(), "rxe0"), true
	if cfg.Open == nil {
		cfg.Open = func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File { return nopFile{} }
	}
	srv, err := uverbsd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	return srv, served
}

// openDevice connects to srv and sends OPEN, returning the connection and
// OPEN's answer; a connection the daemon closed unanswered is an error.
func openDevice(sock string) (*net.UnixConn, preload.Header, error) {
	return openNode(sock, uverbsd.UverbsNode)
}

// openNode is openDevice of the device node name.
func openNode(sock, name string) (*net.UnixConn, preload.Header, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return nil, preload.Header{}, err
	}
	open := preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(name))
	if _, _, err := c.WriteMsgUnix(open, nil, nil); err != nil {
		c.Close()
		return nil, preload.Header{}, err
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, _, _, _, err := c.ReadMsgUnix(buf, make([]byte, 64))
	if err == nil && n == 0 {
		err = fmt.Errorf("connection closed")
	}
	if err != nil {
		c.Close()
		return nil, preload.Header{}, err
	}
	c.SetReadDeadline(time.Time{})
	h, _, err := preload.ParseFrame(buf[:n])
	if err != nil {
		c.Close()
		return nil, preload.Header{}, err
	}
	return c, h, nil
}

// neighbour runs another client process (TestFrameClientHelper): it opens
// the device and has frames frames answered.
func neighbour(sock string, frames int) error {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFrameClientHelper$")
	cmd.Env = append(os.Environ(), "UVERBSD_FRAME_CLIENT="+sock, fmt.Sprintf("UVERBSD_FRAME_COUNT=%d", frames))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}

// TestConnectionHogGetsEMFILEAndOthersAreServed: one client process opens
// the device three times as often as the daemon's descriptor budget
// (Config.MaxFiles) allows connections and holds what it got: past its
// share (MaxConnsPerClient) its opens fail with EMFILE, the daemon serves
// on, and another process opens the device and is answered while the hog
// holds its connections and after it let them go.
func TestConnectionHogGetsEMFILEAndOthersAreServed(t *testing.T) {
	const budget = 200 // descriptors: 50 connections, 12 per client
	var logMu sync.Mutex
	var log []string
	srv, served := limitServer(t, uverbsd.Config{MaxFiles: budget, Logf: func(f string, a ...any) {
		logMu.Lock()
		log = append(log, fmt.Sprintf(f, a...))
		logMu.Unlock()
	}})
	var held []*net.UnixConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	counts := map[string]int{}
	for range 3 * budget {
		c, h, err := openDevice(srv.SocketPath())
		switch {
		case err != nil:
			counts[err.Error()]++
		case h.Ret == 0:
			held = append(held, c)
			counts["opened"]++
		default:
			c.Close()
			counts[unix.Errno(-h.Ret).Error()]++
		}
	}
	t.Logf("%d opens by one process: %v", 3*budget, counts)
	if len(held) != budget/4/4 {
		t.Errorf("the hog holds %d connections, want %d (a quarter of the budget's %d)", len(held), budget/4/4, budget/4)
	}
	if counts[unix.EMFILE.Error()] != 3*budget-len(held) {
		t.Errorf("%d opens failed with EMFILE, want every one past the client's share", counts[unix.EMFILE.Error()])
	}
	if err := neighbour(srv.SocketPath(), 100); err != nil {
		t.Fatalf("a neighbour while the hog holds its connections: %v", err)
	}
	// The connections the hog holds still answer.
	for _, c := range []*net.UnixConn{held[0], held[len(held)-1]} {
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, make([]byte, 16)), nil); h.Ret != 16 {
			t.Errorf("the hog's WRITE answered %d, want 16", h.Ret)
		}
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	if err := neighbour(srv.SocketPath(), 100); err != nil {
		t.Fatalf("a neighbour after the hog: %v", err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned: %v", err)
	default:
	}
	logMu.Lock()
	var named bool
	self := fmt.Sprintf("pid %d (", os.Getpid())
	for _, l := range log {
		if strings.HasPrefix(l, self) && strings.Contains(l, "too many open files") {
			named = true
		}
	}
	logMu.Unlock()
	if !named {
		t.Errorf("the log does not name the hog (%q) with EMFILE: %q", self, log[:min(len(log), 5)])
	}
	closeServer(t, srv, served)
}

// TestAcceptOutOfDescriptorsWaitsAndServesOn: while the daemon's process
// is out of descriptors its accepts fail with EMFILE; it waits and tries
// again instead of ending, and once descriptors are free it serves a new
// client.
func TestAcceptOutOfDescriptorsWaitsAndServesOn(t *testing.T) {
	var failed atomic.Int32
	srv, served := limitServer(t, uverbsd.Config{MaxConnsPerClient: 1 << 20, Logf: func(f string, a ...any) {
		if strings.HasPrefix(f, "accept:") && strings.Contains(fmt.Sprint(a...), "too many open files") {
			failed.Add(1)
		}
	}})
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := syscall.Rlimit{Cur: uint64(len(fds) + 40), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	// Dial until the process has no descriptor left: the daemon's
	// accepts (in this process too) fail with EMFILE meanwhile, and the
	// last dials wait in the listen backlog.
	var conns []*net.UnixConn
	for range 200 {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond) // some accepts fail and back off
	restore()
	for _, c := range conns {
		c.Close()
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned while out of descriptors: %v", err)
	default:
	}
	if failed.Load() == 0 {
		t.Fatalf("no accept failed with EMFILE (%d dials)", len(conns))
	}
	t.Logf("%d dials, %d accepts failed with EMFILE", len(conns), failed.Load())
	c, h, err := openDevice(srv.SocketPath())
	if err != nil || h.Ret != 0 {
		t.Fatalf("open after the descriptors came back: %v %d", err, h.Ret)
	}
	c.Close()
	if err := neighbour(srv.SocketPath(), 10); err != nil {
		t.Fatal(err)
	}
	closeServer(t, srv, served)
}

// pinFile is a File whose write of (addr, length) pins that range of the
// client's MR space, as a REG_MR on shared pages does (dma.Pinner).
type pinFile struct {
	mem      uverbsd.Memory
	releases []func()
}

func (f *pinFile) Write(buf []byte) (uverbsd.Reply, error) {
	if len(buf) != 16 {
		return uverbsd.Reply{}, unix.EINVAL
	}
	p, ok := f.mem.(uverbs.MRSpacer).MRSpace().(dma.Pinner)
	if !ok {
		return uverbsd.Reply{}, unix.ENODEV
	}
	_, release, ok := p.Pin(binary.NativeEndian.Uint64(buf), binary.NativeEndian.Uint64(buf[8:]))
	if !ok {
		return uverbsd.Reply{}, unix.EFAULT
	}
	f.releases = append(f.releases, release)
	return uverbsd.Reply{N: len(buf)}, nil
}

func (f *pinFile) Mmap(off, length uint64) (*os.File, int64, error) { return nil, 0, unix.ENODEV }

func (f *pinFile) Close() error {
	for _, r := range f.releases {
		r()
	}
	return nil
}

// vmSize is this process's VmSize (/proc/self/status) in bytes.
func vmSize(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmSize:"); ok {
			var kb uint64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}

// TestSharedTerabytesAreRefusedAtTheBound: a raw client shares a sealed
// sparse memfd of 1 TiB again and again, pinning each share (as REG_MRs
// on it would): the daemon maps DefaultMaxShared/4 (8 TiB) of one client's
// pages, then answers ENOMEM, and its address space has grown by no more
// than that; the shares go with the connection.
func TestSharedTerabytesAreRefusedAtTheBound(t *testing.T) {
	srv, served := limitServer(t, uverbsd.Config{Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File {
		return &pinFile{mem: mem}
	}})
	const size = 1 << 40
	fd, addr := sparseMemfd(t, size)
	c, oh, err := openDevice(srv.SocketPath())
	if err != nil || oh.Ret != 0 {
		t.Fatalf("open: %v %d", err, oh.Ret)
	}
	defer c.Close()
	if oh.Aux&preload.FeatureSharePages == 0 {
		t.Skip("the daemon cannot open this process's /proc/PID/mem: no shared pages")
	}
	rng := make([]byte, 16)
	binary.NativeEndian.PutUint64(rng, addr)
	binary.NativeEndian.PutUint64(rng[8:], size)
	before := vmSize(t)
	shared := 0
	for i := range 64 {
		h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpShare}, rng), unix.UnixRights(fd))
		if h.Ret == -int32(unix.ENOMEM) {
			break
		}
		if h.Ret != 0 {
			t.Fatalf("share %d: %d", i, h.Ret)
		}
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, rng), nil); h.Ret != 16 {
			t.Fatalf("pin %d: %d", i, h.Ret)
		}
		shared++
	}
	grown := vmSize(t) - before
	t.Logf("%d shares of 1 TiB mapped, VmSize grew by %d GiB", shared, grown>>30)
	if want := int(uverbsd.DefaultMaxShared / 4 / size); shared != want {
		t.Errorf("%d shares of 1 TiB mapped, want %d (DefaultMaxShared/4)", shared, want)
	}
	if grown > uverbsd.DefaultMaxShared/4+1<<30 {
		t.Errorf("VmSize grew by %d GiB, more than the bound's %d", grown>>30, uverbsd.DefaultMaxShared/4>>30)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for vmSize(t) > before+1<<30 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := vmSize(t); after > before+1<<30 {
		t.Errorf("VmSize %d GiB above the start after the client left", (after-before)>>30)
	}
	closeServer(t, srv, served)
}

// TestGarbageFramesAreLoggedByNameAndRateLimited: a client that sends
// 10,000 frames the daemon refuses (malformed, unknown, out of order) gets
// an errno for each; the log names it by pid and command name and holds
// no more than the rate limit's 10 lines per 5 s; Warnings counts every
// refusal, and the coverage profile too (failed verbs daemon:OP).
func TestGarbageFramesAreLoggedByNameAndRateLimited(t *testing.T) {
	var logMu sync.Mutex
	var log []string
	col := coverage.NewCollector()
	srv, served := limitServer(t, uverbsd.Config{Recorder: col.Recorder("rxe0"), Logf: func(f string, a ...any) {
		logMu.Lock()
		log = append(log, fmt.Sprintf(f, a...))
		logMu.Unlock()
	}})
	start := time.Now()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	garbage := [][]byte{
		{1, 2, 3},
		preload.Frame(preload.Header{Op: preload.OpWrite}, []byte("before open")),
		preload.Frame(preload.Header{Op: 77}, nil),
		preload.Frame(preload.Header{Op: preload.OpMmap}, []byte{1}),
		preload.Frame(preload.Header{Op: preload.OpOpen, Aux: 99}, []byte(uverbsd.UverbsNode)),
	}
	const frames = 10000
	for i := range frames {
		if h := exchange(t, c, garbage[i%len(garbage)], nil); h.Ret >= 0 {
			t.Fatalf("garbage frame %d answered %d", i, h.Ret)
		}
	}
	elapsed := time.Since(start)
	if got := srv.Warnings(); got < frames {
		t.Errorf("Warnings() = %d after %d refused frames", got, frames)
	}
	// The coverage profile counts them as failed verbs of the daemon.
	var recorded uint64
	for k, n := range col.Profile().Verbs {
		if strings.HasPrefix(k.Verb, "daemon:") {
			recorded += n
		}
	}
	if recorded != frames {
		t.Errorf("the profile counts %d refused frames (daemon:*), want %d: %v", recorded, frames, col.Profile().Verbs)
	}
	logMu.Lock()
	defer logMu.Unlock()
	name := fmt.Sprintf("pid %d (%s): ", os.Getpid(), filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))])
	var named, suppressed int
	for _, l := range log {
		switch {
		case strings.HasPrefix(l, name):
			named++
		case strings.HasSuffix(l, "callbacks suppressed"):
			suppressed++
		default:
			t.Errorf("log line names no client: %q", l)
		}
	}
	intervals := int(elapsed/(5*time.Second)) + 1
	t.Logf("%d refused frames in %v: %d log lines naming the client, %d suppression lines; first %q",
		frames, elapsed.Round(time.Millisecond), named, suppressed, log[0])
	if named == 0 || named > 10*intervals {
		t.Errorf("%d lines name %q in %d intervals of 5 s, want 1 to %d", named, name, intervals, 10*intervals)
	}
	closeServer(t, srv, served)
}

// uverbsCommand is a legacy uverbs write command: the header, then req
// whose first 8 bytes (the response pointer) are set to resp.
func uverbsCommand[T any](cmd uint32, req T, resp []byte) []byte {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&req)), unsafe.Sizeof(req))
	binary.NativeEndian.PutUint64(b, uint64(uintptr(unsafe.Pointer(&resp[0]))))
	hdr := uverbs.CmdHdr{Command: cmd, In_words: uint16((int(unsafe.Sizeof(uverbs.CmdHdr{})) + len(b)) / 4),
		Out_words: uint16(len(resp) / 4)}
	out := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr))...)
	return append(out, b...)
}

// TestRegMRsOnSharedTerabytesStopAtTheBound: a raw client of the real
// uverbs device (OpenUverbs) shares a sealed sparse memfd of 1 TiB and
// registers an MR over all of it, again and again, with no RLIMIT_MEMLOCK
// to stop it (Config.NoMemlock, as CAP_IPC_LOCK): the daemon maps
// DefaultMaxShared/4 of its pages, then refuses the shares (ENOMEM; the
// REG_MRs that follow reach the pages through /proc/PID/mem), its
// address space grows by no more than that bound, and another client is
// served meanwhile.
func TestRegMRsOnSharedTerabytesStopAtTheBound(t *testing.T) {
	srv, served := limitServer(t, uverbsd.Config{Open: uverbsd.OpenUverbs, NoMemlock: true})
	fd, addr := sparseMemfd(t, 1<<40)
	before := vmSize(t) // the test's own mapping of the memfd counted
	c, shared, refused := regMRsOnSparseTerabytes(t, srv.SocketPath(), fd, addr, 12, false)
	defer c.Close()
	grown := vmSize(t) - before
	t.Logf("12 REG_MRs of 1 TiB: %d shares mapped, %d refused; VmSize grew by %d GiB", shared, refused, grown>>30)
	if want := int(uverbsd.DefaultMaxShared / 4 / (1 << 40)); shared != want {
		t.Errorf("%d shares of 1 TiB mapped, want %d (DefaultMaxShared/4)", shared, want)
	}
	if grown > uverbsd.DefaultMaxShared/4+1<<30 {
		t.Errorf("VmSize grew by %d GiB, more than the bound's %d", grown>>30, uverbsd.DefaultMaxShared/4>>30)
	}
	if err := neighbour(srv.SocketPath(), 10); err != nil {
		t.Fatalf("another client: %v", err)
	}
	closeServer(t, srv, served)
}

// regMRsOnSparseTerabytes opens the device at sock as a raw client and, n
// times, shares fd, a sealed sparse memfd of 1 TiB mapped at addr
// (sparseMemfd), and registers an MR over all of it; it returns the
// connection (the shares go with it) and how many shares the daemon
// mapped and refused (ENOMEM). A REG_MR that fails fails the test unless
// mayFail (an abuser that goes on whatever the daemon answers).
func regMRsOnSparseTerabytes(t *testing.T, sock string, fd int, addr uint64, n int, mayFail bool) (c *net.UnixConn, shared, refused int) {
	t.Helper()
	const size = 1 << 40
	c, oh, err := openDevice(sock)
	if err != nil || oh.Ret != 0 {
		t.Fatalf("open: %v %d", err, oh.Ret)
	}
	if oh.Aux&preload.FeatureSharePages == 0 {
		c.Close()
		t.Skip("the daemon cannot open this process's /proc/PID/mem: no shared pages")
	}
	write := func(what string, cmd []byte) {
		t.Helper()
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, cmd), nil); h.Ret != int32(len(cmd)) {
			t.Fatalf("%s: %d (%v)", what, h.Ret, unix.Errno(-h.Ret))
		}
	}
	resp := make([]byte, 64)
	write("GET_CONTEXT", uverbsCommand(uverbs.CmdGetContext, uverbs.GetContext{}, resp[:8]))
	write("ALLOC_PD", uverbsCommand(uverbs.CmdAllocPd, uverbs.AllocPd{}, resp[:4]))
	pd := binary.NativeEndian.Uint32(resp)
	rng := make([]byte, 16)
	binary.NativeEndian.PutUint64(rng, addr)
	binary.NativeEndian.PutUint64(rng[8:], size)
	for i := range n {
		switch h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpShare}, rng), unix.UnixRights(fd)); h.Ret {
		case 0:
			shared++
		case -int32(unix.ENOMEM):
			refused++
		default:
			t.Fatalf("share %d: %d", i, h.Ret)
		}
		reg := uverbsCommand(uverbs.CmdRegMr, uverbs.RegMr{Start: addr, Length: size,
			Hca_va: addr, Pd_handle: pd, Access_flags: uint32(ib.AccessLocalWrite)}, resp[:12])
		if mayFail {
			exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, reg), nil)
			continue
		}
		write(fmt.Sprintf("REG_MR %d of 1 TiB", i), reg)
	}
	runtime.KeepAlive(resp)
	return c, shared, refused
}

// TestSharedTerabytesLeaveAPairIntact: while a raw client shares and
// registers terabytes of sparse memory until the daemon refuses it, and
// goes on trying for as long as the pair runs, Debian's ibv_rc_pingpong,
// server and client on the same daemon, completes with its data checked
// (-c), and another pair does after it.
func TestSharedTerabytesLeaveAPairIntact(t *testing.T) {
	tool, err := exec.LookPath("ibv_rc_pingpong")
	testenv.Require(t, err == nil, "ibv_rc_pingpong is not installed (Debian package ibverbs-utils)")
	so, err := preload.Path(preload.Config{})
	testenv.Require(t, err == nil, "no C compiler for the preload library")
	srv, served := limitServer(t, uverbsd.Config{Open: uverbsd.OpenUverbs, NoMemlock: true})
	env := append(os.Environ(), uverbsd.Env(filepath.Dir(srv.SocketPath()), so)...)
	pair := func(port string, iters int) error {
		args := []string{"-d", "rxe0", "-g", "0", "-c", "-n", strconv.Itoa(iters), "-p", port}
		server := exec.Command(tool, args...)
		var sout strings.Builder
		server.Env, server.Stdout, server.Stderr, server.WaitDelay = env, &sout, &sout, 10*time.Second
		if err := server.Start(); err != nil {
			return err
		}
		defer server.Process.Kill()
		var cout []byte
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			client := exec.Command(tool, append(args, "127.0.0.1")...)
			client.Env, client.WaitDelay = env, 10*time.Second
			timer := time.AfterFunc(60*time.Second, func() { client.Process.Kill() })
			cout, err = client.CombinedOutput()
			timer.Stop()
			if err == nil || !strings.Contains(string(cout), "Couldn't connect") || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("client: %v\n%s\nserver:\n%s", err, cout, sout.String())
		}
		if err := server.Wait(); err != nil {
			return fmt.Errorf("server: %v\n%s", err, sout.String())
		}
		want := fmt.Sprintf("%d bytes in", 2*4096*iters)
		if !strings.Contains(string(cout), want) || !strings.Contains(sout.String(), want) {
			return fmt.Errorf("no %q:\nclient:\n%s\nserver:\n%s", want, cout, sout.String())
		}
		return nil
	}
	during := make(chan error, 1)
	go func() { during <- pair("18861", 2000) }()
	fd, addr := sparseMemfd(t, 1<<40)
	c, shared, refused := regMRsOnSparseTerabytes(t, srv.SocketPath(), fd, addr, 12, false)
	t.Logf("the abuser: %d shares of 1 TiB mapped, %d refused", shared, refused)
	if refused == 0 {
		t.Errorf("the daemon mapped all %d shares of 1 TiB", shared)
	}
	// The abuser goes on, on new connections whose shares the daemon
	// refuses, for as long as the pair runs.
	var pairErr error
	for rounds := 0; ; rounds++ {
		select {
		case pairErr = <-during:
		default:
			more, _, _ := regMRsOnSparseTerabytes(t, srv.SocketPath(), fd, addr, 2, true)
			more.Close()
			continue
		}
		t.Logf("the abuser went on for %d more connections while the pair ran", rounds)
		break
	}
	if pairErr != nil {
		t.Fatalf("the pair during the abuse: %v", pairErr)
	}
	c.Close()
	if err := pair("18862", 100); err != nil {
		t.Fatalf("the pair after the abuse: %v", err)
	}
	closeServer(t, srv, served)
}

// sparseMemfd returns a sealed (no shrinking, no growing) memfd of size
// bytes, sparse, mapped shared into the test's address space at addr; the
// test's end unmaps and closes it.
func sparseMemfd(t *testing.T, size int) (fd int, addr uint64) {
	t.Helper()
	fd, err := unix.MemfdCreate("softroce-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return fd, uint64(uintptr(unsafe.Pointer(&mem[0])))
}
