/* qp_destroyed_busy: a QP is destroyed while its signalled RDMA WRITE
 * has not completed (finding "qp-destroyed-busy"); fixed moves it to ERR
 * and polls the flush first. */
#include "misuse.h"

int main(int argc, char **argv)
{
	setup(argc, argv, 16);
	connect_both(1);
	MUST("post", !post_write(a, 1, mr, buf, 64, (uintptr_t)buf + 1024, mr->rkey));
	if (fixed)
		drain(a, 1);
	teardown();
	printf("ok done\n");
	return failed;
}
