/*
 * verbs_odp: on-demand paging MRs (IBV_ACCESS_ON_DEMAND) behave as on
 * rxe 7.3, through the distribution's libibverbs and librxe on the device
 * argv[1]:
 *   - ibv_query_device_ex reports rxe 7.3's ODP caps;
 *   - implicit ODP (ibv_reg_mr(pd, NULL, SIZE_MAX)) is EINVAL;
 *   - an ODP MR registers on memory not mapped, where a pinned one is
 *     EFAULT, and its pages stay the program's own (not shared);
 *   - RDMA WRITE and READ reach the pages the program maps at the time:
 *     after MADV_DONTNEED the zero pages it reads, after munmap and a new
 *     mmap at the same address the new pages, where a pinned MR keeps the
 *     pages it pinned;
 *   - a WRITE to pages the program made read-only, or a READ of pages it
 *     unmapped, completes IBV_WC_REM_ACCESS_ERR (the responder's R_Key
 *     violation); a WRITE from a local ODP buffer unmapped completes
 *     IBV_WC_LOC_PROT_ERR.
 *
 * Prints "ok NAME" per check and exits 0, or "FAIL NAME: why" and 1.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs.h"

#define LEN (4 * 4096)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_pd *pd;
static struct ibv_cq *cq;

/* in_memfd reports whether addr lies in a mapping of the memfd the
 * preload library shares pinned pages through. */
