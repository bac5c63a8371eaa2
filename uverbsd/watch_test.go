package uverbsd_test

import (
	"encoding/binary"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/uverbsd"
)

// openWatched opens uverbs0 on h as the preload library does and returns
// the connection and the watch page the OPEN reply passed (nil: none).
func openWatched(t *testing.T, h *harness) (*net.UnixConn, *os.File) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, _, err := c.WriteMsgUnix(preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil, nil); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	rh, _, err := preload.ParseFrame(buf[:n])
	if err != nil || rh.Ret != 0 {
		t.Fatalf("OPEN: %+v, %v", rh, err)
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	var fds []int
	for _, m := range msgs {
		f, _ := unix.ParseUnixRights(&m)
		fds = append(fds, f...)
	}
	offered := rh.Aux&preload.FeatureWatchPage != 0
	if offered != (len(fds) == 1) {
		t.Fatalf("OPEN reply: FeatureWatchPage %v with %d descriptors", offered, len(fds))
	}
	if !offered {
		return c, nil
	}
	page := os.NewFile(uintptr(fds[0]), "watch")
	t.Cleanup(func() { page.Close() })
	return c, page
}

// nullPostSend is librxe's doorbell of QP handle as a frame, one-way or not.
func nullPostSend(handle uint32, oneWay bool) []byte {
	hdr := uverbs.CmdHdr{Command: uverbs.CmdPostSend, In_words: 8, Out_words: 1}
	cmd := uverbs.PostSend{Qp_handle: handle, Wqe_size: 128}
	b := append(unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr)), unsafe.Slice((*byte)(unsafe.Pointer(&cmd)), unsafe.Sizeof(cmd))...)
	var aux uint32
	if oneWay {
		aux = preload.WriteOneWay
	}
	return preload.Frame(preload.Header{Op: preload.OpWrite, Aux: aux}, b)
}

// watchingHarness is a harness whose daemon has one-way doorbells and
// the watch page.
func watchingHarness(t *testing.T) *harness {
	return newHarness(t, func(c *uverbsd.Config) { c.WatchPage, c.OneWayDoorbells = true, true })
}

// clientWords maps page read-only, as the preload library does, and
// returns its words; the mapping goes with the test.
func clientWords(t *testing.T, page *os.File) []uint32 {
	t.Helper()
	mem, err := unix.Mmap(int(page.Fd()), 0, 4*preload.WatchHandles, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), preload.WatchHandles)
}

