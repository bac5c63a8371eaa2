// Package uverbs is the kernel side of one open of /dev/infiniband/uverbsN
// (struct ib_uverbs_file, drivers/infiniband/core/uverbs_main.c) for an
// emulated rxe device, so that unmodified libibverbs and librxe drive it:
//
//   - the write() command ABI of <rdma/ib_user_verbs.h>, legacy and
//     extended, with ib_uverbs_write's header checks and errnos (File.Write);
//   - the ioctl ABI of <rdma/rdma_user_ioctl_cmds.h> (File.Ioctl):
//     ib_uverbs_ioctl's header and attribute checks and errnos, and the
//     methods INVOKE_WRITE (any write command), GET_CONTEXT,
//     QUERY_CONTEXT, QUERY_PORT, INFO_HANDLES, QUERY_GID_TABLE,
//     QUERY_GID_ENTRY, ASYNC_EVENT_ALLOC, CQ_CREATE, QP_CREATE and the
//     *_DESTROY methods; the other methods are EPROTONOSUPPORT, on which
//     libibverbs runs the verb's write command through INVOKE_WRITE;
//   - a handle table per File (the file's idr): a handle of another File or
//     of a destroyed object names nothing (ENOENT, or EINVAL where the
//     kernel's uobj_get_obj_read fails);
//   - every command mapped onto package emu (the verbs core) with rxe's
//     driver data: the mmap info of its queues, AH numbers, SRQ numbers;
//   - rxe's queue ABI of <rdma/rdma_user_rxe.h>: send, receive, SRQ and
//     completion rings in memfds the client maps (File.Mmap), with the
//     indices as acquire/release atomics and every index from the client
//     masked. The POST_SEND command is the send ring's doorbell (the WRs
//     it may carry are checked as ib_uverbs_post_send unmarshals them,
//     and not used, as rxe_post_send of a user QP); the responder takes
//     receive WQEs from the rings itself (librxe posts receives with no
//     doorbell), and POST_RECV / POST_SRQ_RECV put the WRs they carry on
//     the ring as rxe's post_one_recv does; completions go to the CQ
//     rings;
//   - completion channels and the async event fd as SOCK_SEQPACKET socket
//     pairs, readable and pollable by the client as the kernel's event files;
//   - the client's memory behind its MRs: a PD's user MRs lie in the
//     File's Memory (emu.PD.Space, or the Memory's MRSpace), which the
//     daemon backs with the client's /proc/PID/mem (or
//     process_vm_readv/writev);
//   - File.Close as ib_uverbs_close: every object destroyed, peers see a QP
//     that vanished.
//
// The structures of these headers come from the installed uapi headers
// through cgo -godefs (types_linux.go is the input, ztypes_linux.go the
// output; a test checks every size and offset against the C compiler).
package uverbs
