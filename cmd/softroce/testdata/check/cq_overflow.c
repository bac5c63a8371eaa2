/* cq_overflow: 8 SENDs arrive on b, whose receive CQ has room for fewer,
 * nobody polling it (finding "cq-overflow"); fixed gives it room for all
 * and polls them. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_cq *rcq;
	struct ibv_wc wc[8];
	int i;

	setup(argc, argv, 16);
	MUST("recv cq", rcq = ibv_create_cq(ctx, fixed ? 8 : 2, NULL, NULL, 0));
	MUST("destroy b", !ibv_destroy_qp(b));
	{
		struct ibv_qp_init_attr at = {
			.send_cq = cq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		MUST("qp b", b = ibv_create_qp(pd, &at));
	}
	connect_both(0);
	for (i = 0; i < 8; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + 2048, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		MUST("post recv", !ibv_post_recv(b, &wr, &bad));
	}
	for (i = 0; i < 8; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED }, *bad;
		MUST("post send", !ibv_post_send(a, &wr, &bad));
	}
	if (fixed) {
		MUST("send completions", poll_n(cq, wc, 8) == 8);
		MUST("receive completions", poll_n(rcq, wc, 8) == 8);
	} else {
		/* The overrun's IBV_EVENT_CQ_ERR, then a's WRs drained. */
		struct ibv_async_event ev;
		MUST("async event", !ibv_get_async_event(ctx, &ev));
		CHECK("IBV_EVENT_CQ_ERR", ev.event_type == IBV_EVENT_CQ_ERR, "event %s\n", ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
		drain(a, 7);
	}
	MUST("destroy qp a", !ibv_destroy_qp(a));
	MUST("destroy qp b", !ibv_destroy_qp(b));
	MUST("destroy recv cq", !ibv_destroy_cq(rcq));
	a = b = NULL;
	MUST("dereg mr", !ibv_dereg_mr(mr));
	MUST("destroy cq", !ibv_destroy_cq(cq));
	MUST("destroy channel", !ibv_destroy_comp_channel(chan));
	MUST("dealloc pd", !ibv_dealloc_pd(pd));
	MUST("close", !ibv_close_device(ctx));
	printf("ok done\n");
	return failed;
}
