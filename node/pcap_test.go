package node

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// readPcap returns the frames of a pcap stream.
func readPcap(t testing.TB, b []byte) [][]byte {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("pcap link type %v, want Ethernet", r.LinkType())
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, data)
	}
}

// isRoCE reports whether frame is UDP to port 4791.
func isRoCE(frame []byte) bool {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
	u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	return ok && u.DstPort == 4791
}
