package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/wire"
)

func init() {
	register(command{
		name:     "decode",
		summary:  "decode the RoCEv2 frames of a pcap or pcapng capture, checking every ICRC",
		operands: "FILE.pcap",
		run:      runDecode,
	})
}

// decodedFrame is one frame of "softroce decode", as printed with --json.
// RoCE fields are present only for RoCE frames; Summary describes the
// others (ARP, TCP, ...).
type decodedFrame struct {
	Index   int       `json:"index"`
	Time    time.Time `json:"time"`
	RelTime float64   `json:"rel_time"`
	Len     int       `json:"len"`
	RoCE    bool      `json:"roce"`
	Summary string    `json:"summary,omitempty"`
	Error   string    `json:"error,omitempty"`

	Src        string `json:"src,omitempty"`
	Dst        string `json:"dst,omitempty"`
	SrcPort    uint16 `json:"sport,omitempty"`
	VLAN       *int   `json:"vlan,omitempty"`
	Opcode     *int   `json:"opcode,omitempty"`
	OpcodeName string `json:"opcode_name,omitempty"`
	DestQP     *int   `json:"dest_qp,omitempty"`
	PSN        *int   `json:"psn,omitempty"`
	AckReq     bool   `json:"ackreq"`
	SE         bool   `json:"se"`
	MigReq     bool   `json:"migreq"`
	PKey       *int   `json:"pkey,omitempty"`
	FECN       bool   `json:"fecn,omitempty"`
	BECN       bool   `json:"becn,omitempty"`
	TVer       int    `json:"tver,omitempty"`

	// The extended headers, each as an object of its fields (JSON).
	Headers map[string]map[string]uint64 `json:"headers,omitempty"`
	// AETH syndrome as rxe names it ("ACK(credits=unlimited)", ...).
	SyndromeName string `json:"syndrome_name,omitempty"`

	// The typed headers behind Headers, for the text output.
	rdeth        *wire.RDETHFields
	deth         *wire.DETHFields
	xrceth       *wire.XRCETHFields
	feth         *wire.FETHFields
	reth         *wire.RETHFields
	atomicETH    *wire.AtomicETHFields
	aeth         *wire.AETHFields
	atomicAckETH *wire.AtomicAckETHFields
	imm          *uint32
	ieth         *wire.IETHFields

	PayloadLen   *int   `json:"payload_len,omitempty"`
	Pad          *int   `json:"pad,omitempty"`
	ICRC         string `json:"icrc,omitempty"` // "ok" or "BAD"
	ICRCStored   string `json:"icrc_stored,omitempty"`
	ICRCComputed string `json:"icrc_computed,omitempty"`

	bad bool // a RoCE frame that failed to parse or has a bad ICRC
}

func intp(v int) *int { return &v }

func runDecode(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "decode")
	asJSON := fs.Bool("json", false, "print one JSON object per frame")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return errUsage
	}
	f, err := os.Open(files[0])
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := openCapture(f)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}

	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	var first time.Time
	roce, bad := 0, 0
	for i := 1; ; i++ {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: frame %d: %w", files[0], i, err)
		}
		if i == 1 {
			first = ci.Timestamp
		}
		d := decodeFrame(data, src.LinkType())
		d.Index, d.Time, d.RelTime = i, ci.Timestamp.UTC(), ci.Timestamp.Sub(first).Seconds()
		if ci.CaptureLength < ci.Length && d.Error == "" && !d.RoCE {
			d.Summary += " (capture truncated)"
		}
		if d.RoCE {
			roce++
		}
		if d.bad {
			bad++
		}
		if *asJSON {
			if err := enc.Encode(d); err != nil {
				return err
			}
		} else {
			writeText(w, d)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "softroce decode: %s: %d of %d RoCE frames failed to parse or have a bad ICRC\n", files[0], bad, roce)
		return &exitError{1}
	}
	return nil
}

