package uverbsd_test

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/nldev"
	"github.com/softroce/softroce/preload"
)

// TestNetlinkConnectionSurvivesHostileDatagrams: an RDMA netlink
// connection that sends garbage, truncated messages, descriptors, an empty
// datagram and one past the frame buffer gets the kernel's answers or none, and
// then still gets its device dump; another client is not disturbed.
func TestNetlinkConnectionSurvivesHostileDatagrams(t *testing.T) {
	h := newHarness(t)
	dial := func() *net.UnixConn {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rh := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(preload.NetlinkNode)), nil)
		if rh.Ret != 0 {
			t.Fatalf("open of %s: %d", preload.NetlinkNode, rh.Ret)
		}
		return c
	}
	dump := func(c *net.UnixConn, seq uint32) []byte {
		req := make([]byte, nldev.HdrLen)
		binary.NativeEndian.PutUint32(req, nldev.HdrLen)
		binary.NativeEndian.PutUint16(req[4:], nldev.Type(nldev.ClientNLDEV, nldev.CmdGet))
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		binary.NativeEndian.PutUint32(req[8:], seq)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<16)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("no dump reply: %v", err)
			}
			if binary.NativeEndian.Uint32(buf[8:]) == seq {
				return buf[:n]
			}
		}
	}
	c, other := dial(), dial()
	rnd := rand.New(rand.NewPCG(1, 2))
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	for i := range 300 {
		b := make([]byte, rnd.IntN(200))
		for j := range b {
			b[j] = byte(rnd.Uint32())
		}
		if i%3 == 0 && len(b) >= nldev.HdrLen {
			// A plausible header over garbage attributes.
			binary.NativeEndian.PutUint32(b, uint32(len(b)))
			binary.NativeEndian.PutUint16(b[4:], nldev.Type(nldev.ClientNLDEV, uint16(rnd.IntN(nldev.NumOps+2))))
			binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|uint16(rnd.IntN(2))*unix.NLM_F_DUMP)
		}
		var oob []byte
		if i%50 == 0 {
			oob = unix.UnixRights(int(r.Fd()))
		}
		if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	// An empty datagram (the kernel finds no message in it) is not the
	// end of the connection.
	if _, _, err := c.WriteMsgUnix([]byte{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, preload.HeaderSize+preload.MaxPayload+100)); err != nil {
		t.Fatal(err)
	}
	for _, conn := range []*net.UnixConn{c, other} {
		got := dump(conn, 0xabcdef)
		if binary.NativeEndian.Uint16(got[4:]) != nldev.Type(nldev.ClientNLDEV, nldev.CmdGet) {
			t.Errorf("dump after the abuse: type %#x", binary.NativeEndian.Uint16(got[4:]))
		}
	}
}
