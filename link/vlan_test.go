package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link"
)

// tagged returns f with an 802.1Q tag of TCI tci after the MACs.
func tagged(f []byte, tci uint16) []byte {
	t := append([]byte{}, f[:12]...)
	t = binary.BigEndian.AppendUint16(t, 0x8100)
	t = binary.BigEndian.AppendUint16(t, tci)
	return append(t, f[12:]...)
}

// TestVLANTagsAndFilters: what the VLAN writes leaves the link with a tag
// of its ID and priority 0; of what the link carries in, only frames of
// its VLAN come out, untagged (not untagged frames, not another VLAN's,
// not a truncated tag), whatever their priority; the name is LINK.ID;
// IDs 0 and 4095 are EINVAL.
func TestVLANTagsAndFilters(t *testing.T) {
	a, raw := link.NewPipe(&link.PipeConfig{MTU: 1500})
	defer raw.Close()
	v, err := link.NewVLAN(a, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.VLANID() != 100 || v.MTU() != 1500 {
		t.Errorf("VLANID %d MTU %d", v.VLANID(), v.MTU())
	}
	f := testutil.Frame(1514, 1)
	if n, err := v.WritePackets([][]byte{f}); n != 1 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	bufs, sizes := testutil.ReadBufs(1, 2000)
	if n, err := raw.ReadPackets(bufs, sizes); n != 1 || err != nil {
		t.Fatalf("raw read: %d %v", n, err)
	}
	if got, want := bufs[0][:sizes[0]], tagged(f, 100); !bytes.Equal(got, want) {
		t.Errorf("on the link: % x..., want % x...", got[:18], want[:18])
	}
	if _, err := v.WritePackets([][]byte{testutil.Frame(1515, 2)}); !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("a frame over the MTU: %v, want EMSGSIZE", err)
	}

	in := testutil.Frame(200, 3)
	if _, err := raw.WritePackets([][]byte{in, tagged(in, 200), tagged(in, 100)[:16], tagged(in, 7<<13|100)}); err != nil {
		t.Fatal(err)
	}
	vb, vs := testutil.ReadBufs(4, 1514)
	n, err := v.ReadPackets(vb, vs)
	if err != nil || n != 1 || !bytes.Equal(vb[0][:vs[0]], in) {
		t.Errorf("read %d frames (%v), want only VLAN 100's, untagged", n, err)
	}
	for _, id := range []uint16{0, 4095} {
		if _, err := link.NewVLAN(a, id); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("VLAN %d: %v, want EINVAL", id, err)
		}
	}
}
