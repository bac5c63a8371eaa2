// Package uverbs is the kernel side of one open of /dev/infiniband/uverbsN
// (struct ib_uverbs_file, drivers/infiniband/core/uverbs_main.c) for an
// emulated rxe device: the write() command ABI of <rdma/ib_user_verbs.h>,
// per-file handle tables, every command mapped onto package emu with the
// kernel's errnos, and rxe's queue ABI of <rdma/rdma_user_rxe.h> (queues in
// memory the client maps).
//
// The structures of both headers come from the installed uapi headers
// through cgo -godefs (types_linux.go is the input, ztypes_linux.go the
// output; a test checks every size and offset against the C compiler).
// A daemon serves one File per client: it passes the client's write()
// bytes to File.Write, its mmap() to File.Mmap, and calls File.Close when the
// client goes away.
package uverbs
