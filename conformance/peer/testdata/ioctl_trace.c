/*
 * ioctl_trace.c: an LD_PRELOAD library that records each
 * ioctl(RDMA_VERBS_IOCTL) a program makes, in order, one line each to the
 * file $IOCTL_TRACE (appended):
 *
 *	OBJECT METHOD WRITE_CMD ERRNO
 *
 * the header's object and method ids, the write command INVOKE_WRITE
 * carries (-1 for other methods) and the call's errno (0 on success).
 * conformance/peer records with it the methods libibverbs calls on the
 * kernel's rxe; cmd/softroce compares the daemon's with them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_user_ioctl_cmds.h>

int ioctl(int fd, unsigned long req, ...)
{
	static int (*real)(int, unsigned long, ...);
	struct ib_uverbs_ioctl_hdr *h;
	long long cmd = -1;
	va_list ap;
	void *arg;
	int r, e, out;
	char line[96];

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	if (req != RDMA_VERBS_IOCTL || !getenv("IOCTL_TRACE"))
		return real(fd, req, arg);
	h = arg;
	if (h->object_id == UVERBS_OBJECT_DEVICE && h->method_id == UVERBS_METHOD_INVOKE_WRITE)
		for (int i = 0; i < h->num_attrs; i++)
			if (h->attrs[i].attr_id == UVERBS_ATTR_WRITE_CMD)
				cmd = (long long)h->attrs[i].data;
	r = real(fd, req, arg);
	e = r < 0 ? errno : 0;
	snprintf(line, sizeof(line), "%u %u %lld %d\n", h->object_id, h->method_id, cmd, e);
	out = open(getenv("IOCTL_TRACE"), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (out >= 0) {
		if (write(out, line, strlen(line)) < 0) {
		}
		close(out);
	}
	errno = e;
	return r;
}
