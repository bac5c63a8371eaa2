/*
 * verbs_access_err: an RC responder's R_Key violation, as a program sees
 * it through the distribution's libibverbs and librxe on device argv[1].
 * Two RC QPs of the device are connected to each other; the requester's
 * RDMA WRITE names a key the responder does not have. The requester's
 * completion is IBV_WC_REM_ACCESS_ERR on every kernel. argv[2] says what
 * the responder's async event queue then holds: "event" (rxe from Linux
 * 7.1: IBV_EVENT_QP_ACCESS_ERR for the responder's QP) or "none" (rxe
 * before 7.1: nothing within a second).
 *
 * Prints "ok NAME" per check and exits 0, or "FAIL NAME: why" and 1.
 */
#include <poll.h>

#include "verbs.h"

int main(int argc, char **argv)
{
	struct ibv_async_event ev;
	struct ibv_wc wc;
	struct pollfd pfd;
	static char src[64], dst[64];
	int want_event, n;

	MUST("usage: verbs_access_err DEV event|none", argc == 3);
	want_event = !strcmp(argv[2], "event");
	open_device(argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST("pd", pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	MUST("cq", cq);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST("mr", smr && dmr);
	struct ibv_qp *req = rc_qp(pd, cq), *resp = rc_qp(pd, cq);
	MUST("qp", req && resp);
	MUST("connect", !connect_qp(req, resp->qp_num) && !connect_qp(resp, req->qp_num));

	MUST("post", !post_write(req, 1, smr, src, sizeof(src), (uintptr_t)dst, dmr->rkey ^ 0x80));
	n = poll_n(cq, &wc, 1);
	CHECK("the WRITE with a bad rkey completes IBV_WC_REM_ACCESS_ERR", n == 1 && wc.wr_id == 1 &&
	      wc.status == IBV_WC_REM_ACCESS_ERR, "%d completions, status %s", n, n ? ibv_wc_status_str(wc.status) : "-");

	pfd.fd = ctx->async_fd;
	pfd.events = POLLIN;
	n = poll(&pfd, 1, 1000);
	if (want_event) {
		MUST("an async event arrives", n == 1);
		MUST("ibv_get_async_event", !ibv_get_async_event(ctx, &ev));
		CHECK("the responder's QP gets IBV_EVENT_QP_ACCESS_ERR",
		      ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == resp,
		      "event %s (%d) for QP %p, responder %p", ibv_event_type_str(ev.event_type), ev.event_type,
		      (void *)ev.element.qp, (void *)resp);
		ibv_ack_async_event(&ev);
	} else {
		CHECK("no async event", n == 0, "poll %d", n);
	}
	ibv_destroy_qp(req);
	ibv_destroy_qp(resp);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return failed;
}
