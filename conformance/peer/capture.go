package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// RoCEv2Port is the UDP destination port of RoCEv2 (IANA "roce").
const RoCEv2Port = 4791

// CaptureReport summarizes a pcap of a lab run.
type CaptureReport struct {
	// Frames is the number of frames in the capture.
	Frames int
	// RoCE is the number of RoCEv2 frames (UDP to port 4791).
	RoCE int
	// RoCEv6 is how many of them are carried over IPv6.
	RoCEv6 int
	// Opcodes counts RoCEv2 frames by BTH opcode.
	Opcodes map[uint8]int
	// BadICRC describes each RoCEv2 frame whose ICRC is wrong or which is
	// too short to hold a BTH and an ICRC.
	BadICRC []string
}

// OpcodeSummary lists the opcodes seen, in order, as "0x04×12 0x11×12".
func (r *CaptureReport) OpcodeSummary() string {
	ops := make([]int, 0, len(r.Opcodes))
	for op := range r.Opcodes {
		ops = append(ops, int(op))
	}
	sort.Ints(ops)
	var b strings.Builder
	for i, op := range ops {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "0x%02x×%d", op, r.Opcodes[uint8(op)])
	}
	return b.String()
}

// CheckCapture reads the pcap at path and checks the ICRC of every
// RoCEv2 frame in it (IPv4 and IPv6). It returns an error only when the
// file cannot be read; bad frames are listed in the report.
//
// This is a small self-contained check for the harness; the wire
// package's VerifyICRC is the project's implementation.
func CheckCapture(path string) (*CaptureReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("check capture: %w", err)
	}
	defer f.Close()
	r, err := newPcapReader(f)
	if err != nil {
		return nil, fmt.Errorf("check capture %s: %w", path, err)
	}
	rep := &CaptureReport{Opcodes: make(map[uint8]int)}
	for {
		data, origLen, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("check capture %s: frame %d: %w", path, rep.Frames+1, err)
		}
		rep.Frames++
		if len(data) != origLen {
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: truncated to %d of %d bytes", rep.Frames, len(data), origLen))
			continue
		}
		l3, udp, ok := roceOffsets(data)
		if !ok {
			continue
		}
		rep.RoCE++
		if data[l3]>>4 == 6 {
			rep.RoCEv6++
		}
		bth := udp + 8
		if len(data) < bth+12+4 {
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: %d bytes, too short for BTH and ICRC", rep.Frames, len(data)))
			continue
		}
		rep.Opcodes[data[bth]]++
		want := binary.LittleEndian.Uint32(data[len(data)-4:])
		if got := roceICRC(data[l3:len(data)-4], udp-l3); got != want {
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: opcode 0x%02x ICRC %08x, computed %08x", rep.Frames, data[bth], want, got))
		}
	}
	return rep, nil
}

// roceOffsets returns the offsets of the IP and UDP headers of a RoCEv2
// frame (Ethernet, IPv4 without options or IPv6, UDP to 4791).
func roceOffsets(frame []byte) (l3, udp int, ok bool) {
	if len(frame) < 14 {
		return 0, 0, false
	}
	l3 = 14
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		if len(frame) < l3+20+8 || frame[l3]>>4 != 4 || frame[l3+9] != 17 {
			return 0, 0, false
		}
		udp = l3 + int(frame[l3]&0x0f)*4
	case 0x86dd:
		if len(frame) < l3+40+8 || frame[l3+6] != 17 {
			return 0, 0, false
		}
		udp = l3 + 40
	default:
		return 0, 0, false
	}
	if len(frame) < udp+8 || binary.BigEndian.Uint16(frame[udp+2:]) != RoCEv2Port {
		return 0, 0, false
	}
	return l3, udp, true
}

