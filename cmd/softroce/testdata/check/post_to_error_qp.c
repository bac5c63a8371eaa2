/* post_to_error_qp: an RDMA WRITE with a wrong rkey fails; the program
 * polls the completion without looking at its status and posts again to
 * the QP the error moved to ERR (finding "post-to-error-qp"); fixed
 * checks the status and stops. */
#include "misuse.h"

int main(int argc, char **argv)
{
	struct ibv_wc wc;

	setup(argc, argv, 16);
	connect_both(0);
	MUST("post", !post_write(a, 1, mr, buf, 64, (uintptr_t)buf + 1024, mr->rkey ^ 0x100));
	MUST("completion", poll_n(cq, &wc, 1) == 1);
	if (!fixed || wc.status == IBV_WC_SUCCESS) {
		MUST("post again", !post_write(a, 2, mr, buf, 64, (uintptr_t)buf + 1024, mr->rkey));
		MUST("its completion", poll_n(cq, &wc, 1) == 1);
	}
	teardown();
	printf("ok done\n");
	return failed;
}
