package uverbsd_test

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/nldev"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

// testLinks are a daemon's Links that make each device a node of its own.
type testLinks struct {
	t   *testing.T
	mu  sync.Mutex
	srv *uverbsd.Server
	mac byte
}

func (l *testLinks) NewLink(name, netdev string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mac++
	n, err := node.New(context.Background(), node.Config{Name: name, Seed: uint64(l.mac), MAC: []byte{2, 0, 0, 0, 1, l.mac}})
	if err != nil {
		return err
	}
	l.t.Cleanup(func() { n.Close() })
	return l.srv.AddDevice(n.Device(), nil)
}

func (l *testLinks) DelLink(name string) error {
	_, err := l.srv.RemoveDevice(name, 0, nil)
	return err
}

// nlAttr is one netlink attribute, padded to 4 bytes.
func nlAttr(typ uint16, val string) []byte {
	b := make([]byte, 4, 4+len(val)+4)
	binary.NativeEndian.PutUint16(b, uint16(4+len(val)+1))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, val...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// TestRdmaLinkAddAndDeleteServeAndRemoveADevice: `rdma link add NAME type
// rxe netdev DEV` over the daemon's RDMA netlink socket serves a new
// device (it is listed, its uverbs node opens) and `rdma link delete NAME`
// removes it, for a requester with CAP_NET_ADMIN; a second device on the
// same netdev is EEXIST, a link type other than rxe EINVAL. Without the
// capability both are EPERM, as the kernel keeps them to admins.
func TestRdmaLinkAddAndDeleteServeAndRemoveADevice(t *testing.T) {
	links := &testLinks{t: t}
	h := newHarness(t, func(cfg *uverbsd.Config) { cfg.Links = links })
	links.srv = h.srv
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rh := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(preload.NetlinkNode)), nil); rh.Ret != 0 {
		t.Fatalf("open of %s: %d", preload.NetlinkNode, rh.Ret)
	}
	seq := uint32(0)
	// ask sends one request with NLM_F_ACK and returns the errno its
	// NLMSG_ERROR carries (0: the ACK).
	ask := func(cmd uint16, attrs ...[]byte) unix.Errno {
		t.Helper()
		seq++
		req := make([]byte, nldev.HdrLen)
		for _, a := range attrs {
			req = append(req, a...)
		}
		binary.NativeEndian.PutUint32(req, uint32(len(req)))
		binary.NativeEndian.PutUint16(req[4:], nldev.Type(nldev.ClientNLDEV, cmd))
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
		binary.NativeEndian.PutUint32(req[8:], seq)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<16)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if n >= nldev.HdrLen+4 && binary.NativeEndian.Uint32(buf[8:]) == seq &&
				binary.NativeEndian.Uint16(buf[4:]) == unix.NLMSG_ERROR {
				return unix.Errno(-int32(binary.NativeEndian.Uint32(buf[nldev.HdrLen:])))
			}
		}
	}
	add := func(name, typ, netdev string) unix.Errno {
		return ask(nldev.CmdNewlink, nlAttr(nldev.AttrDevName, name), nlAttr(nldev.AttrLinkType, typ),
			nlAttr(nldev.AttrNetdevName, netdev))
	}
	// del is `rdma link delete`, which names the device by its index.
	del := func(index uint32) unix.Errno {
		a := make([]byte, 8)
		binary.NativeEndian.PutUint16(a, 8)
		binary.NativeEndian.PutUint16(a[2:], nldev.AttrDevIndex)
		binary.NativeEndian.PutUint32(a[4:], index)
		return ask(nldev.CmdDellink, a)
	}

	if os.Geteuid() != 0 {
		if e := add("rxe5", "rxe", "sr5"); e != unix.EPERM {
			t.Errorf("link add without CAP_NET_ADMIN: %v, want EPERM", e)
		}
		if e := del(0); e != unix.EPERM {
			t.Errorf("link delete without CAP_NET_ADMIN: %v, want EPERM", e)
		}
		return
	}
	if e := add("rxe5", "rxe", "sr5"); e != 0 {
		t.Fatalf("link add rxe5 type rxe netdev sr5: %v", e)
	}
	if got := h.srv.Devices(); !slices.Equal(got, []string{"rxe0", "rxe5"}) {
		t.Fatalf("devices after link add: %v", got)
	}
	oc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.srv.SocketPath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	if rh := exchange(t, oc, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte("uverbs1")), nil); rh.Ret != 0 {
		t.Errorf("open of the added device's uverbs1: %d", rh.Ret)
	}
	oc.Close()
	if e := add("rxe6", "siw", "sr6"); e != unix.EINVAL {
		t.Errorf("link add of type siw: %v, want EINVAL", e)
	}
	if e := add("rxe7", "rxe", "sr/7"); e != unix.ENODEV {
		t.Errorf("link add on an invalid netdev name: %v, want ENODEV", e)
	}
	netdev := h.node.Device().NetDev().Name
	if netdev != "" {
		if e := add("rxe8", "rxe", netdev); e != unix.EEXIST {
			t.Errorf("link add on %s, rxe0's netdev: %v, want EEXIST", netdev, e)
		}
	}
	if e := add("rxe5", "rxe", "sr9"); e != unix.EEXIST {
		t.Errorf("link add of a name served: %v, want EEXIST", e)
	}
	// rxe5 is device 1 (uverbs1).
	if e := del(1); e != 0 {
		t.Fatalf("link delete rxe5: %v", e)
	}
	if got := h.srv.Devices(); !slices.Equal(got, []string{"rxe0"}) {
		t.Errorf("devices after link delete: %v", got)
	}
	if e := del(1); e != unix.EINVAL {
		t.Errorf("link delete of an index no device has: %v, want EINVAL (ib_device_get_by_index finds none)", e)
	}
}
