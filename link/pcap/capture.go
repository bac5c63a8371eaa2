// Package pcap records the frames a link carries to a pcap stream
// (LINKTYPE_ETHERNET), readable by tcpdump, tshark and Wireshark. It is a
// package of its own so that the data path (package link and the emulator
// above it) does not import the pcap libraries.
package pcap

import (
	"fmt"
	"io"
	"sync"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
)

// Snaplen is the snapshot length written in the pcap file header:
// frames are captured whole.
const Snaplen = 262144

// Capture is a link.Link that records every frame it reads or writes to a pcap
// stream (LINKTYPE_ETHERNET) while passing them to and from an inner Link,
// after gVisor's link/sniffer. Unlike tcpdump on an rxe netdev it sees
// emulator-internal traffic too, whatever link is underneath. Frames are
// recorded whole, timestamped by the injected clock, after the inner
// link accepted (write) or delivered (read) them. A frame that a read
// truncated to its buffer is recorded as read.
//
// Capture is safe for concurrent readers and writers; records do not
// interleave. A failed pcap write stops the capture (see Err) but not
// the link.
type Capture struct {
	inner link.Link
	clk   clock.Clock

	mu     sync.Mutex
	w      *pcapgo.Writer
	err    error
	frames uint64
}

var _ link.Link = (*Capture)(nil)

// New writes a pcap file header to w and returns a Capture over inner. clk
// timestamps the records; nil means clock.Real. The caller owns w: Close does
// not close or flush it.
func New(inner link.Link, w io.Writer, clk clock.Clock) (*Capture, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(Snaplen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap: writing pcap header: %w", err)
	}
	return &Capture{inner: inner, clk: clk, w: pw}, nil
}

func (c *Capture) record(frames [][]byte, sizes []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	now := c.clk.Now()
	for i, f := range frames {
		if sizes != nil {
			f = f[:sizes[i]]
		}
		ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(f), Length: len(f)}
		if err := c.w.WritePacket(ci, f); err != nil {
			c.err = fmt.Errorf("pcap: writing frame %d: %w", c.frames, err)
			return
		}
		c.frames++
	}
}

// ReadPackets reads from the inner link and records what it read.
func (c *Capture) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	n, err := c.inner.ReadPackets(bufs, sizes)
	if n > 0 {
		c.record(bufs[:n], sizes[:n])
	}
	return n, err
}

// WritePackets writes to the inner link and records the frames it took.
func (c *Capture) WritePackets(bufs [][]byte) (int, error) {
	n, err := c.inner.WritePackets(bufs)
	if n > 0 {
		c.record(bufs[:n], nil)
	}
	return n, err
}

// BatchSize is the inner link's.
func (c *Capture) BatchSize() int { return c.inner.BatchSize() }

// MTU is the inner link's.
func (c *Capture) MTU() int { return c.inner.MTU() }

// Close closes the inner link.
func (c *Capture) Close() error { return c.inner.Close() }

// Frames returns how many frames were recorded.
func (c *Capture) Frames() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// Err returns the error that stopped the capture, or nil.
func (c *Capture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
