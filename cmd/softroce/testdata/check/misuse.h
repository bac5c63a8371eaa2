/*
 * misuse.h: what the programs of softroce run --check's findings share.
 * Each program commits one misuse of verbs, or, given the argument
 * "fixed", does the same work correctly (its twin). The setup: two RC
 * QPs of one PD on one device, their CQ with its completion channel, a
 * registered buffer.
 */
#include <unistd.h>
#include "../verbs.h"

static struct ibv_pd *pd;
static struct ibv_comp_channel *chan;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static struct ibv_qp *a, *b;
static char buf[4096];
static int fixed;

static inline void setup(int argc, char **argv, int cqe)
{
	fixed = argc > 1 && !strcmp(argv[1], "fixed");
	open_device(NULL);
	MUST("pd", pd = ibv_alloc_pd(ctx));
	MUST("channel", chan = ibv_create_comp_channel(ctx));
	MUST("cq", cq = ibv_create_cq(ctx, cqe, NULL, chan, 0));
	MUST("mr", mr = ibv_reg_mr(pd, buf, sizeof(buf),
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
	MUST("qp a", a = rc_qp(pd, cq));
	MUST("qp b", b = rc_qp(pd, cq));
}

/* connect_both brings a and b to RTS towards each other; dead_peer
 * leaves b in INIT, where it drops what a sends: a's WRs stay
 * outstanding while a retries. */
static inline void connect_both(int dead_peer)
{
	MUST("connect a", !connect_qp(a, b->qp_num));
	if (dead_peer)
		MUST("b to INIT", !to_init(b));
	else
		MUST("connect b", !connect_qp(b, a->qp_num));
}

static inline int to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	return ibv_modify_qp(qp, &at, IBV_QP_STATE);
}

/* drain moves qp to ERR and polls until the completion of WR last. */
static inline void drain(struct ibv_qp *qp, uint64_t last)
{
	struct ibv_wc wc;
	MUST("to ERR", !to_err(qp));
	for (;;) {
		MUST("drain", poll_n(cq, &wc, 1) == 1);
		if (wc.wr_id == last)
			return;
	}
}

static inline void teardown(void)
{
	MUST("destroy qp a", !ibv_destroy_qp(a));
	MUST("destroy qp b", !ibv_destroy_qp(b));
	if (mr)
		MUST("dereg mr", !ibv_dereg_mr(mr));
	MUST("destroy cq", !ibv_destroy_cq(cq));
	MUST("destroy channel", !ibv_destroy_comp_channel(chan));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	MUST("close", !ibv_close_device(ctx));
}
