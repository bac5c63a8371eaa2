/*
 * cm_edge.c: one side of a librdmacm connection at the Communication
 * Manager's edges, printing every event it gets with its status, its
 * private data and when it came, so that the same program on the kernel's
 * rdma_cm and on softroce can be compared line by line.
 *
 * Usage:
 *   cm_edge server PORT [-n N] [-r] [-w FILE]
 *   cm_edge client ADDRESS PORT [-n N] [-w FILE]
 *
 * The server listens on PORT (any IPv4 address) and handles N requests
 * (default 1): it accepts them, or with -r rejects them with the private
 * data "nope". The client makes N connections to ADDRESS:PORT at once
 * (each with the private data "hello"), resolving them all before it
 * connects the first. An established connection is disconnected at once
 * by the client (the server waits for its DREQ), or with -w by either side
 * once FILE exists; a side that gets DISCONNECTED first answers with
 * rdma_disconnect. A connection is over at TIMEWAIT_EXIT, REJECTED,
 * UNREACHABLE or an error event; the program exits 0 when all are over
 * (the server once it handled N requests and they are over), 1 on a
 * failed call, 2 after 200 s.
 *
 * Each line: "EV NAME id=I status=S data=TEXT t=MS", MS the milliseconds
 * since the connection's rdma_connect (client) or its CONNECT_REQUEST
 * (server); "LISTENING" once the server listens; "DONE" at the end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXCONN 8

struct conn {
	struct rdma_cm_id *id;
	long long t0;
	int established, initiated, over;
};

static struct conn conns[MAXCONN];
static int nconns;
static const char *waitfile;
static int server;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static struct conn *conn_of(struct rdma_cm_id *id)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i].id == id)
			return &conns[i];
	return NULL;
}

/* text prints the private data's leading printable characters. */
static void text(char *out, const void *data, int len)
{
	const unsigned char *p = data;
	int n = 0;
	for (int i = 0; p && i < len && i < 16 && p[i] >= 0x20 && p[i] < 0x7f; i++)
		out[n++] = p[i];
	out[n] = 0;
	if (n == 0)
		strcpy(out, "-");
}

static void print_event(struct rdma_cm_event *ev, struct conn *c)
{
	char data[20];
	text(data, ev->param.conn.private_data, ev->param.conn.private_data_len);
	printf("EV %s id=%d status=%d data=%s t=%lld\n", rdma_event_str(ev->event), c ? (int)(c - conns) : -1,
	       ev->status, data, c ? now_ms() - c->t0 : 0);
	fflush(stdout);
}

static struct ibv_qp_init_attr *qp_attr(struct ibv_qp_init_attr *qa)
{
	memset(qa, 0, sizeof(*qa));
	qa->qp_type = IBV_QPT_RC;
	qa->cap.max_send_wr = qa->cap.max_recv_wr = 2;
	qa->cap.max_send_sge = qa->cap.max_recv_sge = 1;
	return qa;
}

static void disconnect(struct conn *c)
{
	c->initiated = 1;
	if (rdma_disconnect(c->id))
		die("rdma_disconnect");
	printf("DISCONNECT id=%d t=%lld\n", (int)(c - conns), now_ms() - c->t0);
	fflush(stdout);
}

/* next waits for an event, disconnecting the established connections
 * once the wait file exists. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, long long deadline)
{
	struct rdma_cm_event *ev;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	while (poll(&p, 1, 100) == 0) {
		if (now_ms() > deadline) {
			printf("FAIL timeout\n");
			fflush(stdout);
			exit(2);
		}
		if (waitfile && access(waitfile, F_OK) == 0)
			for (int i = 0; i < nconns; i++)
				if (conns[i].established && !conns[i].initiated && !conns[i].over)
					disconnect(&conns[i]);
	}
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	return ev;
}

static void wait_for(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *what)
{
	struct rdma_cm_event *ev = next(ch, now_ms() + 10000);
	if (ev->event != want) {
		printf("FAIL %s: %s status %d\n", what, rdma_event_str(ev->event), ev->status);
		exit(1);
	}
	rdma_ack_cm_event(ev);
}

/* handle deals with one event of a connection; it returns 1 once the
 * connection is over. */
