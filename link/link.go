// Package link moves Ethernet frames between an emulated HCA and whatever
// carries them: an in-memory pipe for tests and the embedded default, a TAP
// device or an AF_PACKET socket (package tap) for a real segment, and
// decorators that inject faults (Faults here) or record frames to a pcap
// file (package link/pcap, kept apart so that the data path does not import
// the pcap libraries).
//
// The interface is batch-shaped after wireguard-go's tun.Device: batching
// is free to add later and painful to retrofit.
package link

// Link carries whole Ethernet frames (destination MAC first, no FCS).
type Link interface {
	// ReadPackets reads up to len(bufs) frames, frame i into bufs[i] with
	// its length in sizes[i], and returns how many it read. It blocks until
	// at least one frame is available or the link is closed, in which case
	// it returns an error wrapping net.ErrClosed. A frame longer than its
	// buffer is truncated to the buffer.
	ReadPackets(bufs [][]byte, sizes []int) (n int, err error)
	// WritePackets writes each of bufs as one frame and returns how many it
	// wrote. The link does not retain bufs after it returns. A frame the
	// MTU does not allow (see CheckFrame) is refused with an error wrapping
	// EMSGSIZE, never truncated; the frames before it were written.
	WritePackets(bufs [][]byte) (n int, err error)
	// BatchSize is the largest number of frames one call moves; callers
	// size bufs and sizes to it.
	BatchSize() int
	// MTU is the largest IP packet the link carries (Ethernet payload,
	// without the 14-byte header), as a netdev's MTU.
	MTU() int
	// Close releases the link; blocked reads return.
	Close() error
}
