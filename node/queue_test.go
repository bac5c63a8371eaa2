package node

import (
	"bytes"
	"errors"
	"net"
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
