/*
 * verbs_close.c: threads waiting in ibv_get_cq_event and
 * ibv_get_async_event while another thread closes descriptors under them.
 * A completion channel's descriptor closed while a thread waits on it:
 * the read holds the file (fdget) and waits on. The context's command
 * descriptor closed: ib_uverbs_close frees every event queue of the
 * context, and each waiting read wakes with EIO, as does a later one.
 *
 * Usage: verbs_close. Prints "ok NAME" per check, "FAIL NAME: why" and
 * exits 1 at the first failure; "done" at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

struct waiter {
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch; /* NULL: the async event file */
	pid_t tid;
	int done, ret, err;
};

static void *wait_event(void *arg)
{
	struct waiter *w = arg;
	__atomic_store_n(&w->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	errno = 0;
	if (w->ch) {
		struct ibv_cq *cq;
		void *cq_ctx;
		w->ret = ibv_get_cq_event(w->ch, &cq, &cq_ctx);
	} else {
		struct ibv_async_event ev;
		w->ret = ibv_get_async_event(w->ctx, &ev);
	}
	w->err = errno;
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* sleeping reports whether thread tid sleeps in a read system call. */
static int sleeping(pid_t tid)
{
	long nr = sleeping_in(tid);
	return nr == SYS_read;
}

static void start(struct waiter *w, pthread_t *th, const char *name)
{
	int i;
	check(pthread_create(th, NULL, wait_event, w) == 0, name, "pthread_create");
	for (i = 0; i < 1000; i++) {
		pid_t tid = __atomic_load_n(&w->tid, __ATOMIC_ACQUIRE);
		if (tid && sleeping(tid))
			return;
		usleep(10000);
	}
	check(0, name, "it never slept in read");
}

/* joined waits up to 10 s for w's thread. */
static int joined(pthread_t th)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	return pthread_timedjoin_np(th, NULL, &ts) == 0;
}

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch, *lone;
	struct ibv_cq *cq;
	struct waiter wc, wl, wa;
	pthread_t tc, tl, ta;
	char b[32];
	int n;

	list = ibv_get_device_list(&n);
	check(list && n > 0, "a device", "none");
	ctx = ibv_open_device(list[0]);
	check(ctx != NULL, "ibv_open_device", "failed");
	ch = ibv_create_comp_channel(ctx);
	lone = ibv_create_comp_channel(ctx);
	check(ch && lone, "two completion channels", "failed");
	cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	check(cq != NULL, "a CQ on the first", "failed");
	check(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq", "failed");

	memset(&wc, 0, sizeof(wc));
	memset(&wl, 0, sizeof(wl));
	memset(&wa, 0, sizeof(wa));
	wc.ch = cq->channel;
	wl.ch = lone;
	wa.ctx = ctx;
	start(&wc, &tc, "a thread waits in ibv_get_cq_event");
	start(&wl, &tl, "a thread waits in ibv_get_cq_event on a channel without CQs");
	start(&wa, &ta, "a thread waits in ibv_get_async_event");

	check(close(lone->fd) == 0, "another thread closes that channel's descriptor", "close failed");
	usleep(200000);
	check(!__atomic_load_n(&wl.done, __ATOMIC_ACQUIRE) && sleeping(wl.tid), "its waiter waits on",
	      "it returned");

	check(close(ctx->cmd_fd) == 0, "another thread closes the context's command descriptor", "close failed");
	check(joined(tc) && wc.ret == -1 && wc.err == EIO, "the CQ event waiter wakes with EIO", "not EIO");
	check(joined(tl) && wl.ret == -1 && wl.err == EIO, "the waiter on the closed channel wakes with EIO",
	      "not EIO");
	check(joined(ta) && wa.ret == -1 && wa.err == EIO, "the async event waiter wakes with EIO", "not EIO");
	errno = 0;
	check(read(ch->fd, b, sizeof(b)) == -1 && errno == EIO, "a later read of the channel is EIO", "not EIO");
	printf("done\n");
	return 0;
}
