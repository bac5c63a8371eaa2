/*
 * verbs_flush: rdma-core 65's pyverbs test_qp_ex_rc_flush and
 * test_qp_ex_rc_flush_type_violate (tests/test_qpex.py, QpExRCFlush) in C,
 * on a libibverbs with ibv_wr_flush (rdma-core 56 and later: build it
 * against Debian 13's headers) and librxe, on device argv[1]. Two RC QPs of
 * the device, created with ibv_create_qp_ex (send ops FLUSH and
 * RDMA_WRITE), access REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|FLUSH_GLOBAL|
 * FLUSH_PERSISTENT; a 1024-byte MR registered LOCAL_WRITE|FLUSH_GLOBAL|
 * REMOTE_WRITE on the responder. An RDMA WRITE of the 1024 bytes, then:
 *
 *   range:   ibv_wr_flush of the range, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE:
 *            success (rxe 6.12 and 7.3 complete it);
 *   mr:      ibv_wr_flush of IBV_FLUSH_MR with length 0: success;
 *   violate: on fresh QPs, IBV_FLUSH_PERSISTENT into the MR without
 *            FLUSH_PERSISTENT: IBV_WC_REM_ACCESS_ERR.
 *
 * Prints "ok NAME" per check and exits 0, or "FAIL NAME: why" and 1.
 */
#include "verbs.h"

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *smr, *dmr;
static char src[1024], dst[1024];

/* qp_ex creates an RC QP with the send ops of QpExRCFlush and moves it to
 * INIT with the access of pyverbs' create_qp_ex. */
static struct ibv_qp *qp_ex(void)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	return ibv_create_qp_ex(ctx, &a);
}

/* connect_ex walks qp to RTS towards dest as connect_qp does, with
 * pyverbs' QP access flags. */
static int connect_ex(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
				   IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* flush posts one signaled FLUSH with the ibv_wr_* API and returns its
 * completion status (-1 for none). */
static int flush(struct ibv_qp *qp, size_t len, uint8_t type, uint8_t level)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	struct ibv_wc wc;

	ibv_wr_start(x);
	x->wr_id = 0x123;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_flush(x, dmr->rkey, (uintptr_t)dst, len, type, level);
	if (ibv_wr_complete(x))
		return -1;
	return poll_n(cq, &wc, 1) == 1 ? (int)wc.status : -1;
}

int main(int argc, char **argv)
{
	struct ibv_wc wc;
	int st;

	MUST("usage: verbs_flush DEV", argc == 2);
	open_device(argv[1]);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	MUST("pd and cq", pd && cq);
	smr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	dmr = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_REMOTE_WRITE);
	MUST("mr", smr && dmr);

	struct ibv_qp *req = qp_ex(), *resp = qp_ex();
	MUST("ibv_create_qp_ex", req && resp);
	MUST("connect", !connect_ex(req, resp->qp_num) && !connect_ex(resp, req->qp_num));
	memset(src, 'c', sizeof(src));
	MUST("post write", !post_write(req, 1, smr, src, sizeof(src), (uintptr_t)dst, dmr->rkey));
	MUST("write completes", poll_n(cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS);
	st = flush(req, sizeof(dst), IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	CHECK("a FLUSH of the range, global placement, completes", st == IBV_WC_SUCCESS, "status %d (%s)", st,
	      st < 0 ? "none" : ibv_wc_status_str(st));
	st = flush(req, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR);
	CHECK("a FLUSH of the MR, length 0, completes", st == IBV_WC_SUCCESS, "status %d (%s)", st,
	      st < 0 ? "none" : ibv_wc_status_str(st));
	ibv_destroy_qp(req);
	ibv_destroy_qp(resp);

	req = qp_ex();
	resp = qp_ex();
	MUST("connect again", req && resp && !connect_ex(req, resp->qp_num) && !connect_ex(resp, req->qp_num));
	st = flush(req, sizeof(dst), IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE);
	CHECK("a persistent FLUSH into an MR without FLUSH_PERSISTENT is IBV_WC_REM_ACCESS_ERR", st == IBV_WC_REM_ACCESS_ERR,
	      "status %d (%s)", st, st < 0 ? "none" : ibv_wc_status_str(st));
	ibv_destroy_qp(req);
	ibv_destroy_qp(resp);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
