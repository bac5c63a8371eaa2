package node

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/internal/testutil"
)

// readPcap returns the frames of a pcap stream of Ethernet frames.
func readPcap(t testing.TB, b []byte) [][]byte {
	t.Helper()
	return testutil.ReadPcap(t, bytes.NewReader(b))
}

// isRoCE reports whether frame is UDP to port 4791.
func isRoCE(frame []byte) bool {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
	u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	return ok && u.DstPort == 4791
}
