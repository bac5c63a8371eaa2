package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/wire"
)

// captureFiles returns wire's testdata captures, failing on an empty match.
func captureFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "wire", "testdata", "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no captures in wire/testdata")
	}
	return files
}

// decodeJSON runs "softroce decode --json FILE" and returns the frames and
// the exit status.
func decodeJSON(t *testing.T, file string) ([]decodedFrame, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run([]string{"decode", "--json", file}, &out, &errb)
	var frames []decodedFrame
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d decodedFrame
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("%s: bad JSON line %q: %v", file, sc.Text(), err)
		}
		frames = append(frames, d)
	}
	return frames, code, errb.String()
}

// TestDecodeCaptures: every RoCE frame of every capture is reported with
// icrc=ok and exit status 0; ARP and TCP frames are listed as not RoCE.
func TestDecodeCaptures(t *testing.T) {
	for _, file := range captureFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			frames, code, stderr := decodeJSON(t, file)
			if code != 0 {
				t.Fatalf("exit status %d: %s", code, stderr)
			}
			roce := 0
			for i, d := range frames {
				if d.Index != i+1 {
					t.Fatalf("frame %d has index %d", i+1, d.Index)
				}
				if !d.RoCE {
					if d.Summary == "" {
						t.Fatalf("frame %d: non-RoCE frame without summary", d.Index)
					}
					continue
				}
				roce++
				if d.ICRC != "ok" || d.Opcode == nil || d.OpcodeName == "" || d.PSN == nil || d.PayloadLen == nil {
					t.Fatalf("frame %d: %+v", d.Index, d)
				}
			}
			if filepath.Base(file) != "ud_pingpong.pcap" && roce == 0 {
				t.Fatal("no RoCE frames")
			}
			// The text form has one line per frame, icrc=ok on RoCE lines.
			var out, errb bytes.Buffer
			if code := run([]string{"decode", file}, &out, &errb); code != 0 {
				t.Fatalf("text: exit status %d: %s", code, errb.String())
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if out.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(frames) {
				t.Fatalf("text has %d lines for %d frames", len(lines), len(frames))
			}
			for i, l := range lines {
				if frames[i].RoCE != strings.HasSuffix(l, " icrc=ok") {
					t.Fatalf("line %q", l)
				}
				// PSNs in hex, six digits, as the tools print them
				// ("PSN 0x%06x").
				if frames[i].RoCE && !strings.Contains(l, fmt.Sprintf(" psn=0x%06x ", *frames[i].PSN)) {
					t.Fatalf("line %q: want psn=0x%06x", l, *frames[i].PSN)
				}
			}
		})
	}
}

// TestDecodeFields checks the fields decode prints for known frames of the
// rping capture (UD MAD on QP1, RC READ request and response).
func TestDecodeFields(t *testing.T) {
	file := filepath.Join("..", "..", "wire", "testdata", "rping.pcap")
	frames, code, _ := decodeJSON(t, file)
	if code != 0 || len(frames) < 9 {
		t.Fatalf("exit %d, %d frames", code, len(frames))
	}
	if d := frames[0]; d.RoCE || !strings.HasPrefix(d.Summary, "ARP who-has 10.77.0.11 tell 10.77.0.12") {
		t.Errorf("frame 1: %+v", d)
	}
	d := frames[2]
	if d.OpcodeName != "UD_SEND_ONLY" || *d.DestQP != 1 || d.Headers["deth"]["qkey"] != 0x80010000 ||
		d.Headers["deth"]["src_qp"] != 1 || *d.PayloadLen != 256 || d.Src != "10.77.0.12" || d.Dst != "10.77.0.11" {
		t.Errorf("frame 3: %+v", d)
	}
	d = frames[7]
	if d.OpcodeName != "RC_RDMA_READ_REQUEST" || d.Headers["reth"]["dma_len"] != 64 || !d.AckReq || *d.PKey != 0xffff {
		t.Errorf("frame 8: %+v", d)
	}
	d = frames[8]
	if d.OpcodeName != "RC_RDMA_READ_RESPONSE_ONLY" || d.Headers["aeth"]["syndrome"] != 0x1f ||
		d.SyndromeName != "ACK(credits=unlimited)" || *d.PayloadLen != 64 {
		t.Errorf("frame 9: %+v", d)
	}
}

// writePcap writes frames to a new pcap file in t's temp dir.
func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// roceFramesOf reads a capture and returns its RoCE frames.
func roceFramesOf(t testing.TB, file string) [][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			return out
		}
		if _, err := wire.Parse(data); err == nil {
			out = append(out, data)
		}
	}
}

