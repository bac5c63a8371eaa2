package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// packetSource is what the capture readers have in common: the next
// packet and the link type of the packet last read.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// maxCapLen is the longest packet a capture may hold (libpcap's
// MAXIMUM_SNAPLEN): a longer captured length is a malformed file, not a
// reason to allocate.
const maxCapLen = 262144

// openCapture opens a pcap or pcapng stream, telling them apart by magic.
// Every malformed or truncated file is an error, from openCapture or from
// ReadPacketData; io.EOF comes only at the end of the last whole packet.
// Nothing is allocated beyond what the input holds, whatever its length
// fields claim.
func openCapture(f io.Reader) (packetSource, error) {
	br := bufio.NewReader(f)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("not a capture file: %w", err)
	}
	if binary.BigEndian.Uint32(magic) == ngSectionHeader {
		return newNgReader(br)
	}
	r, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, err
	}
	// pcapgo refuses a captured length over the snap length before it
	// allocates; a header's snap length above libpcap's maximum (or 0)
	// would let any length through.
	if s := r.Snaplen(); s == 0 || s > maxCapLen {
		r.SetSnaplen(maxCapLen)
	}
	return pcapSource{r}, nil
}

// pcapSource is pcapgo's classic reader with a record header followed by
// no data reported as truncation: pcapgo returns the io.EOF of io.ReadFull
// then, which would end the file silently.
type pcapSource struct{ r *pcapgo.Reader }

func (p pcapSource) ReadPacketData() ([]byte, gopacket.CaptureInfo, error) {
	data, ci, err := p.r.ReadPacketData()
	if errors.Is(err, io.EOF) && ci.CaptureLength > 0 {
		err = fmt.Errorf("pcap: packet of %d bytes: %w", ci.CaptureLength, io.ErrUnexpectedEOF)
	}
	return data, ci, err
}

func (p pcapSource) LinkType() layers.LinkType { return p.r.LinkType() }

// pcapng block types and constants (the pcapng file format, IETF
// draft-ietf-opsawg-pcapng).
const (
	ngSectionHeader   = 0x0A0D0D0A
	ngInterface       = 1
	ngObsoletePacket  = 2
	ngSimplePacket    = 3
	ngEnhancedPacket  = 6
	ngByteOrderMagic  = 0x1A2B3C4D
	ngOptTSResolution = 9
	ngOptTSOffset     = 14
	// ngMaxBlock is the longest block accepted (Wireshark's limit).
	ngMaxBlock = 16 << 20
)

// ngReader reads a pcapng stream strictly: every block's length is checked
// (at least 12, a multiple of 4, at most ngMaxBlock, repeated at its end),
// every field inside a block must fit in it, a packet must name an
// interface described before it, and a stream that ends inside a block is
// io.ErrUnexpectedEOF. Packets of every interface are returned, each with
// its interface's link type.
type ngReader struct {
	r      io.Reader
	order  binary.ByteOrder
	off    int64 // stream offset of the next block
	ifaces []ngIface
	lt     layers.LinkType
}

// ngIface is what an Interface Description Block says about timestamps
// and packets.
type ngIface struct {
	lt       layers.LinkType
	snap     uint32
	perSec   uint64 // timestamp units per second (if_tsresol)
	offsetSc int64  // seconds added to every timestamp (if_tsoffset)
}

// newNgReader reads the first Section Header Block.
func newNgReader(r io.Reader) (*ngReader, error) {
	n := &ngReader{r: r}
	typ, body, err := n.block()
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	if typ != ngSectionHeader {
		return nil, fmt.Errorf("pcapng: first block has type %#x, not a section header", typ)
	}
	if err := n.section(body); err != nil {
		return nil, err
	}
	return n, nil
}

// LinkType returns the link type of the interface of the packet last read
// (before any, of the first interface, or Ethernet).
func (n *ngReader) LinkType() layers.LinkType {
	if n.lt == 0 && len(n.ifaces) > 0 {
		return n.ifaces[0].lt
	}
	return n.lt
}

