package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testutil"
)

// pcapngOf returns frames as a pcapng stream (gopacket's writer: a section
// header, one Ethernet interface, one enhanced packet block per frame,
// little-endian), the frames 1 ms apart from ts.
func pcapngOf(t testing.TB, frames [][]byte, ts time.Time) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriter(&b, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readAll reads every packet of a capture stream.
func readAll(b []byte) ([][]byte, []gopacket.CaptureInfo, error) {
	src, err := openCapture(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var out [][]byte
	var cis []gopacket.CaptureInfo
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out, cis, nil
		}
		if err != nil {
			return out, cis, err
		}
		out = append(out, data)
		cis = append(cis, ci)
	}
}

// blockEnds returns the offsets at which the little-endian pcapng stream b
// has a block boundary.
func blockEnds(b []byte) map[int]bool {
	ends := map[int]bool{0: true}
	for off := 0; off+8 <= len(b); {
		off += int(binary.LittleEndian.Uint32(b[off+4:]))
		ends[off] = true
	}
	return ends
}

func testFrames(t *testing.T) [][]byte {
	return roceFramesOf(t, testutil.Capture(t, "rc_pingpong.pcap"))[:12]
}

// TestPcapngRoundTrip: the pcapng reader returns what gopacket's writer
// wrote, frames and timestamps.
func TestPcapngRoundTrip(t *testing.T) {
	frames := testFrames(t)
	ts := time.Unix(1700000000, 123456000).UTC()
	got, cis, err := readAll(pcapngOf(t, frames, ts))
	if err != nil || len(got) != len(frames) {
		t.Fatalf("%d frames, %v; want %d", len(got), err, len(frames))
	}
	for i := range got {
		want := ts.Add(time.Duration(i) * time.Millisecond)
		if !bytes.Equal(got[i], frames[i]) || !cis[i].Timestamp.Equal(want) || cis[i].Length != len(frames[i]) {
			t.Fatalf("frame %d: %d bytes at %v, want %d at %v", i, len(got[i]), cis[i].Timestamp, len(frames[i]), want)
		}
	}
}

