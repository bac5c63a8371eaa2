//go:build linux

package uverbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"golang.org/x/sys/unix"
)

// fakeMem is a client's address space for tests: one buffer at a base
// address; everything else is unmapped (EFAULT).
type fakeMem struct {
	mu      sync.Mutex
	base    uint64
	buf     []byte
	onWrite func(addr uint64) // if set, told of each WriteAt before it copies
}

func (m *fakeMem) rng(addr uint64, n int) ([]byte, error) {
	if addr < m.base || addr-m.base > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-(addr-m.base) {
		return nil, fmt.Errorf("fake memory %#x+%d: %w", addr, n, unix.EFAULT)
	}
	return m.buf[addr-m.base : addr-m.base+uint64(n)], nil
}

func (m *fakeMem) ReadAt(p []byte, addr uint64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.rng(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}

func (m *fakeMem) WriteAt(p []byte, addr uint64) (int, error) {
	if m.onWrite != nil {
		m.onWrite(addr)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.rng(addr, len(p))
	if err != nil {
		return 0, err
	}
	return copy(b, p), nil
}

// loopLink is a link whose frames come back to the sender: one device
// reaches its own GIDs, as rxe loops back a local destination.
type loopLink struct {
	ch     chan []byte
	closed atomic.Bool
	once   sync.Once
	done   chan struct{}
}

func newLoopLink() *loopLink {
	return &loopLink{ch: make(chan []byte, 4096), done: make(chan struct{})}
}

func (l *loopLink) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	select {
	case f := <-l.ch:
		sizes[0] = copy(bufs[0], f)
		return 1, nil
	case <-l.done:
		return 0, net.ErrClosed
	}
}

func (l *loopLink) WritePackets(bufs [][]byte) (int, error) {
	for i, b := range bufs {
		if l.closed.Load() {
			return i, net.ErrClosed
		}
		select {
		case l.ch <- append([]byte(nil), b...):
		default: // a full queue drops, as a busy wire would
		}
	}
	return len(bufs), nil
}

func (l *loopLink) BatchSize() int { return 1 }
func (l *loopLink) MTU() int       { return 1500 }
func (l *loopLink) Close() error {
	l.once.Do(func() { l.closed.Store(true); close(l.done) })
	return nil
}

// selfResolver resolves every GID to the device's own MAC.
type selfResolver [6]byte

func (r selfResolver) Resolve(context.Context, netip.Addr) ([6]byte, error) { return r, nil }

var testMAC = [6]byte{2, 0, 0, 0, 0, 1}
var testIP = netip.AddrFrom4([4]byte{10, 0, 0, 1})

// newDevice returns an rxe device on a loopback link.
func newDevice(t *testing.T) *emu.Device { return newDeviceFor(t) }

func newDeviceFor(t testing.TB) *emu.Device { return newRxeDevice(t, false).Device }

// newRxeDevice returns an rxe device on a loopback link; with loopback the
// device itself loops its frames back (rxe.Config.Loopback) and they never
// reach the link.
func newRxeDevice(t testing.TB, loopback bool) *rxe.Device {
	t.Helper()
	l := newLoopLink()
	dev, err := rxe.New(rxe.Config{Link: l, Loopback: loopback, Device: emu.Config{Name: "rxe0",
		NetDev:   emu.NetDev{Name: "eth0", MAC: net.HardwareAddr(testMAC[:]), Addrs: []netip.Addr{testIP}},
		Resolver: selfResolver(testMAC)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dev
}

// client is a test client: a File and its memory, driven with the bytes
// libibverbs writes.
type client struct {
	t    testing.TB
	f    *File
	mem  *fakeMem
	resp uint64 // the response area
}

const clientBase = 0x7f0000000000

func newClient(t testing.TB, dev *emu.Device) *client {
	m := &fakeMem{base: clientBase, buf: make([]byte, 1<<20)}
	c := &client{t: t, f: Open(dev, m), mem: m, resp: clientBase + 0x80000}
	t.Cleanup(func() { c.f.Close() })
	return c
}

// command builds a legacy write: header, the request (whose first field
// the caller left for the response pointer when resp > 0), the driver's
// request, with out_words covering resp+drvResp bytes.
func legacy(cmd uint32, req []byte, drvIn []byte, respLen int) []byte {
	b := make([]byte, hdrSize, hdrSize+len(req)+len(drvIn))
	b = append(b, req...)
	b = append(b, drvIn...)
	h := CmdHdr{Command: cmd, In_words: uint16(len(b) / 4), Out_words: uint16(respLen / 4)}
	copy(b, bytesOf(&h))
	return b
}

// do writes a legacy command whose request is *req (its response pointer,
// if any, set to c.resp) and returns the response bytes.
func do[T any](c *client, cmd uint32, req *T, respLen int) ([]byte, Reply, error) {
	b := bytesOf(req)
	if respLen > 0 {
		binary.NativeEndian.PutUint64(b, c.resp)
	}
	r, err := c.f.Write(legacy(cmd, b, nil, respLen))
	out := make([]byte, respLen)
	c.mem.ReadAt(out, c.resp)
	return out, r, err
}

// must is do that fails the test on an error.
func must[T any](c *client, cmd uint32, req *T, respLen int) ([]byte, Reply) {
	c.t.Helper()
	out, r, err := do(c, cmd, req, respLen)
	if err != nil {
		c.t.Fatalf("command %d: %v", cmd, err)
	}
	return out, r
}

// mapQueue maps a queue the way librxe does: mmap of the cmd fd at the
// mminfo's offset.
func (c *client) mapQueue(mi Mminfo) []byte {
	c.t.Helper()
	file, off, err := c.f.Mmap(mi.Offset, uint64(mi.Size))
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := unix.Mmap(int(file.Fd()), off, int(mi.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// ring is the client's view of a mapped rxe queue (librxe's rxe_queue.h).
type ring []byte

func (r ring) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r[off])) }
func (r ring) mask() uint32         { return atomic.LoadUint32(r.word(qbIndexMask)) }
func (r ring) slotAt(i uint32) []byte {
	es := 1 << atomic.LoadUint32(r.word(qbLog2))
	off := qbHdr + int(i&r.mask())*es
	return r[off : off+es]
}

// produce writes one element and publishes it.
func (r ring) produce(elem []byte) bool {
	p, c := atomic.LoadUint32(r.word(qbProducer)), atomic.LoadUint32(r.word(qbConsumer))
	if (p+1)&r.mask() == c {
		return false
	}
	copy(r.slotAt(p), elem)
	atomic.StoreUint32(r.word(qbProducer), (p+1)&r.mask())
	return true
}

// poll takes one completion, waiting up to a few seconds for it.
func (r ring) poll(t testing.TB) Wc {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p, c := atomic.LoadUint32(r.word(qbProducer)), atomic.LoadUint32(r.word(qbConsumer))
		if p != c {
			wc := load[Wc](r.slotAt(c))
			atomic.StoreUint32(r.word(qbConsumer), (c+1)&r.mask())
			return wc
		}
		time.Sleep(time.Microsecond)
	}
	t.Fatal("no completion")
	return Wc{}
}

// empty reports whether no completion is waiting.
func (r ring) empty() bool {
	return atomic.LoadUint32(r.word(qbProducer)) == atomic.LoadUint32(r.word(qbConsumer))
}

// errnoIs checks that err wraps want.
func errnoIs(t *testing.T, err error, want unix.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}