static int in_memfd(void *addr)
{
	char line[512];
	uintptr_t a = (uintptr_t)addr;
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;
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

/* xfer posts one RDMA op on qp and returns its completion status (-1 the
 * post failed, -2 no completion). */
static int xfer(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr, void *buf, uint32_t len, void *raddr,
		uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
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

/* rc_pair returns the first of two RC QPs connected to each other. */
static struct ibv_qp *rc_pair(void)
{
	struct ibv_qp *a, *b;
	MUST("create qps", (a = rc_qp(pd, cq)) && (b = rc_qp(pd, cq)));
	MUST("connect", !connect_qp(a, b->qp_num) && !connect_qp(b, a->qp_num));
	return a;
}

static char *pages(char fill)
{
	char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST("mmap", p != MAP_FAILED);
	memset(p, fill, LEN);
	return p;
}

/* remap replaces the pages at p with new anonymous ones holding fill. */
static void remap(char *p, char fill)
{
	MUST("munmap", !munmap(p, LEN));
	MUST("mmap fixed", mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p);
	memset(p, fill, LEN);
}

int main(int argc, char **argv)
{
	struct ibv_device_attr_ex ax;
	struct ibv_mr *omr, *pmr, *smr, *mr;
	struct ibv_qp *qp;
	char *odp, *pinned, *src, *gone;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	MUST("usage: verbs_odp DEVICE", argc == 2);
	open_device(argv[1]);
	MUST("alloc pd", (pd = ibv_alloc_pd(ctx)));
	MUST("create cq", (cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)));

	MUST("query device ex", !ibv_query_device_ex(ctx, NULL, &ax));
	CHECK("the ODP caps are rxe 7.3's",
	      ax.odp_caps.general_caps == IBV_ODP_SUPPORT && ax.odp_caps.per_transport_caps.rc_odp_caps == 0xFF &&
		      ax.odp_caps.per_transport_caps.uc_odp_caps == 0 &&
		      ax.odp_caps.per_transport_caps.ud_odp_caps ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV) &&
		      ax.xrc_odp_caps == 0,
	      "general %#lx rc %#x uc %#x ud %#x xrc %#x", (unsigned long)ax.odp_caps.general_caps,
	      ax.odp_caps.per_transport_caps.rc_odp_caps, ax.odp_caps.per_transport_caps.uc_odp_caps,
	      ax.odp_caps.per_transport_caps.ud_odp_caps, ax.xrc_odp_caps);

	errno = 0;
	mr = ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	CHECK("implicit ODP is EINVAL", !mr && errno == EINVAL, "mr %p errno %d", (void *)mr, errno);

	gone = pages('g');
	MUST("munmap", !munmap(gone, LEN));
	errno = 0;
	mr = ibv_reg_mr(pd, gone, LEN, ACCESS);
	CHECK("a pinned MR on unmapped memory is EFAULT", !mr && errno == EFAULT, "mr %p errno %d", (void *)mr, errno);
	mr = ibv_reg_mr(pd, gone, LEN, ACCESS | IBV_ACCESS_ON_DEMAND);
	CHECK("an ODP MR on unmapped memory registers", mr != NULL, "errno %d", errno);
	if (mr)
		MUST("dereg", !ibv_dereg_mr(mr));

	odp = pages('O');
	pinned = pages('P');
	src = pages('S');
	MUST("reg odp", (omr = ibv_reg_mr(pd, odp, LEN, ACCESS | IBV_ACCESS_ON_DEMAND)));
	MUST("reg pinned", (pmr = ibv_reg_mr(pd, pinned, LEN, ACCESS)));
	MUST("reg src", (smr = ibv_reg_mr(pd, src, LEN, ACCESS)));
	CHECK("the ODP MR's pages stay the program's", !in_memfd(odp) && odp[0] == 'O', "memfd %d", in_memfd(odp));

	qp = rc_pair();
	CHECK("an RDMA WRITE lands in the ODP MR",
	      xfer(qp, IBV_WR_RDMA_WRITE, smr, src, LEN, odp, omr->rkey) == IBV_WC_SUCCESS && odp[0] == 'S' &&
		      odp[LEN - 1] == 'S',
	      "odp[0] %c", odp[0]);
	memset(odp, 'R', LEN);
	CHECK("an RDMA READ takes what the program wrote",
	      xfer(qp, IBV_WR_RDMA_READ, smr, src, LEN, odp, omr->rkey) == IBV_WC_SUCCESS && src[0] == 'R' &&
		      src[LEN - 1] == 'R',
	      "src[0] %c", src[0]);

	MUST("madvise DONTNEED", !madvise(odp, LEN, MADV_DONTNEED));
	CHECK("after MADV_DONTNEED an RDMA READ takes the zero pages",
	      xfer(qp, IBV_WR_RDMA_READ, smr, src, LEN, odp, omr->rkey) == IBV_WC_SUCCESS && src[0] == 0 &&
		      src[LEN - 1] == 0,
	      "src[0] %d", src[0]);

	remap(odp, 'N');
	remap(pinned, 'N');
	CHECK("after munmap and mmap an RDMA READ takes the new pages",
	      xfer(qp, IBV_WR_RDMA_READ, smr, src, LEN, odp, omr->rkey) == IBV_WC_SUCCESS && src[0] == 'N' &&
		      src[LEN - 1] == 'N',
	      "src[0] %c", src[0]);
	memset(src, 'W', LEN);
	CHECK("and an RDMA WRITE lands in them",
	      xfer(qp, IBV_WR_RDMA_WRITE, smr, src, LEN, odp, omr->rkey) == IBV_WC_SUCCESS && odp[0] == 'W' &&
		      odp[LEN - 1] == 'W',
	      "odp[0] %c", odp[0]);
	CHECK("where a pinned MR keeps the pages it pinned",
	      xfer(qp, IBV_WR_RDMA_READ, smr, src, LEN, pinned, pmr->rkey) == IBV_WC_SUCCESS && src[0] == 'P', "src[0] %c",
	      src[0]);

	MUST("mprotect", !mprotect(odp, LEN, PROT_READ));
	st = xfer(qp, IBV_WR_RDMA_WRITE, smr, src, 64, odp, omr->rkey);
	CHECK("an RDMA WRITE to pages made read-only is REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR && odp[0] == 'W',
	      "status %d odp[0] %c", st, odp[0]);

	qp = rc_pair();
	MUST("munmap", !munmap(odp, LEN));
	st = xfer(qp, IBV_WR_RDMA_READ, smr, src, 64, odp, omr->rkey);
	CHECK("an RDMA READ of pages unmapped is REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);

	qp = rc_pair();
	MUST("munmap", !munmap(src, LEN));
	MUST("reg local", (mr = ibv_reg_mr(pd, src, LEN, ACCESS | IBV_ACCESS_ON_DEMAND)));
	st = xfer(qp, IBV_WR_RDMA_WRITE, mr, src, 64, pinned, pmr->rkey);
	CHECK("an RDMA WRITE from a local ODP buffer unmapped is LOC_PROT_ERR", st == IBV_WC_LOC_PROT_ERR, "status %d",
	      st);
	return failed;
}
