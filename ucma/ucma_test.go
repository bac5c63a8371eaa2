//go:build linux

package ucma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// mem is a client address space: one buffer at base; anything else is
// EFAULT.
type mem struct {
	mu   sync.Mutex
	base uint64
	buf  []byte
}

const base = 0x7f0000000000

func newMem() *mem { return &mem{base: base, buf: make([]byte, 1<<16)} }

func (m *mem) rng(addr uint64, n int) ([]byte, error) {
	if addr < m.base || addr-m.base > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-(addr-m.base) {
		return nil, fmt.Errorf("%#x+%d: %w", addr, n, unix.EFAULT)
	}
	return m.buf[addr-m.base : addr-m.base+uint64(n)], nil
}

func (m *mem) ReadAt(p []byte, addr uint64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.rng(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}

func (m *mem) WriteAt(p []byte, addr uint64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.rng(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(b, p), nil
}

// respAt is where the test client's responses go.
const respAt = base + 0x8000

// cmdBuf is a write() of command cmd: the header and the structure, with
// out the response room.
func cmdBuf[T any](cmd uint32, v T, out int) []byte {
	b := bytesOf(&v)
	h := uverbs.UcmCmdHdr{Cmd: cmd, In: uint16(len(b)), Out: uint16(out)}
	return append(append([]byte(nil), bytesOf(&h)...), b...)
}

// newServices serves the two devices of a loopback pair: a on A, b on B.
func newServices(t testing.TB) (a, b *Service, lb *workload.Loopback) {
	t.Helper()
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	mk := func(i int, ls *workload.LoopbackSide) *Service {
		cm, err := cma.New(cma.Config{Dev: ls.Dev, Seed: uint64(i), Timewait: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		return NewService(cm, uint64(i))
	}
	return mk(1, lb.A), mk(2, lb.B), lb
}

func newService(t testing.TB) (*Service, *workload.Loopback) {
	a, _, lb := newServices(t)
	return a, lb
}

// client is a File with its memory.
type client struct {
	t *testing.T
	f *File
	m *mem
}

func open(t *testing.T, s *Service, owner int) *client {
	t.Helper()
	m := newMem()
	f, err := s.Open(m, owner)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, f: f, m: m}
}

func (c *client) write(b []byte) error {
	n, err := c.f.Write(b)
	if err == nil && n != len(b) {
		c.t.Fatalf("write returned %d, want %d", n, len(b))
	}
	return err
}

func (c *client) createID(ps cma.PortSpace, uid uint64) uint32 {
	c.t.Helper()
	if err := c.write(cmdBuf(uverbs.UcmCmdCreateID, uverbs.UcmCreateID{Uid: uid, Response: respAt, Ps: uint16(ps)}, 4)); err != nil {
		c.t.Fatal(err)
	}
	return binary.NativeEndian.Uint32(c.m.buf[respAt-base:])
}

func sin(a netip.AddrPort) uverbs.SockaddrIn6 {
	var s uverbs.SockaddrIn6
	putSockaddr(bytesOf(&s), a)
	return s
}

// event takes the next event (GET_EVENT, after waiting on the event
// file as the preload library does).
func (c *client) event() uverbs.UcmEventResp {
	c.t.Helper()
	var one [8]byte
	done := make(chan error, 1)
	go func() { _, err := c.f.EventFile().Read(one[:]); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			c.t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		c.t.Fatal("no event counted on the event file")
	}
	if err := c.write(cmdBuf(uverbs.UcmCmdGetEvent, uverbs.UcmGetEvent{Response: respAt}, sizeOf[uverbs.UcmEventResp]())); err != nil {
		c.t.Fatal(err)
	}
	return load[uverbs.UcmEventResp](c.m.buf[respAt-base:])
}

func errnoIs(err error, e unix.Errno) bool { return errors.Is(err, e) }

// TestCommandErrnos: what a hostile or confused client gets for bad
// commands, as ucma_write and its handlers answer.
func TestCommandErrnos(t *testing.T) {
	s, lb := newService(t)
	c := open(t, s, 1)
	other := open(t, s, 2)
	defer c.f.Close()
	defer other.f.Close()
	id := c.createID(cma.PSTCP, 0x1234)
	theirs := other.createID(cma.PSTCP, 1)
	for _, tc := range []struct {
		name string
		buf  []byte
		want unix.Errno
	}{
		{"short header", []byte{1, 2, 3}, unix.EINVAL},
		{"unknown command", cmdBuf(99, uverbs.UcmListen{}, 0), unix.EINVAL},
		{"in past the write", append(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{}, 0)[:4], 0xff, 0xff, 0, 0), unix.EINVAL},
		{"GET_OPTION", cmdBuf(uverbs.UcmCmdGetOption, uverbs.UcmListen{}, 0), unix.ENOSYS},
		{"create bad port space", cmdBuf(uverbs.UcmCmdCreateID, uverbs.UcmCreateID{Response: respAt, Ps: 7}, 4), unix.EINVAL},
		{"create no response room", cmdBuf(uverbs.UcmCmdCreateID, uverbs.UcmCreateID{Response: respAt, Ps: 0x106}, 0), unix.ENOSPC},
		{"create response unmapped", cmdBuf(uverbs.UcmCmdCreateID, uverbs.UcmCreateID{Response: 8, Ps: 0x106}, 4), unix.EFAULT},
		{"no such id", cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: 777}, 0), unix.ENOENT},
		{"another file's id", cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: theirs}, 0), unix.EINVAL},
		{"connect unresolved", cmdBuf(uverbs.UcmCmdConnect, uverbs.UcmConnect{Id: id, Param: uverbs.UcmConnParam{Valid: 1}}, 0), unix.EINVAL},
		{"connect params not valid", cmdBuf(uverbs.UcmCmdConnect, uverbs.UcmConnect{Id: id}, 0), unix.EINVAL},
		{"bind AF_IB", cmdBuf(uverbs.UcmCmdBind, uverbs.UcmBind{Id: id, Size: 48, Addr: uverbs.KernelSockaddrStorage{Anon0: [128]byte{27}}}, 0), unix.EAFNOSUPPORT},
		{"bind size mismatch", cmdBuf(uverbs.UcmCmdBind, uverbs.UcmBind{Id: id, Size: 28, Addr: uverbs.KernelSockaddrStorage{Anon0: [128]byte{2}}}, 0), unix.EINVAL},
		{"bind foreign address", cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: id, Addr: sin(netip.MustParseAddrPort("192.0.2.9:1"))}, 0), unix.EADDRNOTAVAIL},
		{"resolve to nothing", cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: id}, 0), unix.EAFNOSUPPORT},
		{"init QP attr bad state", cmdBuf(uverbs.UcmCmdInitQPAttr, uverbs.UcmInitQPAttr{Id: id, Response: respAt, State: 9}, sizeOf[uverbs.QPAttr]()), unix.EINVAL},
		{"init QP attr no device", cmdBuf(uverbs.UcmCmdInitQPAttr, uverbs.UcmInitQPAttr{Id: id, Response: respAt, State: 1}, sizeOf[uverbs.QPAttr]()), unix.EINVAL},
		{"reject bad reason", cmdBuf(uverbs.UcmCmdReject, uverbs.UcmReject{Id: id, Reason: 3}, 0), unix.EINVAL},
		{"reject nothing", cmdBuf(uverbs.UcmCmdReject, uverbs.UcmReject{Id: id}, 0), unix.EINVAL},
		{"disconnect unconnected", cmdBuf(uverbs.UcmCmdDisconnect, uverbs.UcmDisconnect{Id: id}, 0), unix.EINVAL},
		{"get event, none", cmdBuf(uverbs.UcmCmdGetEvent, uverbs.UcmGetEvent{Response: respAt}, sizeOf[uverbs.UcmEventResp]()), unix.EAGAIN},
		{"get event small room", cmdBuf(uverbs.UcmCmdGetEvent, uverbs.UcmGetEvent{Response: respAt}, 8), unix.ENOSPC},
		{"option unknown", cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Id: id, Level: 9}, 0), unix.ENOSYS},
		{"option bad length", cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Id: id, Optname: 1, Optlen: 2, Optval: respAt}, 0), unix.EINVAL},
		{"option unmapped", cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Id: id, Optname: 1, Optlen: 4, Optval: 16}, 0), unix.EFAULT},
		{"option huge", cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Id: id, Optlen: 1 << 30, Optval: respAt}, 0), unix.EINVAL},
		{"query unknown option", cmdBuf(uverbs.UcmCmdQuery, uverbs.UcmQuery{Id: id, Option: 9, Response: respAt}, 512), unix.ENOSYS},
		{"migrate from a closed descriptor", cmdBuf(uverbs.UcmCmdMigrateID, uverbs.UcmMigrateID{Id: id, Fd: TokenNotOpen, Response: respAt}, 4), unix.ENOENT},
		{"migrate another process's file", cmdBuf(uverbs.UcmCmdMigrateID, uverbs.UcmMigrateID{Id: theirs, Fd: other.f.Token(), Response: respAt}, 4), unix.EINVAL},
		{"destroy another file's id", cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Id: theirs, Response: respAt}, 4), unix.EINVAL},
	} {
		if err := c.write(tc.buf); !errnoIs(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing above hurt the other client's ID: it still binds.
	if err := other.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: theirs, Addr: sin(netip.AddrPortFrom(lb.A.IP, 0))}, 0)); err != nil {
		t.Fatal(err)
	}
}