// TestWatchPageIsSealedAndReadOnlyForTheClient: with WatchPage the OPEN
// reply passes the watch page, every word clear, which the client can map
// read-only but neither writable nor resize, punch a hole in or write to
// (the daemon's own mapping stays safe); without it, OPEN passes nothing.
func TestWatchPageIsSealedAndReadOnlyForTheClient(t *testing.T) {
	if _, page := openWatched(t, newHarness(t)); page != nil {
		t.Fatal("a watch page without Config.WatchPage")
	}
	_, page := openWatched(t, newHarness(t, func(c *uverbsd.Config) { c.WatchPage = true }))
	if page == nil {
		t.Fatal("no watch page with Config.WatchPage")
	}
	fd := int(page.Fd())
	const size = 4 * preload.WatchHandles
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != size {
		t.Fatalf("watch page size %d (%v), want %d", st.Size, err, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	if err != nil || seals&want != want {
		t.Errorf("seals %#x (%v), want %#x", seals, err, want)
	}
	if _, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != unix.EPERM {
		t.Errorf("writable mapping: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, 0); err != unix.EPERM {
		t.Errorf("shrink: %v, want EPERM", err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, size); err != unix.EPERM {
		t.Errorf("punch a hole: %v, want EPERM", err)
	}
	if _, err := unix.Pwrite(fd, []byte{1}, 0); err != unix.EPERM {
		t.Errorf("write: %v, want EPERM", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("read-only mapping: %v", err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE); err == nil {
		t.Error("the read-only mapping became writable")
	}
	for i, b := range mem {
		if b != 0 {
			t.Fatalf("byte %d of a new watch page is %d", i, b)
		}
	}
}

// TestWatchedRingIsTakenBeforeTheDaemonWaits: a doorbell marks its QP
// watched before the daemon rings it, so that the client may skip the
// doorbells of posts that come meanwhile; before waiting for the next
// frame the daemon clears the word and rings the QP once more, keeps
// watching while that finds new WQEs (counted in DoorbellStats.Watched),
// and clears it for good when it finds none. While the daemon wants
// answered doorbells it marks nothing.
func TestWatchedRingIsTakenBeforeTheDaemonWaits(t *testing.T) {
	h := watchingHarness(t)
	c, page := openWatched(t, h)
	words := clientWords(t, page)
	f := <-h.files
	f.mu.Lock()
	f.watch = words
	// The doorbell finds the ring empty, the first last look two WQEs
	// posted meanwhile, the second none.
	f.takes = map[uint32][]int{3: {0, 2, 0}}
	f.mu.Unlock()
	rung := func(n int) []uint32 {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			f.mu.Lock()
			got := slices.Clone(f.doorbells)
			f.mu.Unlock()
			if len(got) >= n || time.Now().After(deadline) {
				return got
			}
		}
	}
	if _, _, err := c.WriteMsgUnix(nullPostSend(3, true), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := rung(3); !slices.Equal(got, []uint32{3, 3, 3}) {
		t.Fatalf("doorbells rung %v, want the client's and two last looks at handle 3", got)
	}
	time.Sleep(50 * time.Millisecond) // no fourth look comes
	f.mu.Lock()
	doorbells, seen := slices.Clone(f.doorbells), slices.Clone(f.seen)
	f.mu.Unlock()
	if len(doorbells) != 3 {
		t.Errorf("doorbells rung %v, want 3", doorbells)
	}
	if !slices.Equal(seen, []uint32{1, 0, 0}) {
		t.Errorf("watch word at each ring %v, want set at the client's doorbell, clear at each last look", seen)
	}
	if w := atomic.LoadUint32(&f.watch[3]); w != 0 {
		t.Errorf("watch word %d with the daemon waiting", w)
	}
	if st := h.srv.DoorbellStats(); st != (uverbsd.DoorbellStats{Doorbells: 1, Watched: 2}) {
		t.Errorf("DoorbellStats %+v, want 1 doorbell and 2 WQEs watched", st)
	}

	h.srv.SetSyncDoorbells(true)
	if _, _, err := c.WriteMsgUnix(nullPostSend(5, true), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := rung(4); !slices.Equal(got, []uint32{3, 3, 3, 5}) {
		t.Fatalf("doorbells rung %v, want one more of handle 5", got)
	}
	time.Sleep(50 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.doorbells) != 4 || f.seen[3] != 0 {
		t.Errorf("with answered doorbells wanted: rung %v, words seen %v; want no last look and no word set", f.doorbells, f.seen)
	}
}

// TestPreloadSkipsTheDoorbellsOfAWatchedRing: the preload library answers
// librxe's doorbells of a QP itself, sending nothing, while the daemon
// watches its ring. The probe rings QP handle 3: the first doorbell is
// answered by the daemon (nothing is known of the QP before) and marks
// nothing, the second goes one-way and marks the QP watched, and while
// the daemon works on it (the fake holds that ring) eight more reach the
// daemon not at all; its last look then takes their WQEs. A doorbell whose
// response address cannot be written goes to the daemon, which answers
// EFAULT as copy_to_user fails.
func TestPreloadSkipsTheDoorbellsOfAWatchedRing(t *testing.T) {
	h := watchingHarness(t)
	p := startProbe(t, h, "doorbells")
	f := <-h.files
	f.mu.Lock()
	f.holdRing = 1
	f.takes = map[uint32][]int{3: {1, 8, 0}}
	f.mu.Unlock()
	rings := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			f.mu.Lock()
			got := f.rings
			f.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d rings, want %d", got, n)
			}
		}
	}
	p.until(t, "ok answered doorbell")
	p.step("go")
	select {
	case <-f.held: // the one-way doorbell's ring, the word set
	case <-time.After(10 * time.Second):
		t.Fatal("the second doorbell did not reach the daemon")
	}
	p.step("go")
	p.until(t, "ok doorbells of a watched ring")
	if st := h.srv.DoorbellStats(); st.Doorbells != 2 {
		t.Errorf("DoorbellStats %+v, want 2 doorbells sent of 10 rung", st)
	}
	f.release <- struct{}{}
	rings(3)
	p.until(t, "ok doorbell with a bad response address")
	p.step("go")
	if err := p.wait(); err != nil {
		t.Fatalf("probe doorbells: %v\n%s", err, p.out.String())
	}
	if st := h.srv.DoorbellStats(); st != (uverbsd.DoorbellStats{Doorbells: 3, Watched: 8}) {
		t.Errorf("DoorbellStats %+v, want 3 doorbells (the last one's response address unwritable) and the 8 skipped WQEs taken on the last look", st)
	}
}

// TestCommandComesAfterTheSkippedDoorbells: a command that is not a
// doorbell, arriving while the daemon watches a ring, is served after the
// daemon took that ring's WQEs, whose doorbells the client skipped before
// it wrote the command (a MODIFY_QP to ERR must find them posted).
func TestCommandComesAfterTheSkippedDoorbells(t *testing.T) {
	h := watchingHarness(t)
	c, _ := openWatched(t, h)
	f := <-h.files
	f.mu.Lock()
	f.holdRing = 1
	f.takes = map[uint32][]int{3: {1, 2}}
	f.mu.Unlock()
	if _, _, err := c.WriteMsgUnix(nullPostSend(3, true), nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.held: // the word is set: the client skips its next doorbells
	case <-time.After(10 * time.Second):
		t.Fatal("the doorbell did not reach the daemon")
	}
	payload := make([]byte, 24)
	binary.NativeEndian.PutUint64(payload, 0x1000)
	if _, _, err := c.WriteMsgUnix(preload.Frame(preload.Header{Op: preload.OpWrite}, payload), nil, nil); err != nil {
		t.Fatal(err)
	}
	f.release <- struct{}{}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, _, _, err := c.ReadMsgUnix(make([]byte, 64), nil); err != nil {
		t.Fatalf("the command's reply: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.ringsAtWrite, []int{2}) {
		t.Errorf("rings before the command %v, want the doorbell's and the look at the watched ring", f.ringsAtWrite)
	}
	if st := h.srv.DoorbellStats(); st.Watched != 2 {
		t.Errorf("DoorbellStats %+v, want the 2 WQEs of the skipped doorbells watched", st)
	}
}

// TestCloseEndsAConnectionWhoseRingsStayBusy: a client that keeps a
// watched ring busy keeps the daemon looking at it instead of waiting for
// frames; Close still ends that connection, and leaves the ring's word of
// the watch page clear.
func TestCloseEndsAConnectionWhoseRingsStayBusy(t *testing.T) {
	h := watchingHarness(t)
	c, page := openWatched(t, h)
	words := clientWords(t, page)
	f := <-h.files
	f.mu.Lock()
	f.busy = 3
	f.mu.Unlock()
	if _, _, err := c.WriteMsgUnix(nullPostSend(3, true), nil, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.srv.DoorbellStats().Watched < 100; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not keep looking at the busy ring: %+v", h.srv.DoorbellStats())
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- h.srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not end the connection looking at a busy ring")
	}
	// The client's mapping outlives the connection: no word may stay
	// set, or its library would answer the QP's doorbells with nobody
	// to take the WQEs.
	if w := atomic.LoadUint32(&words[3]); w != 0 {
		t.Errorf("watch word %d after the connection ended, want 0", w)
	}
}

// TestSyncDoorbellsEnvironmentKeepsEveryDoorbellAnswered: with
// SOFTROCE_SYNC_DOORBELLS=1 in a program's environment the library sends
// every doorbell to the daemon and waits for its answer, on a daemon that
// offers one-way doorbells and the watch page.
func TestSyncDoorbellsEnvironmentKeepsEveryDoorbellAnswered(t *testing.T) {
	so, probe := tools(t)
	h := watchingHarness(t)
	cmd := h.command(so, probe, "doorbells")
	cmd.Env = append(cmd.Env, "SOFTROCE_SYNC_DOORBELLS=1")
	cmd.Stdin = strings.NewReader("go\ngo\ngo\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe doorbells: %v\n%s", err, out)
	}
	f := <-h.files
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := h.srv.DoorbellStats(); st.Doorbells != 11 || len(f.doorbells) != 0 {
		t.Errorf("DoorbellStats %+v, %d rung without an answer; want all 11 doorbells answered\n%s", st, len(f.doorbells), out)
	}
}

// TestLibraryAnswersOnlyLibrxesDoorbell: the library answers a doorbell
// itself only in the form librxe writes (post_send_db): a POST_SEND with
// no WRs whose in_words is the write's length, with one word of response
// room, a send WR's wqe_size (not more than kmalloc gives) and no further
// bytes. Any other form goes to the daemon for the kernel's answer
// (ENOSPC, EINVAL, EOPNOTSUPP, ENOMEM, or both words of a two-word room
// zeroed, EFAULT where the second cannot be written), and the response of
// the form it answers may sit at any writable address, aligned or not.
func TestLibraryAnswersOnlyLibrxesDoorbell(t *testing.T) {
	so, probe := tools(t)
	h := newHarness(t, func(c *uverbsd.Config) { c.OneWayDoorbells = true })
	out, err := h.command(so, probe, "oddbells").CombinedOutput()
	if err != nil {
		t.Fatalf("probe oddbells: %v\n%s", err, out)
	}
	t.Logf("probe:\n%s", out)
	// The library answered four in librxe's form itself, the QP known
	// at RTS: the doorbells just before the two whose response room runs
	// onto the unwritable page, the unaligned response and the one
	// across two writable pages. The last may still be on its way to
	// the File when the probe exits: the connection's end, which the
	// daemon reads after it, closes the File.
	f := <-h.files
	select {
	case <-f.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the File was not closed after the probe exited")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.doorbells) != 4 {
		t.Errorf("%d doorbells answered by the library, want 4", len(f.doorbells))
	}
}

// TestWatchPagesAreBounded: at most MaxWatchPages connections have a watch
// page at once (each is a mapping in the daemon, whose count the kernel
// bounds); the opens beyond are served without one, and a connection's
// end gives its page back for the next open.
func TestWatchPagesAreBounded(t *testing.T) {
	h := newHarness(t, func(c *uverbsd.Config) {
		c.WatchPage, c.OneWayDoorbells, c.Logf = true, true, nil
		c.MaxConnsPerClient = 1 << 20 // one process opens MaxWatchPages+1 times
		c.Open = func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File {
			return &fakeFile{mem: mem, closed: make(chan struct{}), writes: make(chan struct{}, 1),
				held: make(chan struct{}, 1), release: make(chan struct{})}
		}
	})
	var first *net.UnixConn
	for i := range uverbsd.MaxWatchPages {
		c, page := openWatched(t, h)
		if page == nil {
			t.Fatalf("open %d has no watch page, want one for the first %d", i, uverbsd.MaxWatchPages)
		}
		page.Close()
		if first == nil {
			first = c
		}
	}
	if _, page := openWatched(t, h); page != nil {
		t.Fatalf("open %d has a watch page, want none past %d", uverbsd.MaxWatchPages+1, uverbsd.MaxWatchPages)
	}
	clients := h.srv.Clients()
	first.Close()
	for deadline := time.Now().Add(10 * time.Second); h.srv.Clients() == clients; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection did not end")
		}
	}
	if _, page := openWatched(t, h); page == nil {
		t.Fatal("no watch page after a connection with one ended")
	}
}
