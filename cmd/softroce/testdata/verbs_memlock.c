/*
 * verbs_memlock: ibv_reg_mr charges the pages it pins to the program's
 * RLIMIT_MEMLOCK, as the kernel's ib_umem_get charges the caller's
 * pinned_vm, through the distribution's libibverbs and librxe on the
 * device argv[1]. The program must run with RLIMIT_MEMLOCK of 8 MiB and
 * without CAP_IPC_LOCK:
 *   - MRs of 4 MiB and then 3 MiB (7 MiB pinned) register;
 *   - one more of 2 MiB is ENOMEM, and so are MRs of 64 MiB and of 1 GiB;
 *   - after the 4 MiB MR's deregistration the 2 MiB one registers;
 *   - an MR of 2^62 bytes is EINVAL (more pages than ib_umem_get takes).
 *   - with RLIMIT_MEMLOCK 0, an MR of one page is EPERM (can_do_mlock),
 *     and an on-demand paging MR of 1 GiB registers (nothing pinned).
 * Prints "ok NAME" per check; exits 0, or 1 after a "FAIL NAME: why".
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/resource.h>

#include "verbs.h"

#define MiB (1024UL * 1024)

static struct ibv_mr *reg(struct ibv_pd *pd, void *buf, size_t len)
{
	errno = 0;
	return ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	struct ibv_pd *pd;
	struct ibv_mr *a, *b, *c;
	char *buf;
	const size_t span = 1024 * MiB + 64 * MiB;

	open_device(argc > 1 ? argv[1] : NULL);
	MUST("getrlimit", getrlimit(RLIMIT_MEMLOCK, &rl) == 0);
	MUST("RLIMIT_MEMLOCK is 8 MiB", rl.rlim_cur == 8 * MiB);
	pd = ibv_alloc_pd(ctx);
	MUST("alloc pd", pd);
	/* Sparse private memory: registering it touches no page here. */
	buf = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	MUST("mmap", buf != MAP_FAILED);

	a = reg(pd, buf, 4 * MiB);
	CHECK("ibv_reg_mr of 4 MiB within the limit", a != NULL, "errno %d %s", errno, strerror(errno));
	b = reg(pd, buf + 4 * MiB, 3 * MiB);
	CHECK("ibv_reg_mr of 3 MiB more within the limit", b != NULL, "errno %d %s", errno, strerror(errno));
	c = reg(pd, buf + 8 * MiB, 2 * MiB);
	CHECK("ibv_reg_mr of 2 MiB more past the limit is ENOMEM", !c && errno == ENOMEM, "mr %p errno %d %s",
	      (void *)c, errno, strerror(errno));
	c = reg(pd, buf + 16 * MiB, 64 * MiB);
	CHECK("ibv_reg_mr of 64 MiB is ENOMEM", !c && errno == ENOMEM, "mr %p errno %d %s", (void *)c, errno,
	      strerror(errno));
	c = reg(pd, buf + 64 * MiB, 1024 * MiB);
	CHECK("ibv_reg_mr of 1 GiB is ENOMEM", !c && errno == ENOMEM, "mr %p errno %d %s", (void *)c, errno,
	      strerror(errno));
	CHECK("ibv_dereg_mr of the 4 MiB MR", a && ibv_dereg_mr(a) == 0, "errno %d %s", errno, strerror(errno));
	c = reg(pd, buf + 8 * MiB, 2 * MiB);
	CHECK("ibv_reg_mr of 2 MiB after the deregistration", c != NULL, "errno %d %s", errno, strerror(errno));
	a = reg(pd, buf, 1UL << 62);
	CHECK("ibv_reg_mr of 2^62 bytes is EINVAL", !a && errno == EINVAL, "mr %p errno %d %s", (void *)a, errno,
	      strerror(errno));
	if (b)
		ibv_dereg_mr(b);
	if (c)
		ibv_dereg_mr(c);
	rl.rlim_cur = 0;
	MUST("setrlimit RLIMIT_MEMLOCK 0", setrlimit(RLIMIT_MEMLOCK, &rl) == 0);
	a = reg(pd, buf, 4096);
	CHECK("ibv_reg_mr with RLIMIT_MEMLOCK 0 is EPERM", !a && errno == EPERM, "mr %p errno %d %s", (void *)a,
	      errno, strerror(errno));
	errno = 0;
	a = ibv_reg_mr(pd, buf, 1024 * MiB, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	CHECK("an ODP MR of 1 GiB pins nothing: it registers with RLIMIT_MEMLOCK 0", a != NULL, "errno %d %s", errno,
	      strerror(errno));
	if (a)
		ibv_dereg_mr(a);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
