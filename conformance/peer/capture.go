package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/wire"
)

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
	// BadICRC describes each frame that wire.Parse refuses (other than a
	// well-formed frame that is not RoCEv2) and each RoCEv2 frame whose
	// ICRC is wrong.
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

// CheckCapture reads the pcap at path and checks every RoCEv2 frame in it
// (IPv4 and IPv6) with the wire package: wire.Parse must accept it and
// Packet.VerifyICRC must find its ICRC good. Frames that are not RoCEv2
// (ARP, ND, TCP of the out-of-band exchange) are counted and skipped. It
// returns an error only when the file cannot be read; bad frames are
// listed in the report.
func CheckCapture(path string) (*CaptureReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("check capture: %w", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("check capture %s: %w", path, err)
	}
	if lt := r.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("check capture %s: link type %v, want Ethernet", path, lt)
	}
	rep := &CaptureReport{Opcodes: make(map[uint8]int)}
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, fmt.Errorf("check capture %s: frame %d: %w", path, rep.Frames+1, err)
		}
		rep.Frames++
		if ci.CaptureLength != ci.Length {
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: truncated to %d of %d bytes", rep.Frames, ci.CaptureLength, ci.Length))
			continue
		}
		pkt, err := wire.Parse(data)
		if err != nil {
			// Well-formed frames that are not RoCEv2 are not this
			// check's business, nor IP packets with options or
			// extension headers (IGMP, MLD), which rxe drops too. Any
			// other failure (a length that does not fit, a bad field)
			// is a broken frame on the bridge.
			var pe *wire.ParseError
			if errors.Is(err, wire.ErrNotRoCE) || errors.Is(err, wire.ErrUnsupported) && errors.As(err, &pe) && pe.Layer < wire.LayerUDP {
				continue
			}
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: %v", rep.Frames, err))
			continue
		}
		rep.RoCE++
		if pkt.IsIPv6() {
			rep.RoCEv6++
		}
		op := uint8(pkt.BTH().Opcode())
		rep.Opcodes[op]++
		if err := pkt.VerifyICRC(); err != nil {
			rep.BadICRC = append(rep.BadICRC, fmt.Sprintf("frame %d: opcode 0x%02x ICRC %08x, computed %08x: %v", rep.Frames, op, pkt.ICRC(), pkt.ComputeICRC(), err))
		}
	}
	return rep, nil
}

// TsharkCheck decodes the pcap at path with tshark and returns the
// numbers of the frames it flags as malformed (_ws.malformed) and of the
// frames it decodes as InfiniBand (RoCEv2 BTH). Needs tshark
// (apt-get install tshark). tshark's RPC-over-RDMA dissector is disabled:
// its heuristic claims every RC SEND and throws on payloads too short for
// its header (perftest -R's 4-byte handshake SENDs, from rxe as from
// softroce), which are not NFS traffic.
func TsharkCheck(ctx context.Context, path string) (malformed []string, infiniband int, err error) {
	fields := func(filter string) ([]string, error) {
		out, err := exec.CommandContext(ctx, "tshark", "-n", "--disable-protocol", "rpcordma", "-r", path, "-Y", filter, "-T", "fields", "-e", "frame.number").Output()
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
