/*
 * rdmacm_close.c: a thread waiting in rdma_get_cm_event while another
 * thread closes the event channel's descriptor, as rping's cm_thread does
 * when main destroys the channel at its end. On Linux the waiting write()
 * holds the file (fdget): the close does not end it, the file (its IDs
 * with it) lives until the write returns, and an event that comes
 * meanwhile is its answer; ucma_close runs after.
 *
 * A client ID on channel A connects to a listener on channel B; a thread
 * waits on A; once it is known to sleep in the system call, main closes
 * A's descriptor and only then rejects the request. The waiting thread
 * must get the REJECTED event.
 *
 * Then, as rping's end races: rounds of a waiter asleep on a fresh
 * channel, an event queued for an ID that is destroyed at once, and the
 * channel's descriptor closed. Whether the waiter took the event or not,
 * it must not fail: on the kernel a destroyed ID's events leave the
 * file's list and the waiting GET_EVENT waits on.
 *
 * Usage: rdmacm_close IPV4_ADDRESS PORT. Prints "ok NAME" per check,
 * "FAIL NAME: why" and exits 1 at the first failure; "done" at the end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *name)
{
	struct rdma_cm_event *ev;
	check(rdma_get_cm_event(ch, &ev) == 0, name, "rdma_get_cm_event failed");
	if (ev->event != want) {
		printf("FAIL %s: event %s status %d, want %s\n", name, rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want));
		fflush(stdout);
		_exit(1);
	}
	return ev;
}

/* The waiter: one rdma_get_cm_event on the channel. */
struct waiter {
	struct rdma_event_channel *ch;
	pid_t tid;
	int ret, err;
	struct rdma_cm_event *ev;
};

static void *wait_event(void *arg)
{
	struct waiter *w = arg;
	__atomic_store_n(&w->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	w->ret = rdma_get_cm_event(w->ch, &w->ev);
	w->err = errno;
	return NULL;
}

static int round_errors, round_events;

/* round_wait is a round's waiter: one rdma_get_cm_event. */
static void *round_wait(void *arg)
{
	struct waiter *w = arg;
	struct rdma_cm_event *ev;
	__atomic_store_n(&w->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	if (rdma_get_cm_event(w->ch, &ev)) {
		printf("round waiter: rdma_get_cm_event: %s\n", strerror(errno));
		__atomic_add_fetch(&round_errors, 1, __ATOMIC_SEQ_CST);
		return NULL;
	}
	__atomic_add_fetch(&round_events, 1, __ATOMIC_SEQ_CST);
	rdma_ack_cm_event(ev);
	return NULL;
}

/* sleeping reports whether thread tid sleeps in the system call of a
 * GET_EVENT: the kernel's sleeps in write, the preload's in poll (on the
 * event count and the daemon's connection, so that a daemon gone ends
 * the wait) or read. */
static int sleeping(pid_t tid)
{
	long nr = sleeping_in(tid);
#ifdef SYS_poll
	if (nr == SYS_poll)
		return 1;
#endif
	return nr == SYS_read || nr == SYS_write || nr == SYS_ppoll;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *cha, *chb;
	struct rdma_cm_id *id, *lid, *cid;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct sockaddr_in sin;
	struct waiter w;
	struct timespec ts;
	pthread_t th;
	const char *ip;
	int port, i;

	if (argc != 3) {
		fprintf(stderr, "usage: %s IPV4_ADDRESS PORT\n", argv[0]);
		return 2;
	}
	ip = argv[1];
	port = atoi(argv[2]);

	cha = rdma_create_event_channel();
	chb = rdma_create_event_channel();
	check(cha && chb, "two channels", "rdma_create_event_channel failed");
	check(rdma_create_id(chb, &lid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id of the listener", "failed");
	sin = addr_of(ip, port);
	check(rdma_bind_addr(lid, (struct sockaddr *)&sin) == 0, "rdma_bind_addr of the listener", "failed");
	check(rdma_listen(lid, 4) == 0, "rdma_listen", "failed");

	check(rdma_create_id(cha, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id of the client", "failed");
	check(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000) == 0, "rdma_resolve_addr", "failed");
	rdma_ack_cm_event(next(cha, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED"));
	check(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route", "failed");
	rdma_ack_cm_event(next(cha, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED"));
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	check(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp of the client", "failed");
	memset(&cp, 0, sizeof(cp));
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	check(rdma_connect(id, &cp) == 0, "rdma_connect", "failed");
	ev = next(chb, RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST on the listener's channel");
	cid = ev->id;
	rdma_ack_cm_event(ev);

	/* The client's channel has nothing queued: the waiter sleeps. */
	memset(&w, 0, sizeof(w));
	w.ch = cha;
	check(pthread_create(&th, NULL, wait_event, &w) == 0, "a thread waits in rdma_get_cm_event", "pthread_create");
	for (i = 0; i < 1000; i++) {
		pid_t tid = __atomic_load_n(&w.tid, __ATOMIC_ACQUIRE);
		if (tid && sleeping(tid))
			break;
		usleep(10000);
	}
	check(i < 1000, "the waiter sleeps in the system call", "it never did");
	/* rdma_destroy_event_channel would free the struct the waiter's
	 * librdmacm still reads: close its descriptor only. */
	check(close(cha->fd) == 0, "another thread closes the channel's descriptor", "close failed");

	check(rdma_reject(cid, "nope", 5) == 0, "rdma_reject after the close", "failed");
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	errno = pthread_timedjoin_np(th, NULL, &ts);
	check(errno == 0, "the waiting rdma_get_cm_event returns", "it still waits: its file went with the close");
	errno = w.err;
	check(w.ret == 0, "it returns an event", "rdma_get_cm_event failed");
	check(w.ev->event == RDMA_CM_EVENT_REJECTED && w.ev->id == id && w.ev->status == 28,
	      "the event is the client's REJECTED with status 28 (consumer defined)", rdma_event_str(w.ev->event));
	rdma_ack_cm_event(w.ev);

	/* Each round leaves a waiter asleep on its channel for good (it
	 * holds the file, as on the kernel): few rounds. */
	for (int r = 0; r < 20; r++) {
		static struct waiter rw[20];
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *rid;
		check(ch && rdma_create_id(ch, &rid, NULL, RDMA_PS_TCP) == 0, "a round's channel and ID", "failed");
		rw[r].ch = ch;
		check(pthread_create(&th, NULL, round_wait, &rw[r]) == 0, "a round's waiter", "pthread_create");
		pthread_detach(th);
		for (i = 0; i < 1000; i++) {
			pid_t tid = __atomic_load_n(&rw[r].tid, __ATOMIC_ACQUIRE);
			if (tid && sleeping(tid))
				break;
			usleep(1000);
		}
		check(i < 1000, "the round's waiter sleeps", "it never did");
		check(rdma_resolve_addr(rid, NULL, (struct sockaddr *)&sin, 2000) == 0, "a round's rdma_resolve_addr", "failed");
		usleep(r % 5 * 20);
		check(rdma_destroy_id(rid) == 0, "a round's rdma_destroy_id", "failed");
		check(close(ch->fd) == 0, "a round's close", "failed");
	}
	usleep(200000);
	errno = 0;
	check(__atomic_load_n(&round_errors, __ATOMIC_SEQ_CST) == 0,
	      "no waiter fails when its event goes with its ID and the channel is closed", "some failed");
	printf("%d of 20 waiters took their event before the destroy\n", round_events);
	printf("done\n");
	return 0;
}
