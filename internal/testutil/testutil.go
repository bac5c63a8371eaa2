// Package testutil holds what the tests of several packages share: the
// kernel rxe captures (stored once, in wire/testdata), reading pcap files,
// and finding tshark. It is for tests only; the data path never imports
// it. Its testdata/ctest.h holds the checks the C test programs of several
// packages share (uverbsd's probe, cmd/softroce's verbs programs), which
// include it by its relative path.
package testutil

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testenv"
)

// CapturesDir is the directory of the captures made between two kernel rxe
// peers (Debian 12): wire/testdata in the module, as an absolute path, so
// that a test in any package finds it.
func CapturesDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testutil: runtime.Caller failed")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "wire", "testdata")
}

// Capture returns the path of the stored capture name. It fails the test
// when the file does not exist.
func Capture(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(CapturesDir(), name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("capture %s: %v", name, err)
	}
	return path
}

// Captures returns the stored captures whose names match pattern
// (filepath.Match syntax, e.g. "*.pcap"). It fails the test when nothing
// matches, so a moved directory cannot make a golden test pass vacuously.
func Captures(t testing.TB, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(CapturesDir(), pattern))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no captures match %s in %s", pattern, CapturesDir())
	}
	return files
}

// ReadPcap returns every frame of a pcap stream of Ethernet frames, in
// order. An empty capture (the file header only) yields no frames. A bad
// header, another link type or a damaged record fails the test.
func ReadPcap(t testing.TB, r io.Reader) [][]byte {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatalf("pcap: %v", err)
	}
	if pr.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("pcap link type %v, want Ethernet", pr.LinkType())
	}
	var frames [][]byte
	for {
		data, _, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("pcap: frame %d: %v", len(frames)+1, err)
		}
		frames = append(frames, data)
	}
}

// ReadPcapFile is ReadPcap on the file at path.
func ReadPcapFile(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ReadPcap(t, bytes.NewReader(b))
}

// Tshark returns the path of the tshark binary. Without one it skips the
// test, or fails it under CI (testenv.Require).
func Tshark(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("tshark")
	testenv.Require(t, err == nil, "tshark is not installed (apt-get install tshark)")
	return path
}

// Frame returns an n-byte IPv4-typed Ethernet frame whose payload starts
// with seq (big-endian) and is filled with seq's low byte: a frame a link
// test can tell apart from the others it sends.
func Frame(n int, seq uint32) []byte {
	f := make([]byte, n)
	copy(f, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00})
	for i := 14; i < n; i++ {
		f[i] = byte(seq)
	}
	if n >= 18 {
		binary.BigEndian.PutUint32(f[14:], seq)
	}
	return f
}

// ReadBufs returns n buffers of size bytes and their sizes slice, the
// arguments of a link's ReadPackets.
func ReadBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}
