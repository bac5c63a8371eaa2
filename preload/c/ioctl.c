/*
 * ioctl.c: RDMA_VERBS_IOCTL on a uverbs descriptor (the kernel's
 * ib_uverbs_ioctl), the ABI libibverbs takes where the kernel offers it:
 * the header and its attributes go to the daemon (OP_IOCTL), which reads
 * the attributes' buffers in this process's memory and writes their
 * outputs there itself, as it does a write() command's response. An
 * attribute that hands over a file (the async event file of
 * ASYNC_EVENT_ALLOC) arrives as a write()'s files do, its number stored in
 * the attribute's data.
 *
 * SOFTROCE_VERBS_ABI=write in the environment makes the ioctl ENOTTY, as
 * a kernel without the ioctl framework answers: libibverbs then uses the
 * legacy write() commands.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include "softroce_preload.h"

/* Frame layout: package preload, proto.go. */
#define OP_IOCTL 6
/* The kernel's bound on hdr.length (PAGE_SIZE). */
#define IOCTL_MAX 4096

static int abi_write = -1; /* SOFTROCE_VERBS_ABI=write, read once */

int verbs_ioctl_on(void)
{
	int w = __atomic_load_n(&abi_write, __ATOMIC_RELAXED);
	if (w < 0) {
		const char *v = getenv("SOFTROCE_VERBS_ABI");
		w = v && strcmp(v, "write") == 0;
		__atomic_store_n(&abi_write, w, __ATOMIC_RELAXED);
	}
	return !w;
}

/* reg_mr_range finds the buffer of a REG_MR that INVOKE_WRITE carries
 * (n bytes of header and attributes at p): 1 and its start and length in
 * r, else 0; 0 too for an on-demand paging MR, whose pages are not
 * pinned and so stay the program's (as share_reg_mr on the write path). */
static int reg_mr_range(const unsigned char *p, size_t n, uint64_t r[2])
{
	const struct ib_uverbs_ioctl_hdr *hdr = (const void *)p;
	const struct ib_uverbs_attr *a = (const void *)(p + sizeof(*hdr));
	const struct ib_uverbs_attr *in = NULL;
	int reg = 0;
	struct ib_uverbs_reg_mr cmd;

	if (n < sizeof(*hdr) || hdr->object_id != UVERBS_OBJECT_DEVICE ||
	    hdr->method_id != UVERBS_METHOD_INVOKE_WRITE)
		return 0;
	for (size_t i = 0; i < (n - sizeof(*hdr)) / sizeof(*a); i++) {
		if (a[i].attr_id == UVERBS_ATTR_WRITE_CMD && a[i].len == sizeof(uint64_t))
			reg = a[i].data == IB_USER_VERBS_CMD_REG_MR;
		else if (a[i].attr_id == UVERBS_ATTR_CORE_IN)
			in = &a[i];
	}
	if (!reg || !in || in->len < sizeof(cmd) ||
	    !fake_readable((const void *)(uintptr_t)in->data, sizeof(cmd)))
		return 0;
	memcpy(&cmd, (const void *)(uintptr_t)in->data, sizeof(cmd));
	if (cmd.access_flags & IB_UVERBS_ACCESS_ON_DEMAND)
		return 0;
	r[0] = cmd.start;
	r[1] = cmd.length;
	return 1;
}

int verbs_ioctl(int s, void *arg)
{
	uint64_t share[2];
	struct {
		uint64_t arg;
		unsigned char buf[IOCTL_MAX];
	} req;
	struct ib_uverbs_ioctl_hdr hdr;
	size_t n = sizeof(hdr);
	int r;

	/* copy_from_user of the header. */
	if (!fake_readable(arg, sizeof(hdr))) {
		errno = EFAULT;
		return -1;
	}
	memcpy(&hdr, arg, sizeof(hdr));
	/* The attributes when the length is one the kernel takes and they
	 * can be read: else the header alone, and the daemon answers as the
	 * kernel does (EINVAL for the length, EFAULT for the attributes). */
	if (hdr.length <= IOCTL_MAX &&
	    hdr.length == sizeof(hdr) + (size_t)hdr.num_attrs * sizeof(struct ib_uverbs_attr) &&
	    fake_readable(arg, hdr.length))
		n = hdr.length;
	req.arg = (uint64_t)(uintptr_t)arg;
	memcpy(req.buf, arg, n);
	r = uverbs_exchange(s, OP_IOCTL, &req, sizeof(req.arg) + n,
			    reg_mr_range(req.buf, n, share) ? share : NULL);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return r;
}
