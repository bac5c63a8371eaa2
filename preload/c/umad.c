/*
 * umad.c: /dev/infiniband/umadN, the kernel's ib_umad file, as libibumad
 * (perfquery, ibstat's umad_open_port) uses it. open() is the library's
 * (fake_open): the daemon answers OPEN of "umad0" with an eventfd counting
 * the packets queued for read(), which is the descriptor the program gets,
 * so that poll() waits for a MAD as on the kernel's file. Here:
 *
 *   write: the whole buffer to the daemon (struct ib_user_mad and the
 *       MAD), which answers as ib_umad_write; a buffer that cannot be
 *       read is EFAULT, nothing sent;
 *   read: one count from the eventfd (waiting unless O_NONBLOCK: then
 *       EAGAIN), then the daemon's packet; where the read fails (the
 *       buffer too small: EINVAL; not writable: EFAULT) the packet stays
 *       queued and the count is given back, as ib_umad_read requeues it;
 *   ioctl: the request and its _IOC_SIZE bytes of argument to the daemon,
 *       which answers as ib_umad_ioctl (REGISTER_AGENT, REGISTER_AGENT2,
 *       UNREGISTER_AGENT, ENABLE_PKEY; anything else ENOTTY); what it
 *       sends back is stored at the argument.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include "softroce_preload.h"

/* The largest packet the daemon sends: a header and one MAD (256 bytes);
 * a larger read() buffer gets that much. */
#define UMAD_MAX_READ 512
/* The largest ioctl argument passed (ib_user_mad_reg_req2 is 40 bytes). */
#define UMAD_MAX_ARG 256

ssize_t umad_write(int s, const void *buf, size_t n)
{
	struct frame_hdr h = {.op = OP_WRITE, .len = (uint32_t)n}, rh;
	int err;

	if (!fake_readable(buf, n)) {
		errno = EFAULT;
		return -1;
	}
	err = fake_xfer(s, &h, buf, NULL, 0, &rh);
	if (err < 0) {
		errno = -err;
		return -1;
	}
	if (rh.ret < 0) {
		errno = -rh.ret;
		return -1;
	}
	return rh.ret;
}

ssize_t umad_read(int s, void *buf, size_t n)
{
	unsigned char rbuf[UMAD_MAX_READ];
	uint32_t count = n > UMAD_MAX_READ ? UMAD_MAX_READ : (uint32_t)n;
	struct frame_hdr h = {.op = OP_READ, .len = sizeof(count)}, rh;
	int err;

	for (;;) {
		err = fake_take_event(s);
		if (err < 0) {
			errno = -err;
			return -1;
		}
		err = fake_xfer(s, &h, &count, rbuf, sizeof(rbuf), &rh);
		if (err < 0) {
			errno = -err;
			return -1;
		}
		/* A count whose packet went away: wait for the next. */
		if (rh.ret != -EAGAIN)
			break;
	}
	if (rh.ret < 0) {
		fake_give_event(s);
		errno = -rh.ret;
		return -1;
	}
	if ((uint32_t)rh.ret != rh.len || rh.len > count) {
		errno = EIO;
		return -1;
	}
	if (!fake_writable(buf, rh.len)) {
		/* The daemon took the packet off its queue: it is lost, where
		 * the kernel requeues it. */
		errno = EFAULT;
		return -1;
	}
	memcpy(buf, rbuf, rh.len);
	return rh.ret;
}

int umad_ioctl(int s, unsigned long req, void *arg)
{
	unsigned char p[4 + UMAD_MAX_ARG], rbuf[UMAD_MAX_ARG];
	uint32_t r32 = (uint32_t)req;
	size_t size = _IOC_SIZE(req);
	struct frame_hdr h = {.op = OP_IOCTL}, rh;
	int err;

	if (size > UMAD_MAX_ARG || req != (unsigned long)r32)
		size = 0; /* no request of ib_umad's: ENOTTY */
	memcpy(p, &r32, 4);
	if (size && fake_readable(arg, size)) {
		memcpy(p + 4, arg, size);
		h.len = 4 + size;
	} else {
		h.len = 4;
		if (size)
			h.aux = IOCTL_ARG_UNREADABLE;
	}
	err = fake_xfer(s, &h, p, rbuf, sizeof(rbuf), &rh);
	if (err < 0) {
		errno = -err;
		return -1;
	}
	if (rh.len > 0) {
		if (rh.len > size) {
			errno = EIO;
			return -1;
		}
		if (!fake_writable(arg, rh.len)) {
			errno = EFAULT;
			return -1;
		}
		memcpy(arg, rbuf, rh.len);
	}
	if (rh.ret < 0) {
		errno = -rh.ret;
		return -1;
	}
	return rh.ret;
}
