/*
 * softroce_preload.h: what the library's files share. softroce_preload.c
 * holds the device files (open, write, mmap, close and the rest); each
 * further file presents one more kernel interface and declares here what
 * the others call. What they share is hidden from the program (not
 * exported), so that it interposes on none of the program's symbols.
 */
#ifndef SOFTROCE_PRELOAD_H
#define SOFTROCE_PRELOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SOFTROCE_HIDDEN __attribute__((visibility("hidden")))

/* Frame layout: package preload, proto.go. */
#define PROTO_VERSION 1
#define OP_OPEN 1
#define OP_WRITE 2
#define OP_MMAP 3
#define OP_FDS 4
#define OP_SHARE 5
#define OP_IOCTL 6
#define OP_READ 7
#define FEATURE_EVENT_FD 8
#define IOCTL_ARG_UNREADABLE 1
#define FEATURE_SHARE_PAGES 1
#define FEATURE_ONE_WAY_DOORBELLS 2
#define FEATURE_WATCH_PAGE 4
#define WATCH_HANDLES 1024
#define WRITE_ONE_WAY 1
#define AUX_SYNC_DOORBELLS 1
#define MAX_ONE_WAY_RUN 64
#define MAX_PAYLOAD (1u << 16)
#define MAX_FDS 8
#define NAME_MAX_LEN 64

/* A frame's header: package preload, proto.go. */
struct frame_hdr {
	uint32_t op;
	uint32_t len;
	int32_t ret;
	uint32_t aux;
};

/* softroce_preload.c, on the fake descriptor of slot s (held): */
/* fake_xfer sends one frame on its connection and receives the reply
 * (files passed with it are closed); 0 or -errno of the transport. */
SOFTROCE_HIDDEN int fake_xfer(int s, struct frame_hdr *h, const void *payload, void *rbuf, uint32_t rcap, struct frame_hdr *rh);
/* fake_take_event takes one count from its eventfd, waiting unless the
 * file is O_NONBLOCK; 0 or -errno (EAGAIN, EINTR, EIO: the daemon gone). */
SOFTROCE_HIDDEN int fake_take_event(int s);
/* fake_give_event puts a count taken back. */
SOFTROCE_HIDDEN void fake_give_event(int s);
/* fake_readable and fake_writable report whether n bytes at p can be read
 * (written) without a fault, as copy_from_user (copy_to_user) would. */
SOFTROCE_HIDDEN int fake_readable(const void *p, size_t n);
SOFTROCE_HIDDEN int fake_writable(void *p, size_t n);

/* umad.c: write, read and ioctl on a /dev/infiniband/umadN file. */
SOFTROCE_HIDDEN ssize_t umad_write(int s, const void *buf, size_t n);
SOFTROCE_HIDDEN ssize_t umad_read(int s, void *buf, size_t n);
SOFTROCE_HIDDEN int umad_ioctl(int s, unsigned long req, void *arg);

/* softroce_preload.c: the tree's name of a kernel RDMA sysfs path
 * (/sys/class/infiniband, infiniband_verbs, infiniband_mad), written
 * into buf, or NULL where path is none or the tree is not set. */
SOFTROCE_HIDDEN const char *tree_path(const char *path, char *buf, size_t n);

/* sysfs_view.c: tree_path of path where the real call on it failed
 * (failed nonzero) with ENOENT, else NULL; errno is kept. */
SOFTROCE_HIDDEN const char *tree_retry(const char *path, int failed, char *buf, size_t n);

/* softroce_preload.c */

/* uverbs_exchange sends one request (op, payload of len bytes) on uverbs
 * slot s (held: see hold), takes the files its reply passes as a write's
 * are (their numbers stored at the addresses the reply names, OP_FDS),
 * and returns the reply's result (>= 0) or -errno. share, if not NULL, is
 * the start and length of a REG_MR's buffer, whose pages are shared with
 * the daemon first, as before a REG_MR write (see "Shared MR pages"). */
SOFTROCE_HIDDEN int uverbs_exchange(int s, uint32_t op, const void *payload, uint32_t len,
				    const uint64_t *share);

/* ioctl.c */

/* verbs_ioctl_on: whether RDMA_VERBS_IOCTL goes to the daemon; with
 * SOFTROCE_VERBS_ABI=write it is ENOTTY, as on a kernel without the ioctl
 * framework, and libibverbs uses the write() ABI. */
SOFTROCE_HIDDEN int verbs_ioctl_on(void);

/* verbs_ioctl is ioctl(fd, RDMA_VERBS_IOCTL, arg) on uverbs slot s
 * (held): -1 with errno set, or the kernel's result. */
SOFTROCE_HIDDEN int verbs_ioctl(int s, void *arg);

#endif
