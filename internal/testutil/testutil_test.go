package testutil

import (
	"path/filepath"
	"testing"
)

// TestCaptures checks that the stored captures are found from this
// package's directory and read frame by frame: a real exchange has frames,
// the header-only capture has none.
func TestCaptures(t *testing.T) {
	files := Captures(t, "*.pcap")
	if len(files) < 2 {
		t.Fatalf("Captures(*.pcap) = %v, want the stored captures", files)
	}
	for _, f := range files {
		if filepath.Dir(f) != filepath.Clean(CapturesDir()) {
			t.Errorf("%s is not in %s", f, CapturesDir())
		}
	}
	if n := len(ReadPcapFile(t, Capture(t, "rc_pingpong.pcap"))); n == 0 {
		t.Error("rc_pingpong.pcap: no frames")
	}
	if n := len(ReadPcapFile(t, Capture(t, "ud_pingpong.pcap"))); n != 0 {
		t.Errorf("ud_pingpong.pcap (header only): %d frames, want 0", n)
	}
}
