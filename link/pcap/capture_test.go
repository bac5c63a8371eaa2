package pcap

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link"
)

type capturedFrame struct {
	at   time.Duration // since epoch
	data []byte
}

func readPcap(t *testing.T, r io.Reader) []capturedFrame {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatalf("pcapgo.NewReader: %v", err)
	}
	if pr.LinkType() != layers.LinkTypeEthernet || pr.Snaplen() != Snaplen {
		t.Errorf("pcap header: link type %v, snaplen %d; want Ethernet, %d", pr.LinkType(), pr.Snaplen(), Snaplen)
	}
	var out []capturedFrame
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("record %d: %v", len(out), err)
		}
		if ci.CaptureLength != len(data) || ci.Length != len(data) {
			t.Errorf("record %d: caplen %d, len %d, data %d", len(out), ci.CaptureLength, ci.Length, len(data))
		}
		out = append(out, capturedFrame{ci.Timestamp.Sub(epoch), data})
	}
}

func TestCaptureBothDirections(t *testing.T) {
	a, b := link.Pipe()
	clk := clock.NewManual(epoch)
	var pcap bytes.Buffer
	c, err := New(a, &pcap, clk)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bufs, sizes := testutil.ReadBufs(4, 2000)

	out := [][]byte{testutil.Frame(64, 1), testutil.Frame(1514, 2)}
	if _, err := c.WritePackets(out); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1500 * time.Microsecond)
	in := testutil.Frame(100, 3)
	b.WritePackets([][]byte{in})
	if n, err := c.ReadPackets(bufs, sizes); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	clk.Advance(time.Second)
	// A refused frame is not recorded.
	if n, err := c.WritePackets([][]byte{testutil.Frame(64, 4), testutil.Frame(1515, 5)}); n != 1 || err == nil {
		t.Fatalf("WritePackets = %d, %v; want 1 and an error", n, err)
	}

	want := []capturedFrame{{0, out[0]}, {0, out[1]}, {1500 * time.Microsecond, in}, {1001500 * time.Microsecond, testutil.Frame(64, 4)}}
	got := readPcap(t, &pcap)
	if len(got) != len(want) || c.Frames() != uint64(len(want)) {
		t.Fatalf("%d records (Frames() %d), want %d", len(got), c.Frames(), len(want))
	}
	for i := range want {
		if got[i].at != want[i].at || !bytes.Equal(got[i].data, want[i].data) {
			t.Errorf("record %d: at %v, %d bytes; want at %v, %d bytes", i, got[i].at, len(got[i].data), want[i].at, len(want[i].data))
		}
	}
	if c.Err() != nil {
		t.Errorf("Err() = %v", c.Err())
	}
}

// TestCaptureConcurrent writes and reads from several goroutines; every
// frame is recorded once and the file stays well-formed.
func TestCaptureConcurrent(t *testing.T) {
	a, b := link.Pipe()
	var pcap bytes.Buffer
	ca, err := New(a, &pcap, nil)
	if err != nil {
		t.Fatal(err)
	}
	const per = 200
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range per {
				ca.WritePackets([][]byte{testutil.Frame(60+i%100, uint32(w<<16|i))})
			}
		})
		wg.Go(func() {
			for i := range per {
				b.WritePackets([][]byte{testutil.Frame(60+i%100, uint32(1<<20|w<<16|i))})
			}
		})
	}
	var rg sync.WaitGroup
	rg.Go(func() { // drain a→b
		bufs, sizes := testutil.ReadBufs(8, 2000)
		for got := 0; got < 2*per; {
			n, err := b.ReadPackets(bufs, sizes)
			if err != nil {
				return
			}
			got += n
		}
	})
	rg.Go(func() { // read b→a through the capture
		bufs, sizes := testutil.ReadBufs(8, 2000)
		for got := 0; got < 2*per; {
			n, err := ca.ReadPackets(bufs, sizes)
			if err != nil {
				return
			}
			got += n
		}
	})
	wg.Wait()
	rg.Wait()
	ca.Close()
	b.Close()
	if got := readPcap(t, &pcap); len(got) != 4*per {
		t.Errorf("%d records, want %d", len(got), 4*per)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after < len(p) {
		return 0, errors.New("disk full")
	}
	w.after -= len(p)
	return len(p), nil
}

func TestCaptureWriteError(t *testing.T) {
	if _, err := New(&recorder{}, &failingWriter{}, nil); err == nil {
		t.Error("NewCapture on a failing writer: no error")
	}
	rec := &recorder{}
	c, err := New(rec, &failingWriter{after: 24 + 16 + 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if n, err := c.WritePackets([][]byte{testutil.Frame(64, uint32(i))}); n != 1 || err != nil {
			t.Fatalf("link write failed with the capture: %d, %v", n, err)
		}
	}
	if c.Err() == nil || c.Frames() != 1 || len(rec.frames) != 3 {
		t.Errorf("Err() = %v, Frames() = %d, link got %d; want an error, 1, 3", c.Err(), c.Frames(), len(rec.frames))
	}
}

// TestCaptureTshark checks that Wireshark's reader accepts the file.
func TestCaptureTshark(t *testing.T) {
	tshark := testutil.Tshark(t)
	path := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := link.Pipe()
	c, err := New(a, f, clock.NewManual(epoch))
	if err != nil {
		t.Fatal(err)
	}
	c.WritePackets([][]byte{testutil.Frame(64, 1), testutil.Frame(1514, 2), vlanFrame(1518)})
	b.WritePackets([][]byte{testutil.Frame(200, 3)})
	bufs, sizes := testutil.ReadBufs(1, 2000)
	c.ReadPackets(bufs, sizes)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.len")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark -r: %v\n%s", err, stderr.Bytes())
	}
	for _, line := range bytes.Split(bytes.TrimSpace(stderr.Bytes()), []byte("\n")) {
		if len(line) > 0 && !bytes.Contains(line, []byte("could be dangerous")) {
			t.Errorf("tshark complained: %s", line)
		}
	}
	if got, want := string(bytes.TrimSpace(out)), "64\n1514\n1518\n200"; got != want {
		t.Errorf("tshark frame lengths:\n%s\nwant\n%s", got, want)
	}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// vlanFrame returns an n-byte 802.1Q-typed frame.
func vlanFrame(n int) []byte {
	f := testutil.Frame(n, 0)
	f[12], f[13] = 0x81, 0x00
	return f
}

// recorder is a link.Link that keeps copies of the frames written to it.
type recorder struct {
	mu     sync.Mutex
	frames [][]byte
}

func (r *recorder) ReadPackets([][]byte, []int) (int, error) {
	return 0, &net.OpError{Op: "read", Err: net.ErrClosed}
}
func (r *recorder) WritePackets(bufs [][]byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bufs {
		r.frames = append(r.frames, bytes.Clone(b))
	}
	return len(bufs), nil
}
func (r *recorder) BatchSize() int { return 8 }
func (r *recorder) MTU() int       { return 1500 }
func (r *recorder) Close() error   { return nil }