// TestConnectThroughTheABI: a listener on one device's Service and a
// connecting ID on the other's: the events and the INIT_QP_ATTR answers
// librdmacm uses, a dying client's ID disconnected, and DESTROY_ID's count
// of the events reported.
func TestConnectThroughTheABI(t *testing.T) {
	cs, s, lb := newServices(t)
	srv, cli := open(t, s, 1), open(t, cs, 2)
	defer srv.f.Close()
	defer cli.f.Close()
	ip := lb.B.IP
	l := srv.createID(cma.PSTCP, 0x10)
	if err := srv.write(cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Id: l, Addr: sin(netip.AddrPortFrom(ip, 7174))}, 0)); err != nil {
		t.Fatal(err)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Id: l, Backlog: 1}, 0)); err != nil {
		t.Fatal(err)
	}
	id := cli.createID(cma.PSTCP, 0x20)
	if err := cli.write(cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: id, Dst_addr: sin(netip.AddrPortFrom(ip, 7174)), Timeout_ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	if ev := cli.event(); ev.Event != uint32(cma.EventAddrResolved) || ev.Uid != 0x20 || ev.Id != id {
		t.Fatalf("event %+v", ev)
	}
	if err := cli.write(cmdBuf(uverbs.UcmCmdQueryRoute, uverbs.UcmQuery{Id: id, Response: respAt}, sizeOf[uverbs.UcmQueryRouteResp]())); err != nil {
		t.Fatal(err)
	}
	qr := load[uverbs.UcmQueryRouteResp](cli.m.buf[respAt-base:])
	if qr.Node_guid != be64(lb.A.Dev.Query().NodeGUID) || qr.Port_num != 1 {
		t.Fatalf("QUERY_ROUTE node GUID %#x port %d", qr.Node_guid, qr.Port_num)
	}
	if err := cli.write(cmdBuf(uverbs.UcmCmdResolveRoute, uverbs.UcmResolveRoute{Id: id, Ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	if ev := cli.event(); ev.Event != uint32(cma.EventRouteResolved) {
		t.Fatalf("event %+v", ev)
	}
	if err := cli.write(cmdBuf(uverbs.UcmCmdConnect, uverbs.UcmConnect{Id: id, Param: uverbs.UcmConnParam{Valid: 1, Qp_num: 0x55,
		Responder_resources: 1, Initiator_depth: 1, Retry_count: 7, Rnr_retry_count: 7}}, 0)); err != nil {
		t.Fatal(err)
	}
	req := srv.event()
	if req.Event != uint32(cma.EventConnectRequest) || req.Uid != 0x10 || req.Id == l {
		t.Fatalf("CONNECT_REQUEST %+v", req)
	}
	cp := load[uverbs.UcmConnParam](req.Param[:])
	if cp.Qp_num != 0x55 || cp.Private_data_len != 56 {
		t.Fatalf("CONNECT_REQUEST parameters %+v", cp)
	}
	conn := req.Id
	if err := srv.write(cmdBuf(uverbs.UcmCmdInitQPAttr, uverbs.UcmInitQPAttr{Id: conn, Response: respAt, State: 2}, sizeOf[uverbs.QPAttr]())); err != nil {
		t.Fatal(err)
	}
	if a := load[uverbs.QPAttr](srv.m.buf[respAt-base:]); a.Dest_qp_num != 0x55 || a.Ah_attr.Is_global != 1 || a.Qp_state != 2 {
		t.Fatalf("INIT_QP_ATTR RTR %+v", a)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdAccept, uverbs.UcmAccept{Uid: 0x30, Id: conn, Param: uverbs.UcmConnParam{Valid: 1, Qp_num: 0x66,
		Responder_resources: 1, Initiator_depth: 1, Rnr_retry_count: 7}}, 0)); err != nil {
		t.Fatal(err)
	}
	if ev := cli.event(); ev.Event != uint32(cma.EventConnectResponse) || load[uverbs.UcmConnParam](ev.Param[:]).Qp_num != 0x66 {
		t.Fatalf("event %+v", ev)
	}
	if err := cli.write(cmdBuf(uverbs.UcmCmdAccept, uverbs.UcmAccept{Id: id}, 0)); err != nil {
		t.Fatal(err)
	}
	if ev := srv.event(); ev.Event != uint32(cma.EventEstablished) || ev.Uid != 0x30 || ev.Id != conn {
		t.Fatalf("event %+v", ev)
	}
	// The client process dies: its file closes, its ID goes, the server
	// sees the DREQ.
	cli.f.Close()
	if ev := srv.event(); ev.Event != uint32(cma.EventDisconnected) {
		t.Fatalf("event %+v", ev)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdDisconnect, uverbs.UcmDisconnect{Id: conn}, 0)); err != nil {
		t.Fatal(err)
	}
	if ev := srv.event(); ev.Event != uint32(cma.EventTimewaitExit) {
		t.Fatalf("event %+v", ev)
	}
	if err := srv.write(cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Id: conn, Response: respAt}, 4)); err != nil {
		t.Fatal(err)
	}
	if n := binary.NativeEndian.Uint32(srv.m.buf[respAt-base:]); n != 3 {
		t.Fatalf("DESTROY_ID reports %d events, want 3", n)
	}
	if n := s.Contexts(); n != 1 {
		t.Fatalf("%d contexts left, want the listener's", n)
	}
}