// Link types that carry IP directly (LINKTYPE_RAW, _IPV4, _IPV6) and
// Linux cooked capture (LINKTYPE_LINUX_SLL).
const (
	linkTypeRaw      = 101
	linkTypeIPv4     = 228
	linkTypeIPv6     = 229
	linkTypeLinuxSLL = 113
	sllHeaderSize    = 16
)

// decodeFrame decodes one captured frame.
func decodeFrame(data []byte, lt layers.LinkType) *decodedFrame {
	d := &decodedFrame{Len: len(data)}
	var p wire.Packet
	var err error
	first := gopacket.LayerType(layers.LayerTypeEthernet)
	switch lt {
	case layers.LinkTypeEthernet:
		err = p.Decode(data)
	case linkTypeRaw, linkTypeIPv4, linkTypeIPv6:
		err = p.DecodeIP(data)
		first = layers.LayerTypeIPv4
		if len(data) > 0 && data[0]>>4 == 6 {
			first = layers.LayerTypeIPv6
		}
	case linkTypeLinuxSLL:
		first = layers.LayerTypeLinuxSLL
		if len(data) < sllHeaderSize {
			err = wire.ErrNotRoCE
			break
		}
		if proto := binary.BigEndian.Uint16(data[14:]); proto != wire.EtherTypeIPv4 && proto != wire.EtherTypeIPv6 {
			err = wire.ErrNotRoCE
			break
		}
		err = p.DecodeIP(data[sllHeaderSize:])
	default:
		d.Summary = "link type " + lt.String() + " not decoded"
		return d
	}
	if err == nil {
		fillRoCE(d, &p)
		return d
	}
	pkt := gopacket.NewPacket(data, first, gopacket.Default)
	if !errors.Is(err, wire.ErrNotRoCE) && looksRoCE(pkt) {
		// Addressed to UDP 4791 but not a RoCE packet we can parse.
		d.RoCE, d.bad, d.Error = true, true, err.Error()
		return d
	}
	d.Summary = summarize(pkt)
	if !errors.Is(err, wire.ErrNotRoCE) {
		d.Summary += " (" + err.Error() + ")"
	}
	return d
}

// looksRoCE reports whether gopacket sees a UDP datagram to port 4791.
func looksRoCE(pkt gopacket.Packet) bool {
	if u, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
		return u.DstPort == ib.RoCEv2UDPPort
	}
	return false
}

func fillRoCE(d *decodedFrame, p *wire.Packet) {
	d.RoCE = true
	d.Src, d.Dst, d.SrcPort = p.Src().String(), p.Dst().String(), p.UDPSrcPort()
	if p.HasVLAN() {
		d.VLAN = intp(int(p.VLANTCI() & 0x0fff))
	}
	b := p.BTH()
	d.Opcode, d.OpcodeName = intp(int(b.Opcode())), b.Opcode().String()
	d.DestQP, d.PSN, d.PKey = intp(int(b.DestQP())), intp(int(b.PSN())), intp(int(b.PKey()))
	d.AckReq, d.SE, d.MigReq, d.FECN, d.BECN, d.TVer = b.AckReq(), b.SE(), b.MigReq(), b.FECN(), b.BECN(), int(b.TVer())
	hd := map[string]map[string]uint64{}
	if h := p.RDETH(); h != nil {
		v := h.Fields()
		d.rdeth, hd["rdeth"] = &v, map[string]uint64{"eec": uint64(v.EEC)}
	}
	if h := p.DETH(); h != nil {
		v := h.Fields()
		d.deth, hd["deth"] = &v, map[string]uint64{"qkey": uint64(v.QKey), "src_qp": uint64(v.SrcQP)}
	}
	if h := p.XRCETH(); h != nil {
		v := h.Fields()
		d.xrceth, hd["xrceth"] = &v, map[string]uint64{"srq": uint64(v.SRQ)}
	}
	if h := p.FETH(); h != nil {
		v := h.Fields()
		d.feth, hd["feth"] = &v, map[string]uint64{"selectivity": uint64(v.Selectivity), "placement": uint64(v.Placement)}
	}
	if h := p.RETH(); h != nil {
		v := h.Fields()
		d.reth, hd["reth"] = &v, map[string]uint64{"va": v.VA, "rkey": uint64(v.RKey), "dma_len": uint64(v.DMALen)}
	}
	if h := p.AtomicETH(); h != nil {
		v := h.Fields()
		d.atomicETH, hd["atomic_eth"] = &v, map[string]uint64{"va": v.VA, "rkey": uint64(v.RKey), "swap_add": v.SwapAdd, "compare": v.Compare}
	}
	if h := p.AETH(); h != nil {
		v := h.Fields()
		d.aeth, hd["aeth"] = &v, map[string]uint64{"syndrome": uint64(v.Syndrome), "msn": uint64(v.MSN)}
		d.SyndromeName = v.Syndrome.String()
	}
	if h := p.AtomicAckETH(); h != nil {
		v := h.Fields()
		d.atomicAckETH, hd["atomic_ack_eth"] = &v, map[string]uint64{"orig_data": v.OrigData}
	}
	if h := p.ImmDt(); h != nil {
		v := h.Imm()
		d.imm, hd["immdt"] = &v, map[string]uint64{"imm": uint64(v)}
	}
	if h := p.IETH(); h != nil {
		v := h.Fields()
		d.ieth, hd["ieth"] = &v, map[string]uint64{"rkey": uint64(v.RKey)}
	}
	if len(hd) > 0 {
		d.Headers = hd
	}
	d.PayloadLen, d.Pad = intp(p.PayloadLen()), intp(len(p.Pad()))
	stored, computed := p.ICRC(), p.ComputeICRC()
	d.ICRCStored, d.ICRCComputed = fmt.Sprintf("%#08x", stored), fmt.Sprintf("%#08x", computed)
	if stored == computed {
		d.ICRC = "ok"
	} else {
		d.ICRC, d.bad = "BAD", true
	}
}

