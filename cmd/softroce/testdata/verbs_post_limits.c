/*
 * verbs_post_limits: posts beyond a QP's capacities, as ibv_query_qp
 * reports them, are refused, and nothing of them is sent: a send WR
 * with one SGE more than max_send_sge, an inline send of one byte more
 * than max_inline_data, a receive WR with one SGE more than
 * max_recv_sge. A post within them then completes, alone.
 */
#include "verbs.h"

int main(int argc, char **argv)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *a, *b;
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr init;
	static char buf[8192];
	struct ibv_sge sge[40];
	struct ibv_wc wc[4];
	int i, err;

	open_device(argc > 1 ? argv[1] : NULL);
	MUST("pd", pd = ibv_alloc_pd(ctx));
	MUST("cq", cq = ibv_create_cq(ctx, 16, NULL, NULL, 0));
	MUST("mr", mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	MUST("qp a", a = rc_qp(pd, cq));
	MUST("qp b", b = rc_qp(pd, cq));
	MUST("connect a", !connect_qp(a, b->qp_num));
	MUST("connect b", !connect_qp(b, a->qp_num));
	MUST("query", !ibv_query_qp(a, &at, IBV_QP_CAP, &init));
	MUST("caps below the SGE array", at.cap.max_send_sge < 40 && at.cap.max_recv_sge < 40 &&
	     at.cap.max_inline_data < sizeof(buf));
	for (i = 0; i < 40; i++) {
		sge[i].addr = (uintptr_t)buf + i;
		sge[i].length = 1;
		sge[i].lkey = mr->lkey;
	}
	{
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = sge, .num_sge = at.cap.max_send_sge + 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
		err = ibv_post_send(a, &wr, &bad);
		CHECK("a send WR beyond max_send_sge is refused", err != 0 && bad == &wr, "%d", err);
	}
	{
		struct ibv_sge big = { .addr = (uintptr_t)buf, .length = at.cap.max_inline_data + 1, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &big, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad = NULL;
		err = ibv_post_send(a, &wr, &bad);
		CHECK("inline data beyond max_inline_data is refused", err != 0 && bad == &wr, "%d", err);
	}
	{
		struct ibv_recv_wr wr = { .wr_id = 3, .sg_list = sge, .num_sge = at.cap.max_recv_sge + 1 }, *bad = NULL;
		err = ibv_post_recv(b, &wr, &bad);
		CHECK("a receive WR beyond max_recv_sge is refused", err != 0 && bad == &wr, "%d", err);
	}
	{
		struct ibv_recv_wr rwr = { .wr_id = 4, .sg_list = sge, .num_sge = 1 }, *rbad;
		struct ibv_send_wr wr = { .wr_id = 5, .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED }, *bad;
		MUST("post recv", !ibv_post_recv(b, &rwr, &rbad));
		MUST("post send", !ibv_post_send(a, &wr, &bad));
		CHECK("a post within the capacities completes, alone",
		      poll_n(cq, wc, 2) == 2 && ibv_poll_cq(cq, 2, wc + 2) == 0 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[1].status == IBV_WC_SUCCESS && wc[0].wr_id + wc[1].wr_id == 9, "%s", "other completions");
	}
	MUST("destroy qp a", !ibv_destroy_qp(a));
	MUST("destroy qp b", !ibv_destroy_qp(b));
	MUST("dereg mr", !ibv_dereg_mr(mr));
	MUST("destroy cq", !ibv_destroy_cq(cq));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	MUST("close", !ibv_close_device(ctx));
	printf("ok done\n");
	return failed;
}