static int handle(struct rdma_cm_event *ev, struct conn *c)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		c->established = 1;
		if (!waitfile && !server)
			disconnect(c);
		return 0;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (!c->initiated) {
			c->initiated = 1;
			if (rdma_disconnect(c->id))
				die("rdma_disconnect after DISCONNECTED");
		}
		return 0;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: cm_edge server PORT [-n N] [-r] [-w FILE]\n"
			"       cm_edge client ADDRESS PORT [-n N] [-w FILE]\n");
	exit(64);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa;
	struct sockaddr_in sin;
	int reject = 0, n = 1, over = 0, handled = 0, opt;
	long long deadline = now_ms() + 200000;
	const char *addr = NULL;

	if (argc < 3)
		usage();
	server = strcmp(argv[1], "server") == 0;
	if (!server && strcmp(argv[1], "client") != 0)
		usage();
	if (!server) {
		addr = argv[2];
		argv++;
		argc--;
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(atoi(argv[2]));
	if (addr && inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
		usage();
	optind = 3;
	while ((opt = getopt(argc, argv, "n:rw:")) != -1) {
		switch (opt) {
		case 'n':
			n = atoi(optarg);
			break;
		case 'r':
			reject = 1;
			break;
		case 'w':
			waitfile = optarg;
			break;
		default:
			usage();
		}
	}
	if (n < 1 || n > MAXCONN)
		usage();
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;

	if (server) {
		struct rdma_cm_id *lid;
		if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_bind_addr(lid, (struct sockaddr *)&sin))
			die("rdma_bind_addr");
		if (rdma_listen(lid, MAXCONN))
			die("rdma_listen");
		printf("LISTENING\n");
		fflush(stdout);
		while (handled < n || over < nconns) {
			ev = next(ch, deadline);
			struct conn *c = conn_of(ev->id);
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				c = &conns[nconns++];
				c->id = ev->id;
				c->t0 = now_ms();
				handled++;
				print_event(ev, c);
				rdma_ack_cm_event(ev);
				if (reject) {
					if (rdma_reject(c->id, "nope", 5))
						die("rdma_reject");
					c->over = 1;
					over++;
					continue;
				}
				if (rdma_create_qp(c->id, NULL, qp_attr(&qa)))
					die("rdma_create_qp");
				if (rdma_accept(c->id, &cp))
					die("rdma_accept");
				continue;
			}
			print_event(ev, c);
			if (c && !c->over && handle(ev, c)) {
				c->over = 1;
				over++;
			}
			rdma_ack_cm_event(ev);
		}
		for (int i = 0; i < nconns; i++) {
			if (conns[i].id->qp)
				rdma_destroy_qp(conns[i].id);
			rdma_destroy_id(conns[i].id);
		}
		rdma_destroy_id(lid);
	} else {
		for (int i = 0; i < n; i++) {
			struct conn *c = &conns[nconns++];
			if (rdma_create_id(ch, &c->id, NULL, RDMA_PS_TCP))
				die("rdma_create_id");
			if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sin, 2000))
				die("rdma_resolve_addr");
			wait_for(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED");
			if (rdma_resolve_route(c->id, 2000))
				die("rdma_resolve_route");
			wait_for(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
			if (rdma_create_qp(c->id, NULL, qp_attr(&qa)))
				die("rdma_create_qp");
		}
		cp.private_data = "hello";
		cp.private_data_len = 6;
		for (int i = 0; i < n; i++) {
			conns[i].t0 = now_ms();
			if (rdma_connect(conns[i].id, &cp))
				die("rdma_connect");
		}
		while (over < nconns) {
			ev = next(ch, deadline);
			struct conn *c = conn_of(ev->id);
			print_event(ev, c);
			if (c && !c->over && handle(ev, c)) {
				c->over = 1;
				over++;
			}
			rdma_ack_cm_event(ev);
		}
		for (int i = 0; i < nconns; i++) {
			rdma_destroy_qp(conns[i].id);
			rdma_destroy_id(conns[i].id);
		}
	}
	rdma_destroy_event_channel(ch);
	printf("DONE\n");
	return 0;
}
