/*
 * verbs.h: what the C test programs on libibverbs here share: CHECK (a
 * check that goes on) and MUST (one that ends the program), from
 * internal/testutil's ctest.h, the device context and its GID 1, RC QPs
 * connected to a QP of the same device, polling with a deadline, an RDMA
 * WRITE. Prints "ok NAME" per check, or "FAIL NAME: why".
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "../../../internal/testutil/testdata/ctest.h"

static struct ibv_context *ctx;
static union ibv_gid gid;

static inline struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pd, &a);
}

static inline int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* connect walks qp to RTS towards the QP numbered dest on this device's
 * GID 1. */
static inline int connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			.grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 } } };
	int err = to_init(qp);
	if (err)
		return err;
	err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* poll_n polls n completions into wc, giving up after 5 s; it returns how
 * many it got. */
static inline int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	struct timespec start, now;
	int got = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (got < n) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return got;
		got += k;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			break;
	}
	return got;
}

static inline int post_write(struct ibv_qp *qp, uint64_t id, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr = { .rdma = { .remote_addr = raddr, .rkey = rkey } } };
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

/* open_device opens the device named name (the first one if NULL) into
 * ctx and reads its GID 1 into gid. */
static inline void open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_device *dev = NULL;
	int n, i;

	list = ibv_get_device_list(&n);
	MUST("device list", list && n > 0);
	for (i = 0; i < n; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	MUST("device", dev);
	ctx = ibv_open_device(dev);
	MUST("open", ctx);
	MUST("query gid 1", !ibv_query_gid(ctx, 1, 1, &gid));
	ibv_free_device_list(list);
}
