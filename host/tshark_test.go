package host

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link/pcap"
)

// TestFramesDecodeInTshark captures every kind of frame the Host sends
// and checks Wireshark's dissectors find each well-formed, with valid
// checksums.
func TestFramesDecodeInTshark(t *testing.T) {
	tshark := testutil.Tshark(t)
	path := filepath.Join(t.TempDir(), "host.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil)
	c, err := pcap.New(r.hostEnd, f, r.clk)
	if err != nil {
		t.Fatal(err)
	}
	r.h.l = c // everything the Host sends goes through the capture
	zero := []byte{0, 0, 0, 0, 0, 0}
	r.h.Input(arpFrame(t, layers.ARPRequest, broadcastMAC, peerMAC, peerIP4, hostIP4, zero))
	r.h.Input(nsFrame(t, peerIP6, solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, true))
	r.h.Input(echo4Frame(t, hostMAC, hostIP4, []byte("abcdefgh")))
	r.h.Input(echo6Frame(t, hostMAC, hostIP6, []byte("abcdefghi")))
	r.h.Input(udpFrame(t, hostMAC, peerIP4, hostIP4, 9, []byte("closed")))
	r.h.Input(udpFrame(t, hostMAC, peerIP6, hostIP6, 9, []byte("closed")))
	r.h.Input(tcpFrame(t, peerIP6, hostIP6, &layers.TCP{SrcPort: 40000, DstPort: 22, SYN: true, Seq: 1, Window: 1000}, nil))
	r.h.Announce()
	for _, ip := range []string{"10.77.0.77", "fd77::77"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		r.h.Resolve(ctx, netip.MustParseAddr(ip))
		cancel()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	const frames = 4 + 3 + 1 + 3 + 2 // answers, unreachables and a reset, an MLD report, announcements of 3 addresses, solicitations
	if c.Frames() != frames {
		t.Fatalf("captured %d frames, want %d", c.Frames(), frames)
	}
	// ICMP and ICMPv6 checksums are always checked; IPv4's on request.
	var stderr bytes.Buffer
	cmd := exec.Command(tshark, "-r", path, "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		"-T", "fields", "-e", "frame.protocols", "-e", "_ws.malformed", "-e", "_ws.expert.severity",
		"-e", "ip.checksum.status", "-e", "icmp.checksum.status", "-e", "icmpv6.checksum.status", "-e", "tcp.checksum.status")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n") // keep the last line's empty fields
	if len(lines) != frames {
		t.Fatalf("tshark printed %d lines, want %d:\n%s", len(lines), frames, out)
	}
	var protos []string
	for i, line := range lines {
		fields := strings.Split(line, "\t")
		if len(fields) != 7 {
			t.Fatalf("frame %d: tshark printed %q", i+1, line)
		}
		protos = append(protos, fields[0])
		if fields[1] != "" {
			t.Errorf("frame %d: tshark marks it malformed: %q", i+1, line)
		}
		for _, sev := range strings.Split(fields[2], ",") {
			// PI_WARN (0x600000) and up: bad checksums, malformed fields.
			// A reset is one by design ("Connection reset (RST)").
			if v, err := strconv.ParseUint(sev, 0, 32); err == nil && v >= 0x600000 && !strings.HasSuffix(fields[0], ":tcp") {
				t.Errorf("frame %d: tshark warns: %q", i+1, line)
			}
		}
		for _, status := range strings.Split(strings.Join(fields[3:], ","), ",") {
			if status != "" && status != "1" { // 1: checksum good
				t.Errorf("frame %d: a checksum does not verify: %q", i+1, line)
			}
		}
	}
	for _, want := range []string{"eth:ethertype:arp", "eth:ethertype:ipv6:icmpv6", "eth:ethertype:ip:icmp:data"} {
		if !strings.Contains(strings.Join(protos, "\n"), want) {
			t.Errorf("no frame dissected as %s in:\n%s", want, strings.Join(protos, "\n"))
		}
	}
}
