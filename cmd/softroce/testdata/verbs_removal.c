/* verbs_removal: what a program holding the device sees when its daemon
 * removes the device (softroce stop): it opens the device, creates a PD and
 * a CQ, prints "open" and waits in ibv_get_async_event. Argument "close":
 * it closes the device when it reads a line on stdin instead. It prints the
 * event it gets and the errno of a verb after it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_async_event ev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;

	if (!list || !list[0]) {
		printf("no device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("open: %s\n", strerror(errno));
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!pd || !cq) {
		printf("alloc: %s\n", strerror(errno));
		return 1;
	}
	printf("open\n");
	fflush(stdout);
	if (argc > 1 && strcmp(argv[1], "close") == 0) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0;
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
		printf("close: %d\n", ibv_close_device(ctx));
		return 0;
	}
	if (ibv_get_async_event(ctx, &ev)) {
		printf("get_async_event: %s\n", strerror(errno));
		return 1;
	}
	printf("event: %s\n", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	fflush(stdout);
	if (ibv_alloc_pd(ctx)) {
		printf("alloc_pd after the event: ok\n");
		return 1;
	}
	printf("alloc_pd after the event: %s\n", strerror(errno));
	return 0;
}
