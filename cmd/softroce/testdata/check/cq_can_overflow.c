/* cq_can_overflow: b's CQ has 4 entries, and b posts 8 receive WRs and a
 * signalled SEND on it: 9 completions may be due at once (finding
 * "cq-can-overflow", before anything overflows, as nothing is sent to
 * b); fixed gives the CQ 16 entries. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_cq *bcq;
	struct ibv_wc wc[2];
	int i;

	setup(argc, argv, 16);
	MUST("b's cq", bcq = ibv_create_cq(ctx, fixed ? 16 : 4, NULL, NULL, 0));
	MUST("destroy b", !ibv_destroy_qp(b));
	{
		struct ibv_qp_init_attr at = {
			.send_cq = bcq, .recv_cq = bcq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		MUST("qp b", b = ibv_create_qp(pd, &at));
	}
	connect_both(0);
	for (i = 0; i < 9; i++) {
		/* 8 on b, 1 on a for b's SEND */
		struct ibv_sge sge = { .addr = (uintptr_t)buf + 2048, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		MUST("post recv", !ibv_post_recv(i < 8 ? b : a, &wr, &bad));
	}
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED }, *bad;
		MUST("post send", !ibv_post_send(b, &wr, &bad));
	}
	MUST("send completion", poll_n(bcq, wc, 1) == 1);
	MUST("receive completion", poll_n(cq, wc + 1, 1) == 1);
	CHECK("success", wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS, "status %s, %s\n",
	      ibv_wc_status_str(wc[0].status), ibv_wc_status_str(wc[1].status));
	MUST("destroy qp a", !ibv_destroy_qp(a));
	MUST("destroy qp b", !ibv_destroy_qp(b));
	MUST("destroy b's cq", !ibv_destroy_cq(bcq));
	a = b = NULL;
	MUST("dereg mr", !ibv_dereg_mr(mr));
	MUST("destroy cq", !ibv_destroy_cq(cq));
	MUST("destroy channel", !ibv_destroy_comp_channel(chan));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	MUST("close", !ibv_close_device(ctx));
	printf("ok done\n");
	return failed;
}
