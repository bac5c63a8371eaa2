package link

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/wire"
)

// refFrame returns a frame of n payload bytes built without its ICRC, with
// its payload bytes overwritten (what a writer passing the payload by
// reference leaves there), the payload itself, and the frame Build makes
// with the payload and its ICRC.
func refFrame(t *testing.T, n int) (hole []byte, ref PayloadRef, sealed []byte) {
	t.Helper()
	sealed = roceFrame(t, n, false)
	var p wire.Packet
	if err := p.Decode(sealed); err != nil {
		t.Fatal(err)
	}
	pay := bytes.Clone(p.Payload())
	for i := range pay {
		pay[i] = byte(i*7 + 3)
	}
	copy(sealed[p.PayloadOffset():], pay)
	if err := wire.SealICRC(sealed, EthernetHeaderSize); err != nil {
		t.Fatal(err)
	}
	hole = roceFrame(t, n, true)
	for i := range pay {
		hole[p.PayloadOffset()+i] = 0xee
	}
	return hole, PayloadRef{Off: p.PayloadOffset(), B: pay}, sealed
}

// TestWriteRefMaterialisesWhereObservable: a frame whose payload the pipe
// carries by reference reaches a ReadRef reader as written with the
// reference beside it, a ReadNoICRC reader with its payload in place and
// marked as carrying no ICRC, and a ReadPackets reader (a capture, any
// reader but an emulated device) with its payload and its exact ICRC: the
// frame Build makes from the same fields.
func TestWriteRefMaterialisesWhereObservable(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200})
	hole, ref, sealed := refFrame(t, 4096)
	withPay := bytes.Clone(hole)
	copy(withPay[ref.Off:], ref.B)
	bufs := [][]byte{make([]byte, MaxFrameSize(4200)), make([]byte, MaxFrameSize(4200))}
	sizes, flags, refs := make([]int, 2), make([]bool, 2), make([]PayloadRef, 2)

	write := func() {
		t.Helper()
		if n, err := a.WriteRef([][]byte{bytes.Clone(hole), bytes.Clone(sealed)}, []PayloadRef{ref}); n != 2 || err != nil {
			t.Fatalf("WriteRef: %d, %v", n, err)
		}
	}
	write()
	if n, err := b.ReadRef(bufs, sizes, flags, refs); n != 2 || err != nil {
		t.Fatalf("ReadRef: %d, %v", n, err)
	}
	if !flags[0] || !bytes.Equal(bufs[0][:sizes[0]], hole) || refs[0].Off != ref.Off || !bytes.Equal(refs[0].B, ref.B) || &refs[0].B[0] != &ref.B[0] {
		t.Errorf("ReadRef: marked %v, frame as written %v, reference %d/%d bytes", flags[0], bytes.Equal(bufs[0][:sizes[0]], hole), refs[0].Off, len(refs[0].B))
	}
	if refs[1].B != nil || !bytes.Equal(bufs[1][:sizes[1]], sealed) {
		t.Errorf("ReadRef: a frame written without a reference got one (%d bytes) or changed", len(refs[1].B))
	}

	write()
	if n, err := b.ReadNoICRC(bufs, sizes, flags); n != 2 || err != nil {
		t.Fatalf("ReadNoICRC: %d, %v", n, err)
	}
	if !flags[0] || !bytes.Equal(bufs[0][:sizes[0]], withPay) {
		t.Errorf("ReadNoICRC: marked %v, payload in place %v", flags[0], bytes.Equal(bufs[0][:sizes[0]], withPay))
	}

	write()
	if n, err := b.ReadPackets(bufs, sizes); n != 2 || err != nil {
		t.Fatalf("ReadPackets: %d, %v", n, err)
	}
	for i := range 2 {
		if !bytes.Equal(bufs[i][:sizes[i]], sealed) {
			t.Errorf("ReadPackets: frame %d is not the sealed frame with its payload", i)
		}
		var p wire.Packet
		if err := p.Decode(bufs[i][:sizes[i]]); err != nil || p.VerifyICRC() != nil {
			t.Errorf("ReadPackets: frame %d: %v, ICRC %v", i, err, p.VerifyICRC())
		}
	}
}

// TestWriteRefRefusesAReferenceOutsideItsFrame: a reference that would
// reach past its frame is refused with EINVAL, as an oversized frame is,
// and the frames before it are written.
func TestWriteRefRefusesAReferenceOutsideItsFrame(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200})
	hole, ref, _ := refFrame(t, 1024)
	for _, bad := range []PayloadRef{{Off: len(hole) - len(ref.B) + 1, B: ref.B}, {Off: -1, B: ref.B}, {Off: len(hole) + 1, B: ref.B[:1]}} {
		n, err := a.WriteRef([][]byte{bytes.Clone(hole), bytes.Clone(hole)}, []PayloadRef{ref, bad})
		if n != 1 || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("reference at %d of %d bytes: wrote %d, %v; want 1, EINVAL", bad.Off, len(bad.B), n, err)
		}
	}
	if st := a.Stats(); st.Rejected != 3 || st.TxFrames != 3 {
		t.Errorf("stats %+v, want 3 rejected and 3 sent", st)
	}
	bufs, sizes, flags, refs := [][]byte{make([]byte, 5000)}, []int{0}, []bool{false}, []PayloadRef{{}}
	for range 3 {
		if n, err := b.ReadRef(bufs, sizes, flags, refs); n != 1 || err != nil || refs[0].B == nil {
			t.Fatalf("ReadRef: %d, %v, reference %v", n, err, refs[0].B != nil)
		}
	}
}

// TestWriteRefNeverWaits: WriteRef on a full queue makes it longer instead
// of waiting for the reader (two devices whose readers write answers
// would otherwise wait for each other), keeps the order of the frames,
// also in a second burst.
// WriteNoICRC on the same full queue still waits.
func TestWriteRefNeverWaits(t *testing.T) {
	a, b := NewPipe(&PipeConfig{MTU: 4200, QueueLen: 4})
	bufs := [][]byte{make([]byte, MaxFrameSize(4200))}
	sizes, flags, refs := []int{0}, []bool{false}, []PayloadRef{{}}
	for round := range 2 {
		for i := range 40 {
			f := roceFrame(t, 300+i, true)
			f[len(f)-1] = byte(i) // the ICRC's place: which frame it is
			if n, err := a.WriteRef([][]byte{f}, nil); n != 1 || err != nil {
				t.Fatalf("round %d, frame %d: WriteRef %d, %v", round, i, n, err)
			}
		}
		for i := range 40 {
			if n, err := b.ReadRef(bufs, sizes, flags, refs); n != 1 || err != nil {
				t.Fatalf("ReadRef: %d, %v", n, err)
			}
			if sizes[0] != len(roceFrame(t, 300+i, true)) || bufs[0][sizes[0]-1] != byte(i) {
				t.Fatalf("round %d: frame %d read out of order", round, i)
			}
		}
	}
	for range 64 {
		if _, err := a.WriteRef([][]byte{roceFrame(t, 100, true)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		a.WriteNoICRC([][]byte{roceFrame(t, 100, true)})
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("WriteNoICRC did not wait on a full queue")
	case <-time.After(20 * time.Millisecond):
	}
	a.Close()
	<-done
}
