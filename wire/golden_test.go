package wire

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/internal/testutil"
)

// captureFiles returns the stored captures matching pattern; it fails the
// test when nothing matches.
func captureFiles(t testing.TB, pattern string) []string {
	t.Helper()
	return testutil.Captures(t, pattern)
}

// readCapture returns every frame of a pcap file. An empty capture (only
// the file header) yields no frames.
func readCapture(t testing.TB, path string) [][]byte {
	t.Helper()
	return testutil.ReadPcapFile(t, path)
}

// roceFrames returns the RoCE frames (UDP port 4791) of every capture.
func roceFrames(t testing.TB) (frames [][]byte, names []string) {
	t.Helper()
	for _, path := range captureFiles(t, "*.pcap") {
		for i, fr := range readCapture(t, path) {
			var p Packet
			if err := p.Decode(fr); errors.Is(err, ErrNotRoCE) {
				continue
			}
			frames = append(frames, fr)
			names = append(names, filepath.Base(path)+"#"+itoa(i+1))
		}
	}
	return frames, names
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// TestGoldenCaptures checks every frame of every kernel rxe capture: RoCE
// frames parse, their ICRC verifies, and Build from the parsed fields
// reproduces the frame byte for byte; other frames are reported as not
// RoCE.
func TestGoldenCaptures(t *testing.T) {
	total := 0
	for _, path := range captureFiles(t, "*.pcap") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			frames := readCapture(t, path)
			roce := 0
			for i, fr := range frames {
				var p Packet
				err := p.Decode(fr)
				if errors.Is(err, ErrNotRoCE) {
					continue
				}
				if err != nil {
					t.Errorf("frame %d: %v", i+1, err)
					continue
				}
				roce++
				if err := p.VerifyICRC(); err != nil {
					t.Errorf("frame %d (%v): %v: stored %#08x computed %#08x", i+1, p.Opcode(), err, p.ICRC(), p.ComputeICRC())
				}
				if err := VerifyICRC(fr, p.L3Offset()); err != nil {
					t.Errorf("frame %d: VerifyICRC: %v", i+1, err)
				}
				var f Frame
				p.Fields(&f)
				buf := make([]byte, 2048+len(fr))
				n, err := Build(buf, &f)
				if err != nil {
					t.Errorf("frame %d: Build: %v", i+1, err)
					continue
				}
				if !bytes.Equal(buf[:n], fr[:p.Len()]) {
					t.Errorf("frame %d (%v): rebuilt frame differs\n got %x\nwant %x", i+1, p.Opcode(), buf[:n], fr[:p.Len()])
				}
			}
			t.Logf("%d frames, %d RoCE", len(frames), roce)
			total += roce
		})
	}
	if total == 0 {
		t.Fatal("no RoCE frames in any capture")
	}
}
