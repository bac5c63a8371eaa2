package uverbsd

import (
	"os"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ucma"
	"github.com/softroce/softroce/uverbs"
	"golang.org/x/sys/unix"
)

// OpenUverbs is the Opener of a real daemon (Config.Open's default):
// package uverbs's File, the kernel's uverbs command ABI and rxe's queues
// on dev.
func OpenUverbs(dev *emu.Device, mem Memory) File { return uverbsFile{uverbs.Open(dev, mem)} }

// uverbsFile adapts *uverbs.File to File.
type uverbsFile struct{ f *uverbs.File }

func (u uverbsFile) Write(buf []byte) (Reply, error) {
	r, err := u.f.Write(buf)
	out := Reply{N: r.N}
	for _, pf := range r.Files {
		out.Files = append(out.Files, PassFile{File: pf.File, At: pf.At})
	}
	return out, err
}

func (u uverbsFile) Ioctl(arg uint64, buf []byte) (Reply, error) {
	r, err := u.f.Ioctl(arg, buf)
	out := Reply{}
	for _, pf := range r.Files {
		out.Files = append(out.Files, PassFile{File: pf.File, At: pf.At})
	}
	return out, err
}

func (u uverbsFile) Mmap(offset, length uint64) (*os.File, int64, error) {
	return u.f.Mmap(offset, length)
}

func (u uverbsFile) Close() error { return u.f.Close() }

var _ doorbeller = uverbsFile{}

// Doorbell forwards a doorbell the client did not wait for (uverbs.File.Doorbell).
func (u uverbsFile) Doorbell(handle uint32) (int, error) { return u.f.Doorbell(handle) }

// SetSettle forwards the daemon's Config.Settle (uverbs.File.SetSettle).
func (u uverbsFile) SetSettle(settle func(fn func())) { u.f.SetSettle(settle) }

// SetCheck forwards the checker of the client's program.
func (u uverbsFile) SetCheck(p *check.Program) { u.f.SetCheck(p) }

// FilesStored forwards the client's descriptor numbers.
func (u uverbsFile) FilesStored(fds []uint32) { u.f.FilesStored(fds) }

// ucmaFile adapts *ucma.File to File: rdma_cm has no mmap.
type ucmaFile struct{ f *ucma.File }

func (u ucmaFile) Write(buf []byte) (Reply, error) {
	n, err := u.f.Write(buf)
	return Reply{N: n}, err
}

func (u ucmaFile) Mmap(offset, length uint64) (*os.File, int64, error) {
	return nil, 0, unix.ENODEV
}

func (u ucmaFile) Close() error { return u.f.Close() }

func (u uverbsFile) Disassociate() error { return u.f.Disassociate() }