// roceICRC computes the RoCEv2 invariant CRC of pkt (the IP packet
// without its 4 ICRC bytes; udpOff is the UDP header's offset in it): a
// CRC-32 over 8 bytes of 0xff, then the packet with the variant fields
// (IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop limit; UDP
// checksum; the BTH byte holding FECN/BECN) set to all ones. Mirrors
// rxe_icrc_hdr/rxe_icrc_check (drivers/infiniband/sw/rxe/rxe_icrc.c).
func roceICRC(pkt []byte, udpOff int) uint32 {
	hdr := bytes.Clone(pkt[:udpOff+8+12])
	if hdr[0]>>4 == 4 {
		hdr[1] = 0xff                 // TOS
		hdr[8] = 0xff                 // TTL
		hdr[10], hdr[11] = 0xff, 0xff // header checksum
	} else {
		hdr[0] |= 0x0f // traffic class, flow label
		hdr[1], hdr[2], hdr[3] = 0xff, 0xff, 0xff
		hdr[7] = 0xff // hop limit
	}
	hdr[udpOff+6], hdr[udpOff+7] = 0xff, 0xff // UDP checksum
	hdr[udpOff+8+4] = 0xff                    // BTH FECN, BECN, resv6
	crc := crc32.Update(0, crc32.IEEETable, bytes.Repeat([]byte{0xff}, 8))
	crc = crc32.Update(crc, crc32.IEEETable, hdr)
	return crc32.Update(crc, crc32.IEEETable, pkt[len(hdr):])
}

// TsharkCheck decodes the pcap at path with tshark and returns the
// numbers of the frames it flags as malformed (_ws.malformed) and of the
// frames it decodes as InfiniBand (RoCEv2 BTH). Needs tshark
// (apt-get install tshark).
func TsharkCheck(ctx context.Context, path string) (malformed []string, infiniband int, err error) {
	fields := func(filter string) ([]string, error) {
		out, err := exec.CommandContext(ctx, "tshark", "-n", "-r", path, "-Y", filter, "-T", "fields", "-e", "frame.number").Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return nil, fmt.Errorf("tshark -r %s -Y %s: %w: %s", path, filter, err, ee.Stderr)
			}
			return nil, fmt.Errorf("tshark: %w", err)
		}
		return strings.Fields(string(out)), nil
	}
	if malformed, err = fields("_ws.malformed"); err != nil {
		return nil, 0, err
	}
	ib, err := fields("infiniband")
	return malformed, len(ib), err
}

// pcapReader reads classic pcap files of LINKTYPE_ETHERNET (what tcpdump
// -w writes): a 24-byte file header, then per frame a 16-byte record
// header (seconds, microseconds or nanoseconds, captured length, original
// length) and the captured bytes. Either byte order.
type pcapReader struct {
	r     io.Reader
	order binary.ByteOrder
	snap  uint32
	hdr   [16]byte
}

func newPcapReader(r io.Reader) (*pcapReader, error) {
	var h [24]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("pcap file header: %w", unexpected(err))
	}
	p := &pcapReader{r: r}
	switch binary.LittleEndian.Uint32(h[:]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		p.order = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		p.order = binary.BigEndian
	default:
		return nil, fmt.Errorf("not a pcap file (magic % x)", h[:4])
	}
	p.snap = p.order.Uint32(h[16:])
	if lt := p.order.Uint32(h[20:]) & 0x0fffffff; lt != 1 {
		return nil, fmt.Errorf("pcap link type %d, want 1 (Ethernet)", lt)
	}
	return p, nil
}

// next returns the next frame's captured bytes and original length.
func (p *pcapReader) next() ([]byte, int, error) {
	if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, io.EOF
		}
		return nil, 0, fmt.Errorf("pcap record header: %w", unexpected(err))
	}
	capLen, origLen := p.order.Uint32(p.hdr[8:]), p.order.Uint32(p.hdr[12:])
	if capLen > 1<<18 || capLen > origLen {
		return nil, 0, fmt.Errorf("pcap record: captured length %d, original %d", capLen, origLen)
	}
	b := make([]byte, capLen)
	if _, err := io.ReadFull(p.r, b); err != nil {
		return nil, 0, fmt.Errorf("pcap record data: %w", unexpected(err))
	}
	return b, int(origLen), nil
}
