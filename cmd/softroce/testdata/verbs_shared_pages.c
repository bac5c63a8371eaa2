/*
 * verbs_shared_pages: registered memory behaves as the kernel's pinned
 * pages do, through the distribution's libibverbs and librxe on the device
 * argv[1]. With argv[2] "shared" the registered buffers must have moved
 * into memory the daemon maps (their line of /proc/self/maps names the
 * memfd softroce-mr); with "private" (SOFTROCE_NO_SHARED_PAGES) they must
 * have stayed anonymous. Either way:
 *   - the bytes written before ibv_reg_mr are still there after it;
 *   - an RDMA WRITE lands where the program reads, an RDMA READ takes what
 *     it wrote, through a second MR on the same pages too;
 *   - fork: the child sees the buffer as it was at the fork and what it
 *     writes there stays its own; a range marked MADV_DONTFORK before the
 *     registration is not in the child;
 *   - MADV_REMOVE on the buffer is EINVAL, as on private memory.
 * Shared only (the daemon's /proc/PID/mem path reaches the program's
 * current pages instead):
 *   - madvise(MADV_DONTNEED) gives the program zero pages while the MR
 *     keeps the pages it pinned: an RDMA READ still takes the old bytes,
 *     and an RDMA WRITE does not reach the program.
 *
 * Prints "ok NAME" per check and exits 0, or "FAIL NAME: why" and 1.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verbs.h"

#define LEN (4 * 4096)

/* shared_at reports whether addr lies in a mapping of the memfd
 * softroce-mr, -1 if it is not mapped. */
static int shared_at(void *addr)
{
	char line[512];
	uintptr_t a = (uintptr_t)addr;
	FILE *f = fopen("/proc/self/maps", "r");
	int found = -1;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) {
			found = strstr(line, "/memfd:softroce-mr") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}

static int rdma(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, struct ibv_mr *mr, void *buf,
		uint32_t len, void *raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr = { .rdma = { .remote_addr = (uintptr_t)raddr, .rkey = rkey } } };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	if (poll_n(cq, &wc, 1) != 1)
		return -2;
	return wc.status;
}

static void *pages(void)
{
	void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST("mmap", p != MAP_FAILED);
	return p;
}