// summarize describes a non-RoCE frame from gopacket's decoding.
func summarize(pkt gopacket.Packet) string {
	if a, ok := pkt.Layer(layers.LayerTypeARP).(*layers.ARP); ok {
		switch a.Operation {
		case layers.ARPRequest:
			return fmt.Sprintf("ARP who-has %v tell %v", ipString(a.DstProtAddress), ipString(a.SourceProtAddress))
		case layers.ARPReply:
			return fmt.Sprintf("ARP reply %v is-at %v", ipString(a.SourceProtAddress), macString(a.SourceHwAddress))
		}
		return fmt.Sprintf("ARP op %d", a.Operation)
	}
	var src, dst string
	if n := pkt.NetworkLayer(); n != nil {
		f := n.NetworkFlow()
		src, dst = f.Src().String(), f.Dst().String()
	}
	switch {
	case pkt.Layer(layers.LayerTypeTCP) != nil:
		t := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		return fmt.Sprintf("TCP %s:%d > %s:%d len=%d", src, t.SrcPort, dst, t.DstPort, len(t.Payload))
	case pkt.Layer(layers.LayerTypeUDP) != nil:
		u := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		return fmt.Sprintf("UDP %s:%d > %s:%d len=%d", src, u.SrcPort, dst, u.DstPort, len(u.Payload))
	case pkt.Layer(layers.LayerTypeICMPv6NeighborSolicitation) != nil:
		return fmt.Sprintf("ICMPv6 neighbor solicitation %s > %s", src, dst)
	case pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement) != nil:
		return fmt.Sprintf("ICMPv6 neighbor advertisement %s > %s", src, dst)
	case pkt.Layer(layers.LayerTypeICMPv6) != nil:
		c := pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		return fmt.Sprintf("ICMPv6 %v %s > %s", c.TypeCode, src, dst)
	case pkt.Layer(layers.LayerTypeICMPv4) != nil:
		c := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		return fmt.Sprintf("ICMP %v %s > %s", c.TypeCode, src, dst)
	case src != "":
		return fmt.Sprintf("%v %s > %s", pkt.NetworkLayer().LayerType(), src, dst)
	}
	if l := pkt.LinkLayer(); l != nil {
		if e, ok := l.(*layers.Ethernet); ok {
			return fmt.Sprintf("Ethernet type %#04x %v > %v", uint16(e.EthernetType), e.SrcMAC, e.DstMAC)
		}
	}
	return "unknown"
}

