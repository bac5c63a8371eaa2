package uverbsd

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/node"
)

// umadOps drives f with the operations b encodes, one after another: a
// byte choosing the operation (0 write, 1 ioctl, 2 read), a length byte,
// then twice that many bytes (a write's buffer, an ioctl's request and
// argument; nothing for a read, whose count is twice the length).
func umadOps(t *testing.T, f *umadFile, b []byte) {
	for len(b) >= 2 {
		op, n := b[0]%3, 2*int(b[1])
		b = b[2:]
		if op == 2 {
			p, err := f.Read(n)
			if err == nil && len(p) > n {
				t.Fatalf("read of %d returned %d bytes", n, len(p))
			}
			checkErrno(t, "read", err)
			continue
		}
		n = min(n, len(b))
		arg := b[:n]
		b = b[n:]
		if op == 0 {
			r, err := f.Write(arg)
			if err == nil && r.N != len(arg) {
				t.Fatalf("write of %d returned %d", len(arg), r.N)
			}
			checkErrno(t, "write", err)
			continue
		}
		if len(arg) < 4 {
			continue
		}
		reqs := []uint32{umadRegisterAgent, umadRegisterAgent2, umadUnregisterAgent, umadEnablePKey, binary.NativeEndian.Uint32(arg)}
		req := reqs[int(arg[0])%len(reqs)]
		out, err := f.Ioctl(req, arg[4:], arg[1]&1 == 0)
		if len(out) > len(arg[4:]) {
			t.Fatalf("ioctl %#x of %d bytes stores %d", req, len(arg)-4, len(out))
		}
		checkErrno(t, "ioctl", err)
	}
}

// checkErrno fails unless err is nil or one of ib_umad's errnos.
func checkErrno(t *testing.T, op string, err error) {
	if err == nil {
		return
	}
	var e unix.Errno
	if !errors.As(err, &e) {
		t.Fatalf("%s: %v carries no errno", op, err)
	}
	switch e {
	case unix.EINVAL, unix.EFAULT, unix.ENOTTY, unix.ENOMEM, unix.EPROTONOSUPPORT, unix.EAGAIN:
	default:
		t.Fatalf("%s: errno %v", op, e)
	}
}

// umadSeed is a registration of a PMA agent then a Get of
// PortCountersExtended to gid, then a read, in umadOps' encoding.
func umadSeed(gid [16]byte) []byte {
	reg := make([]byte, 4+umadRegReq2Size)
	binary.NativeEndian.PutUint32(reg, umadRegisterAgent2)
	reg[0], reg[1] = 1, 0 // umadOps: REGISTER_AGENT2, its argument readable
	binary.NativeEndian.PutUint32(reg[4+4:], 1)
	reg[4+8], reg[4+9] = mad.ClassPerfMgmt, 1
	var h umadHdr
	h.TimeoutMS, h.QPN, h.GRHPresent, h.GID = 100, 1, 1, gid
	w := make([]byte, umadHdrSize+64)
	h.put(w, umadHdrSize)
	m := w[umadHdrSize:]
	m[0], m[1], m[2], m[3] = 1, mad.ClassPerfMgmt, 1, mad.MethodGet
	binary.BigEndian.PutUint16(m[16:], uint16(mad.AttrPortCountersExtended))
	b := append([]byte{1, byte(len(reg) / 2)}, reg...)
	b = append(b, 0, byte(len(w)/2))
	b = append(b, w...)
	return append(b, 2, 200)
}

// FuzzUmadFile: no sequence of writes, ioctls and reads makes the umad
// file panic, answer other than ib_umad's errnos, read more than asked,
// or store more than the argument holds.
func FuzzUmadFile(f *testing.F) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1, MAC: []byte{2, 0, 0, 0, 0, 9}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	e, err := n.Device().QueryGID(1, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(umadSeed([16]byte(e.GID)))
	f.Add([]byte{1, 4, 3, 0x1b, 0, 0, 0, 0, 0, 0, 2, 10})
	f.Add([]byte{0, 255, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := newUmadFile(n.Device())
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		umadOps(t, u, b)
	})
}

// TestUmadAnswersAPMAGet: the seed's Get is answered with a GetResp read
// back behind the 64-byte header (REGISTER_AGENT2 enables it), from agent
// 0 with the request's TID under the agent's high half.
func TestUmadAnswersAPMAGet(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1, MAC: []byte{2, 0, 0, 0, 0, 9}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	e, err := n.Device().QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	u, err := newUmadFile(n.Device())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	s := umadSeed([16]byte(e.GID))
	umadOps(t, u, s[:len(s)-2])
	p, err := u.Read(umadHdrSize + mad.Size)
	if err != nil {
		t.Fatal(err)
	}
	h := parseUmadHdr(p, umadHdrSize)
	m := mad.MAD(p[umadHdrSize:])
	if len(p) != umadHdrSize+mad.Size || h.ID != 0 || h.Status != 0 || h.QPN != 1 || h.Length != uint32(len(p)) ||
		m[3] != mad.MethodGetResp || m.AttributeID() != mad.AttrPortCountersExtended || m.TransactionID()>>32 == 0 {
		t.Fatalf("answer %+v %x", h, p[umadHdrSize:umadHdrSize+24])
	}
	if _, err := u.Read(umadHdrSize + mad.Size); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("a second read: %v, want EAGAIN", err)
	}
}
