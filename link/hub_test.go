package link

import (
	"bytes"
	"testing"
	"time"
)

// hubFrame is an Ethernet frame from src to dst carrying tag.
func hubFrame(dst, src byte, tag string) []byte {
	f := make([]byte, 60)
	f[0], f[6] = 2, 2
	f[5], f[11] = dst, src
	if dst == 0xff {
		copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	f[12], f[13] = 0x08, 0x00
	copy(f[14:], tag)
	return f
}

// TestHubSwitchesByLearnedMAC: a broadcast and an unknown unicast frame
// reach every other port; once the Hub has seen a MAC as a source, frames
// to it reach its port alone; a detached port's MACs are forgotten and
// the others go on; a station already on a pipe joins by its far end
// (Connect).
func TestHubSwitchesByLearnedMAC(t *testing.T) {
	h := NewHub(nil)
	defer h.Close()
	var ports []*HubPort
	for range 3 {
		p, err := h.Attach()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	send := func(from int, f []byte) {
		t.Helper()
		if _, err := ports[from].WritePackets([][]byte{f}); err != nil {
			t.Fatal(err)
		}
	}
	// tryRead returns the tag of the frame queued at port i ("": none).
	tryRead := func(i int) string {
		buf, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		n, err := ports[i].TryReadRef(buf, sizes, []bool{false}, make([]PayloadRef, 1))
		if err != nil || n != 1 {
			return ""
		}
		return string(bytes.TrimRight(buf[0][14:sizes[0]], "\x00"))
	}
	// expect checks the tag each port gets: want[i] for port i ("":
	// none within a short wait).
	expect := func(want ...string) {
		t.Helper()
		time.Sleep(20 * time.Millisecond)
		for i, w := range want {
			if ports[i] == nil {
				continue
			}
			got := tryRead(i)
			for deadline := time.Now().Add(time.Second); got == "" && w != "" && time.Now().Before(deadline); got = tryRead(i) {
				time.Sleep(time.Millisecond)
			}
			if got != w {
				t.Errorf("port %d got %q, want %q", i, got, w)
			}
		}
	}
	send(0, hubFrame(0xff, 1, "bcast"))
	expect("", "bcast", "bcast")
	send(1, hubFrame(9, 2, "unknown"))
	expect("unknown", "", "unknown")
	// MAC 1 is on port 0, 2 on port 1.
	send(2, hubFrame(1, 3, "to1"))
	expect("to1", "", "")
	send(0, hubFrame(2, 1, "to2"))
	expect("", "to2", "")
	ports[1].Close()
	deadline := time.Now().Add(time.Second)
	for h.Ports() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := h.Ports(); got != 2 {
		t.Fatalf("%d ports after one closed, want 2", got)
	}
	ports[1] = nil
	// MAC 2 is forgotten: a frame to it floods to the ports left.
	send(0, hubFrame(2, 1, "again"))
	expect("", "", "again")
	// A station already on a pipe joins through its far end.
	station, far := NewPipe(nil)
	defer station.Close()
	if err := h.Connect(far); err != nil {
		t.Fatal(err)
	}
	if _, err := station.WritePackets([][]byte{hubFrame(0xff, 7, "joined")}); err != nil {
		t.Fatal(err)
	}
	expect("joined", "", "joined")
	send(2, hubFrame(7, 3, "to7"))
	got := ""
	for deadline := time.Now().Add(time.Second); got == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		buf, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		if n, _ := station.TryReadRef(buf, sizes, []bool{false}, make([]PayloadRef, 1)); n == 1 {
			got = string(bytes.TrimRight(buf[0][14:sizes[0]], "\x00"))
		}
	}
	if got != "to7" {
		t.Errorf("the connected station got %q, want to7", got)
	}
}