// TestDecodeBadICRC flips one payload bit of a captured frame: decode
// reports icrc=BAD for it and exits with status 1.
func TestDecodeBadICRC(t *testing.T) {
	frames := roceFramesOf(t, filepath.Join("..", "..", "wire", "testdata", "write_bw.pcap"))
	var bad []byte
	for _, fr := range frames {
		p, _ := wire.Parse(fr)
		if p.PayloadLen() > 0 {
			bad = bytes.Clone(fr)
			bad[p.PayloadOffset()+p.PayloadLen()/2] ^= 0x04
			break
		}
	}
	if bad == nil {
		t.Fatal("no frame with payload")
	}
	file := writePcap(t, [][]byte{frames[0], bad, frames[1]})
	var out, errb bytes.Buffer
	if code := run([]string{"decode", file}, &out, &errb); code != 1 {
		t.Fatalf("exit status %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "icrc=ok") || !strings.Contains(lines[1], "icrc=BAD") ||
		!strings.HasSuffix(lines[2], "icrc=ok") {
		t.Fatalf("output:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "1 of 3 RoCE frames") {
		t.Fatalf("stderr %q", errb.String())
	}
	// JSON reports the same.
	js, code, _ := decodeJSON(t, file)
	if code != 1 || js[1].ICRC != "BAD" || js[1].ICRCStored == js[1].ICRCComputed {
		t.Fatalf("JSON: exit %d, %+v", code, js[1])
	}
}

// TestDecodeMalformedRoCE: a UDP 4791 datagram that does not parse (an
// unknown opcode) is a RoCE failure (exit 1); non-RoCE garbage is not.
func TestDecodeMalformedRoCE(t *testing.T) {
	frames := roceFramesOf(t, filepath.Join("..", "..", "wire", "testdata", "rc_pingpong.pcap"))
	bad := bytes.Clone(frames[0])
	p, _ := wire.Parse(frames[0])
	bad[p.BTHOffset()] = 0x15
	file := writePcap(t, [][]byte{bad})
	js, code, _ := decodeJSON(t, file)
	if code != 1 || len(js) != 1 || !js[0].RoCE || !strings.Contains(js[0].Error, "unknown opcode") {
		t.Fatalf("exit %d: %+v", code, js)
	}
	file = writePcap(t, [][]byte{{1, 2, 3}, make([]byte, 60)})
	js, code, _ = decodeJSON(t, file)
	if code != 0 || len(js) != 2 || js[0].RoCE || js[1].RoCE {
		t.Fatalf("garbage: exit %d: %+v", code, js)
	}
}

func TestDecodeUsage(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want int
	}{
		{"no file", []string{"decode"}, 2},
		{"two files", []string{"decode", "a", "b"}, 2},
		{"bad flag", []string{"decode", "--nope", "a"}, 2},
		{"missing file", []string{"decode", filepath.Join(t.TempDir(), "none.pcap")}, 1},
		{"not a pcap", []string{"decode", "cmd_decode.go"}, 1},
		{"flag after file", []string{"decode", filepath.Join("..", "..", "wire", "testdata", "ud_pingpong.pcap"), "--json"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != tt.want {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.want, errb.String())
			}
		})
	}
}

// TestDecodeOtherFormats decodes the same RoCE frames from a pcapng file,
// a raw-IP pcap (LINKTYPE_RAW) and a Linux cooked capture (LINKTYPE_LINUX_SLL).
func TestDecodeOtherFormats(t *testing.T) {
	frames := roceFramesOf(t, filepath.Join("..", "..", "wire", "testdata", "rc_pingpong_ipv6.pcap"))[:10]
	dir := t.TempDir()
	ci := func(n int) gopacket.CaptureInfo {
		return gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: n, Length: n}
	}

	ng := filepath.Join(dir, "f.pcapng")
	f, err := os.Create(ng)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		c := ci(len(fr))
		c.InterfaceIndex = 0
		if err := w.WritePacket(c, fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	writeLinkType := func(name string, lt layers.LinkType, strip int, prefix func(fr []byte) []byte) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := pcapgo.NewWriter(f)
		if err := w.WriteFileHeader(65535, lt); err != nil {
			t.Fatal(err)
		}
		for _, fr := range frames {
			b := append(prefix(fr), fr[strip:]...)
			if err := w.WritePacket(ci(len(b)), b); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		return path
	}
	raw := writeLinkType("raw.pcap", linkTypeRaw, wire.EthernetSize, func([]byte) []byte { return nil })
	sll := writeLinkType("sll.pcap", linkTypeLinuxSLL, wire.EthernetSize, func(fr []byte) []byte {
		h := make([]byte, sllHeaderSize)
		h[1] = 4 // sent by us
		h[3] = 1 // ARPHRD_ETHER
		h[5] = 6
		copy(h[6:12], fr[6:12])
		h[14], h[15] = fr[12], fr[13] // protocol
		return h
	})
	for _, file := range []string{ng, raw, sll} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			js, code, stderr := decodeJSON(t, file)
			if code != 0 || len(js) != len(frames) {
				t.Fatalf("exit %d, %d frames: %s", code, len(js), stderr)
			}
			for _, d := range js {
				if !d.RoCE || d.ICRC != "ok" || d.Src != "fd77::12" && d.Src != "fd77::11" {
					t.Fatalf("%+v", d)
				}
			}
		})
	}
}
