/* receive_starvation: SENDs arrive before their receive WRs are posted,
 * once on a QP's own receive queue and once on an SRQ whose limit event
 * is never armed, each answered with RNR NAKs until the WR comes
 * (findings "receive-starvation" on the QP and on the SRQ); fixed posts
 * the receive WRs first and arms the SRQ's limit. */
#include "misuse.h"

static struct ibv_srq *srq;
static struct ibv_qp *c, *d;

static void post_recv(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + 2048, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (qp)
		MUST("post recv", !ibv_post_recv(qp, &wr, &bad));
	else
		MUST("post srq recv", !ibv_post_srq_recv(srq, &wr, &bad));
}

static void post_send(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	MUST("post send", !ibv_post_send(qp, &wr, &bad));
}

/* exchange sends one SEND from qp to its peer, whose receive WR goes
 * to rq (NULL: the SRQ): before it when fixed, 20 ms after it if not. */
static void exchange(struct ibv_qp *qp, struct ibv_qp *rq, uint64_t id)
{
	struct ibv_wc wc[2];
	if (fixed)
		post_recv(rq, id + 100);
	post_send(qp, id);
	if (!fixed) {
		usleep(20000);
		post_recv(rq, id + 100);
	}
	MUST("completions", poll_n(cq, wc, 2) == 2);
	CHECK("success", wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS, "status %s, %s\n",
	      ibv_wc_status_str(wc[0].status), ibv_wc_status_str(wc[1].status));
}

int main(int argc, char **argv)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_qp_init_attr ca = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	setup(argc, argv, 16);
	connect_both(0);
	MUST("srq", srq = ibv_create_srq(pd, &sa));
	ca.send_cq = ca.recv_cq = cq;
	ca.srq = srq;
	MUST("qp c", c = ibv_create_qp(pd, &ca));
	MUST("qp d", d = rc_qp(pd, cq));
	MUST("connect c", !connect_qp(c, d->qp_num));
	MUST("connect d", !connect_qp(d, c->qp_num));
	if (fixed) {
		struct ibv_srq_attr at = { .srq_limit = 1 };
		post_recv(NULL, 99);
		MUST("arm the SRQ limit", !ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT));
	}
	exchange(a, b, 1);
	exchange(d, NULL, 2);
	MUST("destroy qp c", !ibv_destroy_qp(c));
	MUST("destroy qp d", !ibv_destroy_qp(d));
	MUST("destroy srq", !ibv_destroy_srq(srq));
	teardown();
	printf("ok done\n");
	return failed;
}