// TestPcapngTruncatedIsAnError cuts a pcapng file at every byte: a cut
// inside a block (as `head -c 3000` makes) is an error, never a short
// decode with exit 0; a cut between blocks is a shorter valid file.
func TestPcapngTruncatedIsAnError(t *testing.T) {
	b := pcapngOf(t, testFrames(t), time.Unix(1700000000, 0))
	ends := blockEnds(b)
	if len(b) <= 3000 || ends[3000] {
		t.Fatalf("want a file of more than 3000 bytes with no block ending at 3000 (%d bytes)", len(b))
	}
	for n := 1; n < len(b); n++ {
		_, _, err := readAll(b[:n])
		if ends[n] != (err == nil) {
			t.Fatalf("cut at %d (block boundary %v): error %v", n, ends[n], err)
		}
		if n >= 4 && err != nil && !errors.Is(err, io.ErrUnexpectedEOF) { // shorter: no magic number
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
	// The command: exit 1 and the reason on stderr.
	path := filepath.Join(t.TempDir(), "head.pcapng")
	if err := os.WriteFile(path, b[:3000], 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"decode", path}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "unexpected EOF") {
		t.Fatalf("decode of 3000 bytes: exit %d, stderr %q", code, errb.String())
	}
}

// TestPcapngMalformedBlocks: a block whose lengths lie is an error with a
// reason, never a huge allocation or a silent stop.
func TestPcapngMalformedBlocks(t *testing.T) {
	good := pcapngOf(t, testFrames(t), time.Unix(1700000000, 0))
	shb := int(binary.LittleEndian.Uint32(good[4:]))
	idb := int(binary.LittleEndian.Uint32(good[shb+4:]))
	epb := shb + idb // the first enhanced packet block
	epbLen := int(binary.LittleEndian.Uint32(good[epb+4:]))
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	put := binary.LittleEndian.PutUint32
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"block claims 0x7fffff00 bytes", mutate(func(b []byte) { put(b[epb+4:], 0x7fffff00) }), "over the limit"},
		{"block claims 16 MiB, file ends", mutate(func(b []byte) { put(b[epb+4:], 16<<20) }), "unexpected EOF"},
		{"caplen larger than its block", mutate(func(b []byte) { put(b[epb+8+12:], uint32(epbLen)) }), "exceeds its block"},
		{"caplen 0x7fffff00", mutate(func(b []byte) { put(b[epb+8+12:], 0x7fffff00) }), "exceeds its block"},
		{"length not a multiple of 4", mutate(func(b []byte) { put(b[epb+4:], uint32(epbLen+1)) }), "bad length"},
		{"length below a header", mutate(func(b []byte) { put(b[epb+4:], 8) }), "bad length"},
		{"trailing length differs", mutate(func(b []byte) { put(b[epb+epbLen-4:], uint32(epbLen+4)) }), "at its end"},
		{"unknown interface", mutate(func(b []byte) { put(b[epb+8:], 1) }), "interface 1"},
		{"bad byte-order magic", mutate(func(b []byte) { put(b[8:], 0x12345678) }), "byte-order"},
		{"section version 2", mutate(func(b []byte) { binary.LittleEndian.PutUint16(b[12:], 2) }), "version"},
		{"option overruns the interface block", mutate(func(b []byte) {
			// The interface block's first option claims more than the block holds.
			binary.LittleEndian.PutUint16(b[shb+16+2:], 0xfff0)
		}), "overruns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, _, err = readAll(tc.b) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if n > 1<<20 {
				t.Fatalf("allocated %d bytes reading %d", n, len(tc.b))
			}
			path := filepath.Join(t.TempDir(), "bad.pcapng")
			if err := os.WriteFile(path, tc.b, 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := run([]string{"decode", path}, &out, &errb); code != 1 || errb.Len() == 0 {
				t.Fatalf("decode: exit %d, stderr %q", code, errb.String())
			}
		})
	}
}

// TestPcapMalformedRecords: a classic pcap record header with no data
// after it, or a captured length beyond any snap length, is an error.
func TestPcapMalformedRecords(t *testing.T) {
	raw, err := os.ReadFile(writePcap(t, testFrames(t)))
	if err != nil {
		t.Fatal(err)
	}
	huge := bytes.Clone(raw)
	binary.LittleEndian.PutUint32(huge[16:], 0xffffffff) // snap length
	binary.LittleEndian.PutUint32(huge[24+8:], 0x7fffff00)
	binary.LittleEndian.PutUint32(huge[24+12:], 0x7fffff00)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"record header only", raw[:24+16]},
		{"captured length 0x7fffff00", huge},
	} {
		var err error
		n := allocated(func() { _, _, err = readAll(tc.b) })
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: error %v", tc.name, err)
		}
		if n > 1<<20 {
			t.Errorf("%s: allocated %d bytes", tc.name, n)
		}
	}
}

// FuzzReadCapture reads arbitrary bytes as a pcap or pcapng capture: no
// panic, a bounded number of packets, and no packet longer than the input
// or unequal to its captured length.
func FuzzReadCapture(f *testing.F) {
	for _, file := range testutil.Captures(f, "*.pcap") {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 4096)])
	}
	fr := roceFramesOf(f, testutil.Capture(f, "rc_pingpong.pcap"))
	f.Add(pcapngOf(f, fr[:min(4, len(fr))], time.Unix(1700000000, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		src, err := openCapture(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; ; i++ {
			if i > len(b)/8+1 {
				t.Fatalf("%d packets from %d bytes", i, len(b))
			}
			data, ci, err := src.ReadPacketData()
			if err != nil {
				return
			}
			if len(data) > len(b) || len(data) != ci.CaptureLength {
				t.Fatalf("packet of %d bytes (caplen %d) from %d bytes", len(data), ci.CaptureLength, len(b))
			}
			decodeFrame(data, src.LinkType())
		}
	})
}
