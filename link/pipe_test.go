package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/softroce/softroce/internal/testutil"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

func vlanFrame(n int) []byte {
	f := testutil.Frame(n, 0)
	f[12], f[13] = 0x81, 0x00
	return f
}

func TestPipeRoundTrip(t *testing.T) {
	a, b := Pipe()
	defer a.Close()
	defer b.Close()
	for _, dir := range []struct {
		name     string
		from, to *PipeEnd
	}{{"a to b", a, b}, {"b to a", b, a}} {
		t.Run(dir.name, func(t *testing.T) {
			sent := [][]byte{testutil.Frame(60, 1), testutil.Frame(1514, 2), testutil.Frame(14, 3)}
			want := make([][]byte, len(sent))
			for i, f := range sent {
				want[i] = bytes.Clone(f)
			}
			if n, err := dir.from.WritePackets(sent); n != 3 || err != nil {
				t.Fatalf("WritePackets = %d, %v; want 3, nil", n, err)
			}
			for _, f := range sent { // the link must not retain the caller's buffers
				clear(f)
			}
			bufs, sizes := testutil.ReadBufs(2, 2000)
			var got [][]byte
			for len(got) < 3 {
				n, err := dir.to.ReadPackets(bufs, sizes)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 || n > 2 {
					t.Fatalf("ReadPackets with 2 buffers returned %d", n)
				}
				for i := range n {
					got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
				}
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("frame %d: got % x..., want % x...", i, got[i][:16], want[i][:16])
				}
			}
		})
	}
	if s := a.Stats(); s.TxFrames != 3 || s.RxFrames != 3 || s.TxBytes != 60+1514+14 || s.RxBytes != s.TxBytes {
		t.Errorf("a.Stats() = %+v", s)
	}
}

func TestPipeTruncatesToReadBuffer(t *testing.T) {
	a, b := Pipe()
	f := testutil.Frame(100, 7)
	if _, err := a.WritePackets([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := testutil.ReadBufs(1, 40)
	n, err := b.ReadPackets(bufs, sizes)
	if n != 1 || err != nil || sizes[0] != 40 || !bytes.Equal(bufs[0], f[:40]) {
		t.Errorf("ReadPackets = %d, %v, size %d; want 1, nil, 40 bytes of the frame", n, err, sizes[0])
	}
}

func TestPipeMTU(t *testing.T) {
	for _, tt := range []struct {
		name  string
		mtu   int
		frame []byte
		errno error // nil: accepted
	}{
		{"default MTU exactly", 0, testutil.Frame(1514, 0), nil},
		{"default MTU plus one", 0, testutil.Frame(1515, 0), syscall.EMSGSIZE},
		{"VLAN tag allowed on top", 0, vlanFrame(1518), nil},
		{"VLAN tag plus one", 0, vlanFrame(1519), syscall.EMSGSIZE},
		{"untagged frame gets no VLAN allowance", 0, testutil.Frame(1518, 0), syscall.EMSGSIZE},
		{"jumbo MTU", 9000, testutil.Frame(9014, 0), nil},
		{"jumbo MTU plus one", 9000, testutil.Frame(9015, 0), syscall.EMSGSIZE},
		{"small MTU", 576, testutil.Frame(591, 0), syscall.EMSGSIZE},
		{"header only", 0, testutil.Frame(14, 0), nil},
		{"shorter than a header", 0, testutil.Frame(13, 0), syscall.EINVAL},
		{"empty", 0, nil, syscall.EINVAL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := NewPipe(&PipeConfig{MTU: tt.mtu})
			defer b.Close()
			ok := testutil.Frame(60, 1)
			n, err := a.WritePackets([][]byte{ok, tt.frame, ok})
			if tt.errno == nil {
				if n != 3 || err != nil {
					t.Fatalf("WritePackets = %d, %v; want 3, nil", n, err)
				}
				return
			}
			var opErr *net.OpError
			if n != 1 || !errors.Is(err, tt.errno) || !errors.As(err, &opErr) {
				t.Fatalf("WritePackets = %d, %v; want 1 and a *net.OpError wrapping %v", n, err, tt.errno)
			}
			if s := a.Stats(); s.Rejected != 1 || s.TxFrames != 1 {
				t.Errorf("Stats() = %+v; want 1 rejected, 1 sent", s)
			}
			if a.MTU() != max(tt.mtu, 0) && tt.mtu != 0 {
				t.Errorf("MTU() = %d, want %d", a.MTU(), tt.mtu)
			}
		})
	}
}

func TestPipeDefaults(t *testing.T) {
	a, _ := Pipe()
	if a.MTU() != 1500 || a.BatchSize() != 64 {
		t.Errorf("MTU, BatchSize = %d, %d; want 1500, 64", a.MTU(), a.BatchSize())
	}
	for _, bad := range []PipeConfig{{MTU: 67}, {MTU: 65536}, {QueueLen: -1}, {BatchSize: -2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewPipe(%+v) did not panic", bad)
				}
			}()
			NewPipe(&bad)
		}()
	}
}

