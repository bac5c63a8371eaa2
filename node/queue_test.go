package node

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
)

func TestRoCELinkQueue(t *testing.T) {
	a, b := link.Pipe()
	defer b.Close()
	r := newRoCELink(a, [6]byte{2, 0, 0, 0, 0, 1})
	frame := []byte("a RoCE frame, copied")
	r.push(frame)
	frame[0] = 'X' // the Host reuses its buffer: the queued copy must not change
	r.push([]byte("second"))
	bufs, sizes := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}, make([]int, 3)
	n, err := r.ReadPackets(bufs, sizes)
	if err != nil || n != 2 {
		t.Fatalf("ReadPackets = %d, %v; want 2 frames", n, err)
	}
	if string(bufs[0][:sizes[0]]) != "a RoCE frame, copied" || string(bufs[1][:sizes[1]]) != "second" {
		t.Fatalf("read %q, %q", bufs[0][:sizes[0]], bufs[1][:sizes[1]])
	}
	// Writes go to the real link.
	out := bytes.Repeat([]byte{7}, 60)
	if n, err := r.WritePackets([][]byte{out}); n != 1 || err != nil {
		t.Fatalf("WritePackets = %d, %v", n, err)
	}
	if n, err := b.ReadPackets(bufs[:1], sizes[:1]); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], out) {
		t.Fatalf("peer read %d, %v", n, err)
	}
	// A frame to the node's own MAC comes back instead of going out, in
	// order with the frames around it.
	self := append([]byte{2, 0, 0, 0, 0, 1}, bytes.Repeat([]byte{9}, 54)...)
	if n, err := r.WritePackets([][]byte{out, self, out}); n != 3 || err != nil {
		t.Fatalf("WritePackets with a looped frame = %d, %v", n, err)
	}
	if n, err := r.ReadPackets(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], self) {
		t.Fatalf("looped frame: read %d, %v", n, err)
	}
	for range 2 {
		if n, err := b.ReadPackets(bufs[:1], sizes[:1]); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], out) {
			t.Fatalf("peer read %d, %v", n, err)
		}
	}
	// A frame to an IP multicast MAC goes out and comes back (local
	// members of the group), as ip_mc_output loops a copy.
	mc := append([]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, bytes.Repeat([]byte{5}, 54)...)
	if n, err := r.WritePackets([][]byte{mc}); n != 1 || err != nil {
		t.Fatalf("WritePackets multicast = %d, %v", n, err)
	}
	if n, err := b.ReadPackets(bufs[:1], sizes[:1]); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], mc) {
		t.Fatalf("peer read of the multicast frame %d, %v", n, err)
	}
	if n, err := r.ReadPackets(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], mc) {
		t.Fatalf("multicast frame looped: read %d, %v", n, err)
	}
	if n, err := r.WritePackets([][]byte{append(self, make([]byte, 2000)...)}); n != 0 || !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("looping back a frame over the MTU: %d, %v; want EMSGSIZE", n, err)
	}
	// A full queue drops and counts.
	for range roceQueueLen + 3 {
		r.push(frame)
	}
	if got := r.dropped.Load(); got != 3 {
		t.Errorf("dropped %d, want 3", got)
	}
	// Close wakes a blocked reader, and reads and writes fail after it.
	r.ReadPackets(make([][]byte, roceQueueLen), make([]int, roceQueueLen))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := r.ReadPackets(bufs, sizes); !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked read after Close: %v", err)
		}
	}()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := r.WritePackets([][]byte{out}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
	if err := r.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	r.push(frame) // dropped, no panic
}

// TestRoCELinkAllocs: handing a frame to the device allocates nothing in
// steady state.
func TestRoCELinkAllocs(t *testing.T) {
	a, b := link.Pipe()
	defer b.Close()
	r := newRoCELink(a, [6]byte{2, 0, 0, 0, 0, 1})
	frame := make([]byte, 1100)
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	r.push(frame)
	r.ReadPackets(bufs, sizes)
	if n := testing.AllocsPerRun(1000, func() {
		r.push(frame)
		r.ReadPackets(bufs, sizes)
	}); n != 0 {
		t.Errorf("%v allocations per frame, want 0", n)
	}
}

