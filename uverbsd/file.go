// Package uverbsd is the softroce daemon: it serves one emulated device
// (emu.Device) to unmodified libibverbs programs as the kernel's ib_uverbs
// and rxe serve a real one.
//
//	program ── libibverbs + librxe (the distribution's, unmodified)
//	   └─ the preload library (package preload): /dev/infiniband/uverbs0
//	        is a SOCK_SEQPACKET connection to the daemon's socket
//	             └─ Server: one goroutine per connection, one File (the
//	                  kernel's struct ib_uverbs_file) per open, the
//	                  program's memory through process_vm_readv/writev
//	                  (commands), and for MRs the pages it shared
//	                  (shared.go) or else its /proc/PID/mem
//
// The daemon keeps its socket and the sysfs tree libibverbs reads
// (SYSFS_PATH) in one private directory (mode 0700). Every client is
// treated as hostile: frames are bounded and checked before use, a
// client's memory is reached only at the addresses its command names, and a
// connection's end (the process closed its last descriptor, exited or was
// killed) closes its File, which tears its objects down as
// ib_uverbs_close does.
package uverbsd

import (
	"os"

	"github.com/softroce/softroce/emu"
)

// Memory is a client's address space as copy_from_user/copy_to_user reach
// it. ReadAt and WriteAt fail with an error wrapping unix.EFAULT where the
// range is not mapped in the client.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
	WriteAt(p []byte, addr uint64) (int, error)
}

// File is one open of /dev/infiniband/uverbs0: the command ABI behind it
// (package uverbs implements it).
type File interface {
	// Write is write(cmd_fd, buf); the response goes to the client's
	// Memory. It returns write()'s result, or an error wrapping the errno.
	Write(buf []byte) (Reply, error)
	// Mmap is mmap(cmd_fd, offset, length): the file and the offset in it
	// the client maps instead.
	Mmap(offset, length uint64) (file *os.File, fileOffset int64, err error)
	// Close is the last close (ib_uverbs_close).
	Close() error
}

// Ioctler is implemented by a File that serves ioctl(RDMA_VERBS_IOCTL):
// Ioctl is that ioctl with its header at client address arg and buf the
// header and attributes; its outputs go to the client's Memory. The
// Reply's N is 0. A File without it answers ENOTTY.
type Ioctler interface {
	Ioctl(arg uint64, buf []byte) (Reply, error)
}

// FilesStorer is implemented by a File that needs the numbers the client
// received for the files a Write passed (a completion channel is named by
// its number in later commands). FilesStored is called with them, in
// PassFile order, after the client stored them at each PassFile.At and
// before its write() returns.
type FilesStorer interface {
	FilesStored(fds []uint32)
}

// Reply is the result of a File's Write.
type Reply struct {
	N     int        // write()'s return value
	Files []PassFile // files handed to the client
}

// PassFile is one file handed to the client with a Write's reply.
type PassFile struct {
	File *os.File // the daemon keeps this one; the client gets a dup
	At   uint64   // client address of the __u32 that receives the client's fd number
}

// Opener opens a File on dev for a client whose memory is mem.
type Opener func(dev *emu.Device, mem Memory) File