// waitBlocked fails t if done is closed within a short while (the call
// should still be blocked).
func waitBlocked(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("%s returned; want it blocked", what)
	case <-time.After(20 * time.Millisecond):
	}
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked", what)
	}
}

func TestPipeCloseUnblocksRead(t *testing.T) {
	a, b := Pipe()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		bufs, sizes := testutil.ReadBufs(1, 100)
		_, err = b.ReadPackets(bufs, sizes)
	}()
	waitBlocked(t, done, "ReadPackets on an empty pipe")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, "ReadPackets after Close")
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadPackets after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.WritePackets([][]byte{testutil.Frame(60, 0)}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WritePackets on a closed end: %v, want net.ErrClosed", err)
	}
	if err := b.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v, want net.ErrClosed", err)
	}
	// The peer's writes into the closed end are dropped and counted.
	if n, err := a.WritePackets([][]byte{testutil.Frame(60, 0), testutil.Frame(60, 1)}); n != 2 || err != nil {
		t.Errorf("write toward a closed peer = %d, %v; want 2, nil", n, err)
	}
	if s := a.Stats(); s.Dropped != 2 || s.TxFrames != 0 {
		t.Errorf("Stats() = %+v; want 2 dropped", s)
	}
}

// writeThree writes frames 0, 1 and 2 to p in a goroutine; done closes
// when WritePackets returns, after which n and err hold its results.
func writeThree(p *PipeEnd) (done chan struct{}, n *int, err *error) {
	done, n, err = make(chan struct{}), new(int), new(error)
	go func() {
		defer close(done)
		*n, *err = p.WritePackets([][]byte{testutil.Frame(60, 0), testutil.Frame(60, 1), testutil.Frame(60, 2)})
	}()
	return done, n, err
}

func TestPipeFullQueue(t *testing.T) {
	t.Run("blocks until read", func(t *testing.T) {
		a, b := NewPipe(&PipeConfig{QueueLen: 2})
		done, n, err := writeThree(a)
		waitBlocked(t, done, "WritePackets of 3 frames into a queue of 2")
		bufs, sizes := testutil.ReadBufs(1, 100)
		if k, err := b.ReadPackets(bufs, sizes); k != 1 || err != nil || binary.BigEndian.Uint32(bufs[0][14:]) != 0 {
			t.Fatalf("ReadPackets = %d, %v, frame %d", k, err, binary.BigEndian.Uint32(bufs[0][14:]))
		}
		waitDone(t, done, "WritePackets after the reader made room")
		if *n != 3 || *err != nil {
			t.Errorf("WritePackets = %d, %v; want 3, nil", *n, *err)
		}
		for want := uint32(1); want <= 2; want++ {
			if _, err := b.ReadPackets(bufs, sizes); err != nil || binary.BigEndian.Uint32(bufs[0][14:]) != want {
				t.Errorf("frame %d: %v, got seq %d", want, err, binary.BigEndian.Uint32(bufs[0][14:]))
			}
		}
	})
	for _, closer := range []string{"writer", "reader"} {
		t.Run("close of "+closer+" unblocks", func(t *testing.T) {
			a, b := NewPipe(&PipeConfig{QueueLen: 1})
			done, n, err := writeThree(a)
			waitBlocked(t, done, "WritePackets into a full queue")
			if closer == "writer" {
				a.Close()
			} else {
				b.Close()
			}
			waitDone(t, done, "WritePackets after Close")
			switch closer {
			case "writer":
				if *n != 1 || !errors.Is(*err, net.ErrClosed) {
					t.Errorf("WritePackets = %d, %v; want 1, net.ErrClosed", *n, *err)
				}
			case "reader":
				if *n != 3 || *err != nil || a.Stats().Dropped != 2 {
					t.Errorf("WritePackets = %d, %v, stats %+v; want 3, nil, 2 dropped", *n, *err, a.Stats())
				}
			}
		})
	}
	t.Run("drop when full", func(t *testing.T) {
		a, b := NewPipe(&PipeConfig{QueueLen: 2, DropWhenFull: true})
		frames := [][]byte{testutil.Frame(60, 0), testutil.Frame(60, 1), testutil.Frame(60, 2), testutil.Frame(60, 3)}
		if n, err := a.WritePackets(frames); n != 4 || err != nil {
			t.Fatalf("WritePackets = %d, %v; want 4, nil", n, err)
		}
		if s := a.Stats(); s.TxFrames != 2 || s.Dropped != 2 {
			t.Errorf("Stats() = %+v; want 2 sent, 2 dropped", s)
		}
		bufs, sizes := testutil.ReadBufs(4, 100)
		if n, _ := b.ReadPackets(bufs, sizes); n != 2 || binary.BigEndian.Uint32(bufs[1][14:]) != 1 {
			t.Errorf("read %d frames, last seq %d; want the first 2", n, binary.BigEndian.Uint32(bufs[1][14:]))
		}
	})
}

