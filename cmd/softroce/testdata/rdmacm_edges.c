/*
 * rdmacm_edges.c: librdmacm's answers at the edges, as the kernel's
 * rdma_cm and ucma give them: the event channel's descriptor in
 * non-blocking mode and under poll(), errnos of calls out of order, a
 * connect nobody listens for, a listener that rejects with private data,
 * and an ID moved to another channel.
 *
 * Usage: rdmacm_edges IPV4_ADDRESS PORT. Prints "ok NAME" per check,
 * "FAIL NAME: why" and exits 1 at the first failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "check.h"

/* next waits for the next event on ch and checks its type. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *name)
{
	struct rdma_cm_event *ev;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int n = poll(&p, 1, 10000);
	if (n != 1 || !(p.revents & POLLIN)) {
		printf("FAIL %s: the channel is not readable\n", name);
		exit(1);
	}
	if (rdma_get_cm_event(ch, &ev)) {
		printf("FAIL %s: rdma_get_cm_event: %s\n", name, strerror(errno));
		exit(1);
	}
	if (ev->event != want) {
		printf("FAIL %s: event %s status %d, want %s\n", name, rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want));
		exit(1);
	}
	printf("ok %s\n", name);
	return ev;
}

/* qp_attr is a fresh RC QP's attributes (rdma_create_qp fills in the CQs
 * it creates). */
static struct ibv_qp_init_attr *qp_attr(struct ibv_qp_init_attr *qa)
{
	memset(qa, 0, sizeof(*qa));
	qa->qp_type = IBV_QPT_RC;
	qa->cap.max_send_wr = qa->cap.max_recv_wr = 2;
	qa->cap.max_send_sge = qa->cap.max_recv_sge = 1;
	return qa;
}

static void resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, const char *ip, int port)
{
	struct sockaddr_in dst = addr_of(ip, port);
	struct rdma_cm_event *ev;
	check(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr", "failed");
	ev = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED, the channel poll-readable first");
	rdma_ack_cm_event(ev);
	check(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route", "failed");
	ev = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
	rdma_ack_cm_event(ev);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_id *id, *lid, *cid;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct sockaddr_in sin;
	struct pollfd p;
	const char *ip;
	int port, flags;

	if (argc != 3) {
		fprintf(stderr, "usage: %s IPV4_ADDRESS PORT\n", argv[0]);
		return 2;
	}
	ip = argv[1];
	port = atoi(argv[2]);

	ch = rdma_create_event_channel();
	check(ch != NULL, "rdma_create_event_channel", "failed");
	flags = fcntl(ch->fd, F_GETFL);
	/* 0100000: the kernel's O_LARGEFILE, on every file a 64-bit process
	 * opens (glibc's is 0). */
	check(flags == (O_RDWR | 0100000), "the channel's fd is O_RDWR|O_LARGEFILE", "F_GETFL");
	check(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0 && fcntl(ch->fd, F_GETFL) == (flags | O_NONBLOCK),
	      "O_NONBLOCK on the channel", "fcntl");
	errno = 0;
	check(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "GET_EVENT with nothing queued is EAGAIN", "not EAGAIN");
	p.fd = ch->fd;
	p.events = POLLIN;
	check(poll(&p, 1, 0) == 0, "the channel is not readable with nothing queued", "poll");
	check(fcntl(ch->fd, F_SETFL, flags) == 0, "the channel blocking again", "fcntl");

	check(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id", "failed");
	sin = addr_of("192.0.2.77", 0);
	errno = 0;
	check(rdma_bind_addr(id, (struct sockaddr *)&sin) == -1 && errno == EADDRNOTAVAIL,
	      "rdma_bind_addr to an address not ours is EADDRNOTAVAIL", "not EADDRNOTAVAIL");
	errno = 0;
	check(rdma_disconnect(id) == -1 && errno == EINVAL, "rdma_disconnect of an unconnected ID is EINVAL", "not EINVAL");

	/* Nobody listens on port + 1. */
	resolve(ch, id, ip, port + 1);
	check(rdma_create_qp(id, NULL, qp_attr(&qa)) == 0, "rdma_create_qp", "failed");
	memset(&cp, 0, sizeof(cp));
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	check(rdma_connect(id, &cp) == 0, "rdma_connect", "failed");
	ev = next(ch, RDMA_CM_EVENT_REJECTED, "a connect nobody listens for is REJECTED");
	check(ev->status == 8, "with status 8 (invalid service ID)", "another status");
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	check(rdma_destroy_id(id) == 0, "rdma_destroy_id after the reject", "failed");

	/* A listener on port rejects with private data. */
	check(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id of the listener", "failed");
	sin = addr_of(ip, port);
	check(rdma_bind_addr(lid, (struct sockaddr *)&sin) == 0, "rdma_bind_addr of the listener", "failed");
	check(rdma_listen(lid, 4) == 0, "rdma_listen", "failed");
	check(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id of the client", "failed");
	errno = 0;
	check(rdma_bind_addr(id, (struct sockaddr *)&sin) == -1 && errno == EADDRINUSE,
	      "binding the listener's port again is EADDRINUSE", "not EADDRINUSE");
	rdma_destroy_id(id);
	check(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id of the client", "failed");
	resolve(ch, id, ip, port);
	check(rdma_create_qp(id, NULL, qp_attr(&qa)) == 0, "rdma_create_qp of the client", "failed");
	cp.private_data = "hello";
	cp.private_data_len = 6;
	check(rdma_connect(id, &cp) == 0, "rdma_connect to the listener", "failed");
	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "CONNECT_REQUEST");
	check(ev->listen_id == lid && ev->param.conn.private_data_len == 56 &&
		      memcmp(ev->param.conn.private_data, "hello", 6) == 0,
	      "it names the listener and carries the private data", "wrong listener or data");
	cid = ev->id;
	rdma_ack_cm_event(ev);
	check(rdma_reject(cid, "nope", 5) == 0, "rdma_reject with private data", "failed");
	ev = next(ch, RDMA_CM_EVENT_REJECTED, "the client is REJECTED");
	check(ev->status == 28 && ev->param.conn.private_data_len >= 5 && memcmp(ev->param.conn.private_data, "nope", 5) == 0,
	      "with status 28 (consumer defined) and the listener's data", "another status or data");
	rdma_ack_cm_event(ev);
	check(rdma_destroy_id(cid) == 0, "rdma_destroy_id of the rejected request", "failed");

	/* The client moves to another channel: its events follow it. */
	ch2 = rdma_create_event_channel();
	check(ch2 != NULL, "a second channel", "failed");
	check(rdma_migrate_id(id, ch2) == 0, "rdma_migrate_id", "failed");
	check(rdma_connect(id, &cp) == -1 && errno == EINVAL, "a second connect on the ID is EINVAL", "not EINVAL");
	rdma_destroy_qp(id);
	check(rdma_destroy_id(id) == 0, "rdma_destroy_id of the moved ID", "failed");
	check(rdma_destroy_id(lid) == 0, "rdma_destroy_id of the listener", "failed");
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
