//go:build linux

package uverbs

import (
	"unsafe"
)

// Memory is a client's address space as copy_from_user and copy_to_user
// reach it. ReadAt and WriteAt fail with an error wrapping unix.EFAULT
// where the range is not mapped in the client.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
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