// TestPipeConcurrent has several writers on one direction and one reader:
// every frame arrives exactly once and each writer's frames in order.
func TestPipeConcurrent(t *testing.T) {
	const writers, perWriter = 4, 500
	a, b := NewPipe(&PipeConfig{QueueLen: 8})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < perWriter; i += 5 {
				batch := make([][]byte, 5)
				for j := range batch {
					batch[j] = testutil.Frame(64, uint32(w<<16|(i+j)))
				}
				if n, err := a.WritePackets(batch); n != 5 || err != nil {
					t.Errorf("WritePackets = %d, %v", n, err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	next := make([]int, writers)
	total := 0
	var rg sync.WaitGroup
	{
		rg.Go(func() {
			bufs, sizes := testutil.ReadBufs(3, 100)
			for {
				n, err := b.ReadPackets(bufs, sizes)
				if err != nil {
					return
				}
				mu.Lock()
				for i := range n {
					seq := binary.BigEndian.Uint32(bufs[i][14:])
					w, k := int(seq>>16), int(seq&0xffff)
					if k != next[w] {
						t.Errorf("writer %d: frame %d, want %d", w, k, next[w])
					}
					next[w] = k + 1
					total++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := total
		mu.Unlock()
		if got == writers*perWriter || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.Close()
	rg.Wait()
	if total != writers*perWriter {
		t.Errorf("read %d frames, want %d", total, writers*perWriter)
	}
}

func TestPipeZeroAllocs(t *testing.T) {
	a, b := Pipe()
	out := [][]byte{testutil.Frame(1514, 1), testutil.Frame(60, 2)}
	bufs, sizes := testutil.ReadBufs(2, 1600)
	roundTrip := func() {
		if n, err := a.WritePackets(out); n != 2 || err != nil {
			t.Fatal(n, err)
		}
		if n, err := b.ReadPackets(bufs, sizes); n != 2 || err != nil {
			t.Fatal(n, err)
		}
	}
	for range 300 { // warm every slot of the ring
		roundTrip()
	}
	if allocs := testing.AllocsPerRun(1000, roundTrip); allocs != 0 {
		t.Errorf("steady-state write+read allocates %v times per round trip, want 0", allocs)
	}
}

func BenchmarkPipe(b *testing.B) {
	for _, bc := range []struct {
		name  string
		size  int
		batch int
	}{{"64B/batch1", 64, 1}, {"1514B/batch1", 1514, 1}, {"1514B/batch32", 1514, 32}} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := Pipe()
			out := make([][]byte, bc.batch)
			for i := range out {
				out[i] = testutil.Frame(bc.size, uint32(i))
			}
			bufs, sizes := testutil.ReadBufs(bc.batch, 2048)
			b.SetBytes(int64(bc.size * bc.batch))
			b.ReportAllocs()
			for b.Loop() {
				x.WritePackets(out)
				for got := 0; got < bc.batch; {
					n, _ := y.ReadPackets(bufs, sizes)
					got += n
				}
			}
		})
	}
	b.Run("1514B/two goroutines", func(b *testing.B) {
		x, y := Pipe()
		out := [][]byte{testutil.Frame(1514, 0)}
		b.SetBytes(1514)
		b.ReportAllocs()
		done := make(chan struct{})
		go func() {
			defer close(done)
			bufs, sizes := testutil.ReadBufs(64, 2048)
			for {
				if _, err := y.ReadPackets(bufs, sizes); err != nil {
					return
				}
			}
		}()
		for b.Loop() {
			x.WritePackets(out)
		}
		y.Close()
		<-done
	})
}
