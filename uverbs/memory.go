//go:build linux

package uverbs

import (
	"unsafe"

	"github.com/softroce/softroce/emu/dma"
)

// Memory is a client's address space as copy_from_user and copy_to_user
// reach it. ReadAt and WriteAt fail with an error wrapping unix.EFAULT
// where the range is not mapped in the client.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
}

// MRSpacer is implemented by a Memory whose MRs the device reaches another
// way than the commands reach the client (the kernel reaches an MR through
// the pages ib_umem_get pinned, not through copy_from_user): a PD's user
// MRs lie in MRSpace (emu.PD.Space). A Memory without it is its own.
type MRSpacer interface {
	MRSpace() dma.Space
}

// mrSpace is the space the user MRs of f's PDs lie in.
func (f *File) mrSpace() dma.Space {
	if s, ok := f.mem.(MRSpacer); ok {
		return s.MRSpace()
	}
	return f.mem
}

// bytesOf returns the memory of *v as a byte slice (the uapi structures are
// in the host's byte order, as the kernel and the client see them).
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// load decodes a T from b: a shorter b leaves the rest zero, as
// uverbs_request does for a short command.
func load[T any](b []byte) T {
	var v T
	copy(bytesOf(&v), b)
	return v
}