// FuzzWrite feeds sequences of writes to a fresh File: each returns its
// length or an error wrapping an errno, nothing panics, and Close leaves
// no context behind.
func FuzzWrite(f *testing.F) {
	seq := func(bufs ...[]byte) []byte {
		var b []byte
		for _, w := range bufs {
			b = binary.LittleEndian.AppendUint16(b, uint16(len(w)))
			b = append(b, w...)
		}
		return b
	}
	create := cmdBuf(uverbs.UcmCmdCreateID, uverbs.UcmCreateID{Uid: 1, Response: respAt, Ps: 0x106}, 4)
	bind := cmdBuf(uverbs.UcmCmdBindIP, uverbs.UcmBindIP{Addr: sin(netip.MustParseAddrPort("0.0.0.0:7174"))}, 0)
	listen := cmdBuf(uverbs.UcmCmdListen, uverbs.UcmListen{Backlog: 4}, 0)
	resolve := cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Dst_addr: sin(netip.MustParseAddrPort("10.0.0.2:7174")), Timeout_ms: 5}, 0)
	query := cmdBuf(uverbs.UcmCmdQuery, uverbs.UcmQuery{Response: respAt, Option: 1}, 512)
	qattr := cmdBuf(uverbs.UcmCmdInitQPAttr, uverbs.UcmInitQPAttr{Response: respAt, State: 1}, sizeOf[uverbs.QPAttr]())
	opt := cmdBuf(uverbs.UcmCmdSetOption, uverbs.UcmSetOption{Optval: respAt, Optlen: 4, Optname: 1}, 0)
	ev := cmdBuf(uverbs.UcmCmdGetEvent, uverbs.UcmGetEvent{Response: respAt}, sizeOf[uverbs.UcmEventResp]())
	destroy := cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Response: respAt}, 4)
	f.Add(seq(create, bind, listen, query, destroy))
	f.Add(seq(create, resolve, ev, qattr, opt, destroy))
	f.Add(seq(create, create, bind, listen, ev))
	s, _ := newService(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		m := newMem()
		file, err := s.Open(m, 1)
		if err != nil {
			t.Fatal(err)
		}
		for len(in) >= 2 {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			n = min(n, len(in))
			w := in[:n]
			in = in[n:]
			got, err := file.Write(w)
			if err != nil {
				var e unix.Errno
				if !errors.As(err, &e) {
					t.Fatalf("error without errno: %v", err)
				}
				continue
			}
			if got != len(w) {
				t.Fatalf("write of %d returned %d", len(w), got)
			}
		}
		file.Close()
		if n := s.Contexts(); n != 0 {
			t.Fatalf("%d contexts after close", n)
		}
	})
}

// TestDestroyTakesBackTheCount: an event dropped unread with its ID
// leaves nothing counted on the event file: poll does not report it and a
// waiting GET_EVENT does not wake for it.
func TestDestroyTakesBackTheCount(t *testing.T) {
	s, lb := newService(t)
	c := open(t, s, 1)
	defer c.f.Close()
	id := c.createID(cma.PSTCP, 1)
	if err := c.write(cmdBuf(uverbs.UcmCmdResolveIP, uverbs.UcmResolveIP{Id: id, Dst_addr: sin(netip.AddrPortFrom(lb.B.IP, 7174)), Timeout_ms: 2000}, 0)); err != nil {
		t.Fatal(err)
	}
	fd := int(c.f.EventFile().Fd())
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 5000); n != 1 || err != nil {
		t.Fatalf("poll for ADDR_RESOLVED: %d, %v", n, err)
	}
	if err := c.write(cmdBuf(uverbs.UcmCmdDestroyID, uverbs.UcmDestroyID{Id: id, Response: respAt}, 4)); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Poll(pfd, 0); n != 0 || err != nil {
		t.Fatalf("poll after the ID went: %d, %v; want nothing readable", n, err)
	}
}
