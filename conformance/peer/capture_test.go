package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/wire"
)

// kernelCaptures are the stored captures (internal/testutil) of RoCE traffic
// between two kernel rxe peers that the checkers must accept.
var kernelCaptures = []string{"atomic_bw.pcap", "rc_pingpong.pcap", "rc_pingpong_ipv6.pcap", "rping.pcap"}

// captureFiles returns the paths of kernelCaptures; it fails the test when
// one is missing.
func captureFiles(t *testing.T) []string {
	t.Helper()
	var paths []string
	for _, name := range kernelCaptures {
		paths = append(paths, testutil.Capture(t, name))
	}
	return paths
}

// TestCheckCaptureKernel checks the ICRC checker against captures made
// between two kernel rxe peers: every
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

// TestCheckCaptureWorkedExample checks wire's hand-worked ICRC example
// (rxe_icrc.c's algorithm), IPv4 RC SEND_ONLY "hello" with ICRC
// 0x4261F64E, in an Ethernet frame in a pcap: it must pass, and fail with
// its ICRC changed.
func TestCheckCaptureWorkedExample(t *testing.T) {
	ip, _ := hex.DecodeString("45000034000040004011b765c0a80101c0a80102c13212b7002000000430ffff000000128000000168656c6c6f000000")
	eth, _ := hex.DecodeString("02000000000202000000000108004500")
	frame := append(eth[:14], ip...)
	frame = binary.LittleEndian.AppendUint32(frame, 0x4261F64E)
	bad := bytes.Clone(frame)
	bad[len(bad)-1] ^= 1
	for _, c := range []struct {
		name  string
		frame []byte
		bad   int
	}{{"good", frame, 0}, {"bad icrc", bad, 1}} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := CheckCapture(writePcap(t, [][]byte{c.frame}))
			if err != nil {
				t.Fatal(err)
			}
			if rep.RoCE != 1 || rep.Opcodes[0x04] != 1 || len(rep.BadICRC) != c.bad {
				t.Errorf("RoCE %d, opcodes %s, bad %v; want 1 SEND_ONLY, %d bad", rep.RoCE, rep.OpcodeSummary(), rep.BadICRC, c.bad)
			}
		})
	}
}

// TestCheckCaptureMutations flips bytes of a RoCEv2 frame of a kernel
// capture: bytes the ICRC covers must make it fail, the variant fields it
// masks must not.
func TestCheckCaptureMutations(t *testing.T) {
	frames := testutil.ReadPcapFile(t, testutil.Capture(t, "rc_pingpong.pcap"))
	var frame []byte
	for _, f := range frames {
		if p, err := wire.Parse(f); err == nil && !p.IsIPv6() && len(f) > 14+20+8+12+4+16 {
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
	frames := testutil.ReadPcapFile(t, testutil.Capture(t, "rc_pingpong.pcap"))
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

func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(262144, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(0, 0), CaptureLength: len(f), Length: len(f)}, f); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "frames.pcap")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTsharkCheckKernel(t *testing.T) {
	testutil.Tshark(t)
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
