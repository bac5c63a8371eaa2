/* send_buffer_changed: a's RDMA WRITE goes to b while b is still in
 * INIT, which drops it; the program changes the WRITE's source, then
 * brings b to RTS, and a's retransmission carries the new bytes (finding
 * "send-buffer-changed"); fixed changes the buffer only after the
 * WRITE's completion. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_wc wc;

	setup(argc, argv, 16);
	connect_both(1);
	memset(buf, 'a', 1024);
	MUST("post", !post_write(a, 1, mr, buf, 1024, (uintptr_t)buf + 2048, mr->rkey));
	usleep(10000); /* the first transmission, dropped */
	if (!fixed)
		memset(buf, 'b', 1024);
	MUST("connect b", !connect_qp(b, a->qp_num));
	MUST("completion", poll_n(cq, &wc, 1) == 1);
	CHECK("success", wc.status == IBV_WC_SUCCESS, "status %s\n", ibv_wc_status_str(wc.status));
	if (fixed)
		memset(buf, 'b', 1024);
	teardown();
	printf("ok done\n");
	return failed;
}
