package link

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/wire"
)

// roceFrame builds an RC WRITE MIDDLE frame of n payload bytes, with or
// without its ICRC.
func roceFrame(t *testing.T, n int, noICRC bool) []byte {
	t.Helper()
	f := wire.Frame{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, SrcPort: 0xc000,
		BTH:     wire.BTHFields{Opcode: wire.RCRDMAWriteMiddle, DestQP: 0x11, PSN: 7, PKey: 0xffff},
		Payload: bytes.Repeat([]byte{0x5a}, n), NoICRC: noICRC}
	b := make([]byte, f.Len())
	if _, err := wire.Build(b, &f); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriteNoICRC: a frame written without its ICRC reaches a ReadNoICRC
// reader marked and as written, and a ReadPackets reader with the exact
// ICRC, the frame Build makes with it; frames written with WritePackets
// are never marked.
func TestWriteNoICRC(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200})
	raw, sealed := roceFrame(t, 1024, true), roceFrame(t, 1024, false)
	if bytes.Equal(raw, sealed) {
		t.Fatal("the frame built without its ICRC has it")
	}
	bufs := [][]byte{make([]byte, 5000), make([]byte, 5000)}
	sizes, flags := make([]int, 2), make([]bool, 2)

	if _, err := a.WriteNoICRC([][]byte{bytes.Clone(raw)}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadPackets(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], sealed) {
		t.Fatalf("ReadPackets: %d, %v: the frame without its exact ICRC", n, err)
	}

	if _, err := a.WriteNoICRC([][]byte{bytes.Clone(raw)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WritePackets([][]byte{sealed}); err != nil {
		t.Fatal(err)
	}
	n, err := b.ReadNoICRC(bufs, sizes, flags)
	if n != 2 || err != nil {
		t.Fatalf("ReadNoICRC: %d, %v", n, err)
	}
	if !flags[0] || !bytes.Equal(bufs[0][:sizes[0]], raw) {
		t.Errorf("ReadNoICRC: first frame marked %v, as written %v", flags[0], bytes.Equal(bufs[0][:sizes[0]], raw))
	}
	if flags[1] || !bytes.Equal(bufs[1][:sizes[1]], sealed) {
		t.Errorf("ReadNoICRC: a frame written with WritePackets marked %v", flags[1])
	}
}

// TestReadNoICRCTradesBuffers: a ReadNoICRC reader whose buffers are the
// link's largest frame gets the queue's buffers instead of a copy, and
// every frame intact.
func TestReadNoICRCTradesBuffers(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200, QueueLen: 4})
	size := MaxFrameSize(4200)
	bufs := [][]byte{make([]byte, size)}
	sizes, flags := make([]int, 1), make([]bool, 1)
	traded := 0
	for i := range 40 {
		f := roceFrame(t, 100+100*i, i%2 == 0)
		want := bytes.Clone(f)
		write := a.WritePackets
		if i%2 == 0 {
			write = a.WriteNoICRC
		}
		if _, err := write([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		before := &bufs[0][:1][0]
		if n, err := b.ReadNoICRC(bufs, sizes, flags); n != 1 || err != nil {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
		if !bytes.Equal(bufs[0][:sizes[0]], want) || flags[0] != (i%2 == 0) {
			t.Fatalf("frame %d differs or is marked %v", i, flags[0])
		}
		if cap(bufs[0]) < size {
			t.Fatalf("frame %d came in a buffer of %d bytes, want at least %d", i, cap(bufs[0]), size)
		}
		if &bufs[0][:1][0] != before {
			traded++
		}
	}
	if traded == 0 {
		t.Error("ReadNoICRC copied every frame")
	}
}

// TestWriteNoICRCTradesBuffers: WriteNoICRC takes a large frame's buffer
// and gives the writer one of at least its capacity that no queued frame
// uses (so that writing into it changes nothing the reader gets); it
// copies small frames and leaves the buffers of frames it drops; the
// frames reach a ReadNoICRC reader and a ReadPackets reader (with their
// ICRC) intact.
func TestWriteNoICRCTradesBuffers(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200, QueueLen: 8, DropWhenFull: true})
	size := MaxFrameSize(4200)
	newBuf := func(n int) []byte {
		buf := make([]byte, size)
		return buf[:copy(buf, roceFrame(t, n, true))]
	}
	for round := range 4 {
		var bufs, want [][]byte
		for i := range 8 {
			n := 1000 + 100*i
			if i == 3 {
				n = 64 // a small frame: copied
			}
			bufs = append(bufs, newBuf(n))
			want = append(want, bytes.Clone(bufs[i]))
		}
		given := make([]*byte, len(bufs))
		for i := range bufs {
			given[i] = &bufs[i][:1][0]
		}
		if n, err := a.WriteNoICRC(bufs); n != 8 || err != nil {
			t.Fatalf("round %d: WriteNoICRC: %d, %v", round, n, err)
		}
		for i := range bufs {
			taken := &bufs[i][:1][0] != given[i]
			if taken != (i != 3) {
				t.Fatalf("round %d: frame %d (%d bytes): buffer taken %v", round, i, len(want[i]), taken)
			}
			if cap(bufs[i]) < size {
				t.Fatalf("round %d: frame %d: the writer got a buffer of %d bytes, want at least %d", round, i, cap(bufs[i]), size)
			}
			b := bufs[i][:cap(bufs[i])]
			for j := range b {
				b[j] = 0xee // the writer reuses what it got back
			}
		}
		// The queue is full: a frame written now is dropped and keeps its buffer.
		extra := [][]byte{newBuf(2000)}
		before := &extra[0][:1][0]
		if n, err := a.WriteNoICRC(extra); n != 1 || err != nil || &extra[0][:1][0] != before {
			t.Fatalf("round %d: dropped frame: %d, %v, buffer kept %v", round, n, err, &extra[0][:1][0] == before)
		}
		rbufs, sizes, flags := make([][]byte, 8), make([]int, 8), make([]bool, 8)
		for i := range rbufs {
			rbufs[i] = make([]byte, size)
		}
		var n int
		var err error
		if round%2 == 0 {
			n, err = b.ReadNoICRC(rbufs, sizes, flags)
		} else {
			n, err = b.ReadPackets(rbufs, sizes)
		}
		if n != 8 || err != nil {
			t.Fatalf("round %d: read %d, %v", round, n, err)
		}
		for i := range n {
			got := rbufs[i][:sizes[i]]
			if round%2 == 1 {
				if err := wire.VerifyICRC(got, EthernetHeaderSize); err != nil {
					t.Fatalf("round %d: frame %d read with ReadPackets: %v", round, i, err)
				}
				got = got[:len(got)-wire.ICRCSize]
			} else if !flags[i] {
				t.Fatalf("round %d: frame %d not marked", round, i)
			}
			if w := want[i][:len(got)]; !bytes.Equal(got, w) {
				t.Fatalf("round %d: frame %d differs from what was written", round, i)
			}
		}
	}
	if s := a.Stats(); s.Dropped != 4 || s.TxFrames != 32 {
		t.Errorf("stats %+v, want 32 frames queued and 4 dropped", s)
	}
}

// TestWriteNoICRCGetsTheReadersBuffer: the buffer a ReadNoICRC reader
// traded in last is the one the next WriteNoICRC writer gets back (the
// buffer most likely still in a cache), not a slot's.
func TestWriteNoICRCGetsTheReadersBuffer(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200, QueueLen: 16})
	size := MaxFrameSize(4200)
	frame := func() []byte {
		buf := make([]byte, size)
		return buf[:copy(buf, roceFrame(t, 2000, true))]
	}
	for i := range 40 {
		if _, err := a.WriteNoICRC([][]byte{frame()}); err != nil {
			t.Fatal(err)
		}
		rb := [][]byte{make([]byte, size)}
		mine := &rb[0][0]
		if n, err := b.ReadNoICRC(rb, make([]int, 1), make([]bool, 1)); n != 1 || err != nil {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
		w := [][]byte{frame()}
		if _, err := a.WriteNoICRC(w); err != nil {
			t.Fatal(err)
		}
		if &w[0][:1][0] != mine {
			t.Fatalf("round %d: the writer did not get the buffer the reader traded in", i)
		}
		if n, err := b.ReadNoICRC(rb, make([]int, 1), make([]bool, 1)); n != 1 || err != nil {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
	}
}
