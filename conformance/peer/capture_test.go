package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// captureFiles returns testdata/*.pcap and fails on an empty match.
func captureFiles(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("testdata/*.pcap")
	if err != nil || len(m) == 0 {
		t.Fatalf("no testdata/*.pcap (err %v)", err)
	}
	return m
}

// TestCheckCaptureKernel checks the ICRC checker against captures made
// between two kernel rxe peers (copied from ../shared/captures): every
// RoCEv2 frame must verify.
func TestCheckCaptureKernel(t *testing.T) {
	for _, path := range captureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			rep, err := CheckCapture(path)
			if err != nil {
				t.Fatal(err)
			}
			if rep.RoCE == 0 {
				t.Fatalf("%d frames, none RoCEv2", rep.Frames)
			}
			if len(rep.BadICRC) > 0 {
				t.Errorf("%d of %d RoCEv2 frames fail: %v", len(rep.BadICRC), rep.RoCE, rep.BadICRC[:min(5, len(rep.BadICRC))])
			}
			t.Logf("%d frames, %d RoCEv2: %s", rep.Frames, rep.RoCE, rep.OpcodeSummary())
		})
	}
}

// TestRoCEICRCWorkedExample checks the spec's worked example
// (kernel-semantics.md §5.6): IPv4 RC SEND_ONLY "hello".
func TestRoCEICRCWorkedExample(t *testing.T) {
	pkt, _ := hex.DecodeString("45000034000040004011b765c0a80101c0a80102c13212b7002000000430ffff000000128000000168656c6c6f000000")
	if got, want := roceICRC(pkt, 20), uint32(0x4261F64E); got != want {
		t.Errorf("ICRC %08x, want %08x", got, want)
	}
}

// TestCheckCaptureMutations flips bytes of a RoCEv2 frame of a kernel
// capture: bytes the ICRC covers must make it fail, the variant fields it
// masks must not.
func TestCheckCaptureMutations(t *testing.T) {
	frames := readFrames(t, "testdata/rc_pingpong.pcap")
	var frame []byte
	for _, f := range frames {
		if _, _, ok := roceOffsets(f); ok && len(f) > 14+20+8+12+4+16 {
			frame = f
			break
		}
	}
	if frame == nil {
		t.Fatal("no RoCEv2 frame with payload in rc_pingpong.pcap")
	}
	const ip, udp, bth = 14, 14 + 20, 14 + 20 + 8
	cases := []struct {
		name string
		off  int
		bad  bool
	}{
		{"ipv4 TOS", ip + 1, false},
		{"ipv4 TTL", ip + 8, false},
		{"ipv4 checksum", ip + 10, false},
		{"udp checksum", udp + 6, false},
		{"bth FECN/BECN", bth + 4, false},
		{"ethernet dst", 0, false},
		{"ipv4 total length", ip + 3, true},
		{"ipv4 source", ip + 12, true},
		{"udp source port", udp + 1, true},
		{"bth opcode", bth, true},
		{"bth dest QP", bth + 7, true},
		{"bth PSN", bth + 11, true},
		{"payload", bth + 12 + 4, true},
		{"last payload byte", len(frame) - 5, true},
		{"icrc", len(frame) - 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := bytes.Clone(frame)
			f[c.off] ^= 0x10
			path := writePcap(t, [][]byte{f})
			rep, err := CheckCapture(path)
			if err != nil {
				t.Fatal(err)
			}
			if bad := len(rep.BadICRC) > 0; bad != c.bad {
				t.Errorf("flip byte %d: bad ICRC %v, want %v (%v)", c.off, bad, c.bad, rep.BadICRC)
			}
		})
	}
}

func TestCheckCaptureMalformedFile(t *testing.T) {
	frames := readFrames(t, "testdata/rc_pingpong.pcap")
	good := writePcap(t, frames[:3])
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte{1, 2, 3, 4}, b[4:]...)},
		{"truncated record", b[:len(b)-3]},
		{"truncated header", b[:30]},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.pcap")
			os.WriteFile(p, c.data, 0o644)
			if _, err := CheckCapture(p); err == nil {
				t.Error("no error")
			}
		})
	}
}

func readFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := newPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		b, _, err := r.next()
		if err != nil {
			return out
		}
		out = append(out, b)
	}
}

func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	var b bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr, 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 262144)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	b.Write(hdr)
	for _, f := range frames {
		rec := make([]byte, 16)
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		b.Write(rec)
		b.Write(f)
	}
	p := filepath.Join(t.TempDir(), "frames.pcap")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTsharkCheckKernel(t *testing.T) {
	_, err := exec.LookPath("tshark")
	testenv.Require(t, err == nil, "tshark is not installed (apt-get install tshark)")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, path := range captureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			bad, ib, err := TsharkCheck(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) > 0 || ib == 0 {
				t.Errorf("malformed frames %v, %d InfiniBand frames", bad, ib)
			}
		})
	}
}