// errf is a format error of the block at off.
func (n *ngReader) errf(off int64, format string, args ...any) error {
	return fmt.Errorf("pcapng: block at offset %d: %w", off, fmt.Errorf(format, args...))
}

// readFull reads exactly len(b) bytes; a short read is
// io.ErrUnexpectedEOF unless nothing at all was read and eofOK.
func (n *ngReader) readFull(b []byte, eofOK bool) error {
	k, err := io.ReadFull(n.r, b)
	n.off += int64(k)
	if errors.Is(err, io.EOF) && !eofOK {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readBody reads size bytes, growing its buffer as the data comes, so that
// a length field larger than the stream allocates no more than the stream
// holds.
func (n *ngReader) readBody(size int) ([]byte, error) {
	if size <= 4096 {
		b := make([]byte, size)
		return b, n.readFull(b, false)
	}
	b, err := io.ReadAll(io.LimitReader(n.r, int64(size)))
	n.off += int64(len(b))
	if err == nil && len(b) < size {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

// block reads one whole block and returns its type and body (what lies
// between the length fields; for a section header, from its byte-order
// magic on). io.EOF means the stream ended cleanly before a block.
func (n *ngReader) block() (uint32, []byte, error) {
	start := n.off
	var hdr [12]byte
	if err := n.readFull(hdr[:8], true); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, n.errf(start, "truncated block header: %w", err)
	}
	hlen := 8
	if binary.BigEndian.Uint32(hdr[:4]) == ngSectionHeader {
		// A section header sets the byte order of everything up to the
		// next one, its own length included.
		if err := n.readFull(hdr[8:12], false); err != nil {
			return 0, nil, n.errf(start, "truncated section header: %w", err)
		}
		switch uint32(ngByteOrderMagic) {
		case binary.BigEndian.Uint32(hdr[8:12]):
			n.order = binary.BigEndian
		case binary.LittleEndian.Uint32(hdr[8:12]):
			n.order = binary.LittleEndian
		default:
			return 0, nil, n.errf(start, "bad byte-order magic %#x", hdr[8:12])
		}
		hlen = 12
	}
	if n.order == nil {
		return 0, nil, n.errf(start, "not a pcapng section header")
	}
	typ, total := n.order.Uint32(hdr[:4]), n.order.Uint32(hdr[4:8])
	minLen := uint32(12)
	if typ == ngSectionHeader {
		minLen = 28
	}
	switch {
	case total < minLen || total%4 != 0:
		return 0, nil, n.errf(start, "block type %#x: bad length %d", typ, total)
	case total > ngMaxBlock:
		return 0, nil, n.errf(start, "block type %#x: length %d over the limit of %d", typ, total, ngMaxBlock)
	}
	rest, err := n.readBody(int(total) - hlen)
	if err != nil {
		return 0, nil, n.errf(start, "block type %#x of %d bytes: %w", typ, total, err)
	}
	body, trailer := rest[:len(rest)-4], n.order.Uint32(rest[len(rest)-4:])
	if trailer != total {
		return 0, nil, n.errf(start, "block type %#x: length %d at its start, %d at its end", typ, total, trailer)
	}
	if typ == ngSectionHeader {
		body = append(hdr[8:12:12], body...)
	}
	return typ, body, nil
}

// section starts a new section (its interfaces replace the last one's).
func (n *ngReader) section(body []byte) error {
	if major := n.order.Uint16(body[4:6]); major != 1 {
		return fmt.Errorf("pcapng: section header version %d.%d", major, n.order.Uint16(body[6:8]))
	}
	n.ifaces = n.ifaces[:0]
	return nil
}

// iface parses an Interface Description Block.
func (n *ngReader) iface(off int64, body []byte) error {
	if len(body) < 8 {
		return n.errf(off, "interface description of %d bytes", len(body))
	}
	in := ngIface{lt: layers.LinkType(n.order.Uint16(body[0:2])), snap: n.order.Uint32(body[4:8]), perSec: 1e6}
	opts := body[8:]
	for len(opts) >= 4 {
		code, l := n.order.Uint16(opts[0:2]), int(n.order.Uint16(opts[2:4]))
		if code == 0 {
			break
		}
		padded := (l + 3) &^ 3
		if 4+padded > len(opts) {
			return n.errf(off, "interface option %d of %d bytes overruns its block", code, l)
		}
		v := opts[4 : 4+l]
		switch {
		case code == ngOptTSResolution && l >= 1:
			exp := uint(v[0] & 0x7f)
			if v[0]&0x80 != 0 {
				if exp > 63 {
					return n.errf(off, "timestamp resolution 2^-%d", exp)
				}
				in.perSec = 1 << exp
			} else {
				if exp > 19 {
					return n.errf(off, "timestamp resolution 10^-%d", exp)
				}
				in.perSec = 1
				for range exp {
					in.perSec *= 10
				}
			}
		case code == ngOptTSOffset && l == 8:
			in.offsetSc = int64(n.order.Uint64(v))
		}
		opts = opts[4+padded:]
	}
	n.ifaces = append(n.ifaces, in)
	return nil
}

// ReadPacketData returns the next packet (enhanced, simple or obsolete
// packet block), skipping the blocks that hold none.
func (n *ngReader) ReadPacketData() ([]byte, gopacket.CaptureInfo, error) {
	var ci gopacket.CaptureInfo
	for {
		off := n.off
		typ, body, err := n.block()
		if err != nil {
			return nil, ci, err
		}
		var id, caplen, origlen uint32
		var ts uint64
		var data []byte
		switch typ {
		case ngSectionHeader:
			if err := n.section(body); err != nil {
				return nil, ci, err
			}
			continue
		case ngInterface:
			if err := n.iface(off, body); err != nil {
				return nil, ci, err
			}
			continue
		case ngEnhancedPacket, ngObsoletePacket:
			if len(body) < 20 {
				return nil, ci, n.errf(off, "packet block of %d bytes", len(body))
			}
			id = n.order.Uint32(body[0:4])
			if typ == ngObsoletePacket {
				id = uint32(n.order.Uint16(body[0:2]))
			}
			ts = uint64(n.order.Uint32(body[4:8]))<<32 | uint64(n.order.Uint32(body[8:12]))
			caplen, origlen = n.order.Uint32(body[12:16]), n.order.Uint32(body[16:20])
			if uint64(caplen) > uint64(len(body)-20) {
				return nil, ci, n.errf(off, "captured length %d exceeds its block (%d bytes of data)", caplen, len(body)-20)
			}
			data = body[20 : 20+caplen]
		case ngSimplePacket:
			if len(body) < 4 {
				return nil, ci, n.errf(off, "simple packet block of %d bytes", len(body))
			}
			origlen = n.order.Uint32(body[0:4])
			caplen = origlen
			if len(n.ifaces) > 0 && n.ifaces[0].snap != 0 {
				caplen = min(caplen, n.ifaces[0].snap)
			}
			if uint64(caplen) > uint64(len(body)-4) {
				return nil, ci, n.errf(off, "packet length %d exceeds its block (%d bytes of data)", caplen, len(body)-4)
			}
			data = body[4 : 4+caplen]
		default:
			continue // statistics, name resolution, custom blocks
		}
		if int(id) >= len(n.ifaces) {
			return nil, ci, n.errf(off, "packet of interface %d, but the section describes %d", id, len(n.ifaces))
		}
		in := n.ifaces[id]
		if typ != ngSimplePacket {
			sec := ts / in.perSec
			hi, lo := bits.Mul64(ts%in.perSec, 1e9)
			nsec, _ := bits.Div64(hi, lo, in.perSec)
			ci.Timestamp = time.Unix(int64(sec)+in.offsetSc, int64(nsec)).UTC()
		}
		ci.CaptureLength, ci.Length, ci.InterfaceIndex = int(caplen), int(origlen), int(id)
		n.lt = in.lt
		return data, ci, nil
	}
}
