/* mr_deregistered_busy: an MR is deregistered while a signalled WR
 * reading it has not completed (finding "mr-deregistered-busy"); fixed
 * waits for the WR's completion (here: its flush) first. */
#include "misuse.h"

int main(int argc, char **argv)
{
	setup(argc, argv, 16);
	connect_both(1);
	MUST("post", !post_write(a, 1, mr, buf, 64, (uintptr_t)buf + 1024, mr->rkey));
	if (!fixed)
		MUST("dereg", !ibv_dereg_mr(mr));
	drain(a, 1);
	if (fixed)
		MUST("dereg", !ibv_dereg_mr(mr));
	mr = NULL;
	teardown();
	printf("ok done\n");
	return failed;
}
