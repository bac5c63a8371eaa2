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

#define SOFTROCE_HIDDEN __attribute__((visibility("hidden")))

/* softroce_preload.c */

/* softroce_readable: whether n bytes at p can be read (see readable). */
SOFTROCE_HIDDEN int softroce_readable(const void *p, size_t n);

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