int main(int argc, char **argv)
{
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *tmr, *smr, *tmr2, *fmr;
	char *target, *src, *nofork, *heap;
	int shared, status;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	MUST("usage: verbs_shared_pages DEVICE shared|private", argc == 3);
	shared = !strcmp(argv[2], "shared");
	open_device(argv[1]);
	MUST("alloc pd", (pd = ibv_alloc_pd(ctx)));
	MUST("create cq", (cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)));
	MUST("create qps", (a = rc_qp(pd, cq)) && (b = rc_qp(pd, cq)));
	MUST("connect", !connect_qp(a, b->qp_num) && !connect_qp(b, a->qp_num));

	target = pages();
	src = pages();
	memset(target, 'T', LEN);
	memset(src, 'S', LEN);
	MUST("reg target", (tmr = ibv_reg_mr(pd, target, LEN, access)));
	MUST("reg src", (smr = ibv_reg_mr(pd, src, LEN, access)));
	CHECK("registered pages are shared as asked", shared_at(target) == shared && shared_at(src) == shared,
	      "target %d src %d, want %d", shared_at(target), shared_at(src), shared);
	CHECK("the bytes written before ibv_reg_mr stay", target[0] == 'T' && target[LEN - 1] == 'T' && src[LEN / 2] == 'S',
	      "%c %c %c", target[0], target[LEN - 1], src[LEN / 2]);

	CHECK("an RDMA WRITE lands where the program reads",
	      rdma(a, cq, IBV_WR_RDMA_WRITE, smr, src, LEN, target, tmr->rkey) == IBV_WC_SUCCESS &&
		      target[0] == 'S' && target[LEN - 1] == 'S', "target[0] %c", target[0]);
	memset(target, 'P', 4096);
	CHECK("an RDMA READ takes what the program wrote",
	      rdma(a, cq, IBV_WR_RDMA_READ, smr, src, 4096, target, tmr->rkey) == IBV_WC_SUCCESS && src[0] == 'P' &&
		      src[4095] == 'P', "src[0] %c", src[0]);
	MUST("second MR on the target", (tmr2 = ibv_reg_mr(pd, target, 4096, access)));
	target[100] = 'Q';
	CHECK("a second MR on the same pages reads them",
	      rdma(a, cq, IBV_WR_RDMA_READ, smr, src, 4096, target, tmr2->rkey) == IBV_WC_SUCCESS && src[100] == 'Q',
	      "src[100] %c", src[100]);
	MUST("dereg second", !ibv_dereg_mr(tmr2));

	nofork = pages();
	MUST("madvise DONTFORK", !madvise(nofork, LEN, MADV_DONTFORK));
	MUST("reg nofork", (fmr = ibv_reg_mr(pd, nofork, LEN, access)));
	memset(target, 'F', LEN);
	fflush(stdout);
	pid = fork();
	MUST("fork", pid >= 0);
	if (pid == 0) {
		int ok = target[0] == 'F' && target[LEN - 1] == 'F' && shared_at(target) == 0 && shared_at(nofork) == -1;
		memset(target, 'C', LEN);
		_exit(ok ? 0 : 1);
	}
	target[1] = 'G';
	MUST("wait", waitpid(pid, &status, 0) == pid);
	CHECK("the child had the buffer as at the fork, private; not the DONTFORK range",
	      WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
	CHECK("what the child wrote stays its own", target[0] == 'F' && target[1] == 'G' && target[2] == 'F', "%c%c%c",
	      target[0], target[1], target[2]);
	CHECK("an RDMA WRITE after the fork lands",
	      rdma(a, cq, IBV_WR_RDMA_WRITE, smr, src, 4096, target, tmr->rkey) == IBV_WC_SUCCESS && target[5] == src[5],
	      "target[5] %c src[5] %c", target[5], src[5]);
	MUST("dereg nofork", !ibv_dereg_mr(fmr));

	errno = 0;
	CHECK("MADV_REMOVE on registered private memory is EINVAL",
	      madvise(target, LEN, MADV_REMOVE) == -1 && errno == EINVAL, "errno %d", errno);

	if (shared) {
		memset(target, 'D', LEN);
		MUST("madvise DONTNEED", !madvise(target, LEN, MADV_DONTNEED));
		CHECK("MADV_DONTNEED gives the program zero pages", target[0] == 0 && target[LEN - 1] == 0,
		      "target[0] %d", target[0]);
		CHECK("the MR keeps the pages it pinned (an RDMA READ takes the old bytes)",
		      rdma(a, cq, IBV_WR_RDMA_READ, smr, src, LEN, target, tmr->rkey) == IBV_WC_SUCCESS &&
			      src[0] == 'D' && src[LEN - 1] == 'D', "src[0] %d", src[0]);
		memset(src, 'W', LEN);
		CHECK("an RDMA WRITE there does not reach the program",
		      rdma(a, cq, IBV_WR_RDMA_WRITE, smr, src, LEN, target, tmr->rkey) == IBV_WC_SUCCESS && target[0] == 0,
		      "target[0] %d", target[0]);
	}

	heap = malloc(3 * 4096);
	MUST("malloc", heap);
	memset(heap, 'H', 3 * 4096);
	MUST("reg heap", (tmr2 = ibv_reg_mr(pd, heap + 100, 5000, access)));
	CHECK("memory that is not whole pages stays private", shared_at(heap + 100) == 0, "shared %d", shared_at(heap + 100));
	CHECK("and works",
	      rdma(a, cq, IBV_WR_RDMA_READ, smr, src, 5000, heap + 100, tmr2->rkey) == IBV_WC_SUCCESS && src[4999] == 'H',
	      "src[4999] %c", src[4999]);
	MUST("dereg heap", !ibv_dereg_mr(tmr2));

	MUST("destroy", !ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_cq(cq));
	MUST("dereg", !ibv_dereg_mr(tmr) && !ibv_dereg_mr(smr));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	ibv_close_device(ctx);
	return failed;
}