func BenchmarkRoCELink(b *testing.B) {
	x, y := link.Pipe()
	defer y.Close()
	r := newRoCELink(x, [6]byte{2, 0, 0, 0, 0, 1})
	frame := make([]byte, 1100)
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		r.push(frame)
		r.ReadPackets(bufs, sizes)
	}
}

// TestRoCELinkMulticastLoopback: a frame to an IP multicast group goes to
// the link and, when the node receives the group, comes back too (IPv4
// and IPv6 destinations read from the frame); a group the node does not
// receive only goes out; without a membership test every frame to an IP
// multicast MAC comes back.
func TestRoCELinkMulticastLoopback(t *testing.T) {
	a, b := link.Pipe()
	defer b.Close()
	r := newRoCELink(a, [6]byte{2, 0, 0, 0, 0, 1})
	joined := map[netip.Addr]bool{netip.MustParseAddr("239.1.2.3"): true, netip.MustParseAddr("ff0e::4791"): true}
	r.member = func(g netip.Addr) bool { return joined[g] }
	frame := func(g netip.Addr) []byte {
		f := make([]byte, 80)
		if g.Is4() {
			copy(f, []byte{0x01, 0x00, 0x5e})
			f[12], f[13] = 0x08, 0x00
			copy(f[30:34], g.AsSlice())
		} else {
			copy(f, []byte{0x33, 0x33})
			f[12], f[13] = 0x86, 0xdd
			copy(f[38:54], g.AsSlice())
		}
		return f
	}
	bufs, sizes := [][]byte{make([]byte, 128), make([]byte, 128)}, make([]int, 2)
	for _, c := range []struct {
		group string
		back  bool
	}{{"239.1.2.3", true}, {"ff0e::4791", true}, {"239.9.9.9", false}, {"ff0e::1", false}} {
		f := frame(netip.MustParseAddr(c.group))
		if n, err := r.WritePackets([][]byte{f}); n != 1 || err != nil {
			t.Fatalf("%s: WritePackets = %d, %v", c.group, n, err)
		}
		if n, err := b.ReadPackets(bufs[:1], sizes[:1]); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], f) {
			t.Fatalf("%s: the frame did not go out: %d, %v", c.group, n, err)
		}
		r.mu.Lock()
		queued := len(r.q)
		r.mu.Unlock()
		if (queued == 1) != c.back {
			t.Errorf("%s: %d frames looped back, want the frame back: %v", c.group, queued, c.back)
		}
		if queued > 0 {
			r.ReadPackets(bufs, sizes)
		}
	}
	r.member = nil
	f := frame(netip.MustParseAddr("239.9.9.9"))
	r.WritePackets([][]byte{f})
	b.ReadPackets(bufs[:1], sizes[:1])
	if n, err := r.ReadPackets(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], f) {
		t.Errorf("without a membership test: read %d, %v", n, err)
	}
}

// readyLink is a link that says whether a frame waits on it.
type readyLink struct {
	link.Link
	ready bool
}

func (l *readyLink) ReadReady() bool { return l.ready }

// TestRoCELinkReadReady checks that the device's queue reports a frame
// waiting when one is queued for the device or waits on the real link for
// the Host, and not otherwise (rxe.ReadReadier).
func TestRoCELinkReadReady(t *testing.T) {
	a, b := link.Pipe()
	defer b.Close()
	out := &readyLink{Link: a}
	r := newRoCELink(out, [6]byte{2, 0, 0, 0, 0, 1})
	if r.ReadReady() {
		t.Error("ReadReady with nothing queued: true")
	}
	r.push([]byte("a RoCE frame"))
	if !r.ReadReady() {
		t.Error("ReadReady with a frame queued: false")
	}
	bufs, sizes := [][]byte{make([]byte, 64)}, []int{0}
	if n, err := r.ReadPackets(bufs, sizes); n != 1 || err != nil {
		t.Fatalf("ReadPackets = %d, %v", n, err)
	}
	if r.ReadReady() {
		t.Error("ReadReady after the frame was read: true")
	}
	out.ready = true
	if !r.ReadReady() {
		t.Error("ReadReady with a frame waiting on the real link: false")
	}
}