func ipString(b []byte) string {
	if len(b) == 4 {
		return fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3])
	}
	return fmt.Sprintf("%x", b)
}

func macString(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(parts, ":")
}

func b01(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// writeText prints d as one line:
//
//	INDEX REL_TIME SRC:SPORT > DST OPCODE qp=0xQPN psn=0xPSN a=A se=S m=M pkey=0xPKEY [headers] payload=N pad=N icrc=ok|BAD
//	INDEX REL_TIME not-roce SUMMARY
func writeText(w io.Writer, d *decodedFrame) {
	var s strings.Builder
	s.WriteString(strconv.Itoa(d.Index))
	s.WriteString(" " + strconv.FormatFloat(d.RelTime, 'f', 6, 64) + " ")
	switch {
	case !d.RoCE:
		s.WriteString("not-roce " + d.Summary)
	case d.Error != "":
		s.WriteString("roce-error " + d.Error)
	default:
		fmt.Fprintf(&s, "%s > %s", netip.AddrPortFrom(netip.MustParseAddr(d.Src), d.SrcPort), d.Dst)
		if d.VLAN != nil {
			fmt.Fprintf(&s, " vlan=%d", *d.VLAN)
		}
		fmt.Fprintf(&s, " %s qp=%#06x psn=0x%06x a=%s se=%s m=%s pkey=%#04x", d.OpcodeName, *d.DestQP, *d.PSN,
			b01(d.AckReq), b01(d.SE), b01(d.MigReq), *d.PKey)
		if d.FECN || d.BECN {
			fmt.Fprintf(&s, " fecn=%s becn=%s", b01(d.FECN), b01(d.BECN))
		}
		if d.TVer != 0 {
			fmt.Fprintf(&s, " tver=%d", d.TVer)
		}
		if h := d.rdeth; h != nil {
			fmt.Fprintf(&s, " rdeth[eec=%#06x]", h.EEC)
		}
		if h := d.deth; h != nil {
			fmt.Fprintf(&s, " deth[qkey=%#08x srcqp=%#06x]", h.QKey, h.SrcQP)
		}
		if h := d.xrceth; h != nil {
			fmt.Fprintf(&s, " xrceth[srq=%#06x]", h.SRQ)
		}
		if h := d.feth; h != nil {
			fmt.Fprintf(&s, " feth[sel=%d plt=%d]", h.Selectivity, h.Placement)
		}
		if h := d.reth; h != nil {
			fmt.Fprintf(&s, " reth[va=%#x rkey=%#08x len=%d]", h.VA, h.RKey, h.DMALen)
		}
		if h := d.atomicETH; h != nil {
			fmt.Fprintf(&s, " atomiceth[va=%#x rkey=%#08x swap_add=%#x compare=%#x]", h.VA, h.RKey, h.SwapAdd, h.Compare)
		}
		if h := d.aeth; h != nil {
			fmt.Fprintf(&s, " aeth[syndrome=%#02x %v msn=%d]", uint8(h.Syndrome), h.Syndrome, h.MSN)
		}
		if h := d.atomicAckETH; h != nil {
			fmt.Fprintf(&s, " atomicacketh[orig=%#x]", h.OrigData)
		}
		if d.imm != nil {
			fmt.Fprintf(&s, " imm=%#08x", *d.imm)
		}
		if h := d.ieth; h != nil {
			fmt.Fprintf(&s, " ieth[rkey=%#08x]", h.RKey)
		}
		fmt.Fprintf(&s, " payload=%d pad=%d icrc=%s", *d.PayloadLen, *d.Pad, d.ICRC)
		if d.ICRC != "ok" {
			fmt.Fprintf(&s, " (stored %s computed %s)", d.ICRCStored, d.ICRCComputed)
		}
	}
	s.WriteByte('\n')
	io.WriteString(w, s.String())
}
