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

	if _, err := a.WriteNoICRC([][]byte{raw}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadPackets(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], sealed) {
		t.Fatalf("ReadPackets: %d, %v: the frame without its exact ICRC", n, err)
	}

	if _, err := a.WriteNoICRC([][]byte{raw}); err != nil {
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
		if !bytes.Equal(bufs[0][:sizes[0]], f) || flags[0] != (i%2 == 0) {
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
