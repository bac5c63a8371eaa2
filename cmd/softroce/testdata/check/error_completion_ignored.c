/* error_completion_ignored: an RDMA WRITE with a wrong rkey fails, and
 * the program destroys its CQ without polling the error completion
 * (finding "error-completion-ignored"); fixed polls it and checks its
 * status. Both wait for the completion on the CQ's channel first. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	struct ibv_wc wc;

	setup(argc, argv, 16);
	connect_both(0);
	MUST("notify", !ibv_req_notify_cq(cq, 0));
	MUST("post", !post_write(a, 1, mr, buf, 64, (uintptr_t)buf + 1024, mr->rkey ^ 0x100));
	MUST("completion event", !ibv_get_cq_event(chan, &ev_cq, &ev_ctx));
	ibv_ack_cq_events(ev_cq, 1);
	if (fixed) {
		MUST("completion", poll_n(cq, &wc, 1) == 1);
		CHECK("the write failed", wc.status == IBV_WC_REM_ACCESS_ERR, "status %s\n", ibv_wc_status_str(wc.status));
	}
	teardown();
	printf("ok done\n");
	return failed;
}
