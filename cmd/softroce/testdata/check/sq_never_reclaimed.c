/* sq_never_reclaimed: a whole send queue depth of unsignalled RDMA WRITEs
 * in a row (finding "sq-never-reclaimed"); fixed signals every 4th and
 * polls it. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	uint32_t i, depth;

	setup(argc, argv, 16);
	connect_both(0);
	MUST("query qp", !ibv_query_qp(a, &qa, IBV_QP_CAP, &ia));
	depth = ia.cap.max_send_wr;
	for (i = 0; i < depth + 1; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		int sig = i == depth || (fixed && i % 4 == 3);
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = sig ? IBV_SEND_SIGNALED : 0,
			.wr = { .rdma = { .remote_addr = (uintptr_t)buf + 1024, .rkey = mr->rkey } } }, *bad;
		MUST("post", !ibv_post_send(a, &wr, &bad));
		if (sig)
			MUST("completion", poll_n(cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS);
	}
	teardown();
	printf("ok done\n");
	return failed;
}
