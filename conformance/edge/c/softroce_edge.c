/*
 * softroce_edge: drives the edge cases of the verbs through libibverbs and
 * reports what the device answered, one line per observation:
 *
 *     CASE CHECK RESULT
 *
 * RESULT is an errno name ("EINVAL", "0" for success) or a completion
 * status as ibv_wc_status_str prints it, spaces replaced by '_'. The
 * program judges nothing: the caller compares the lines with the kernel's
 * answers. It exits 0 when every step it needed ran, 1 when setting up a
 * case failed ("CASE setup ..." says where), 2 on bad usage.
 *
 * usage: softroce_edge [-d DEVICE] [-g GID_INDEX] CASE...
 *
 * Cases:
 *   illegal  modify QP transitions outside the table of ib_modify_qp_is_ok
 *            (and attribute masks missing a required bit), next to the
 *            legal ones, on an RC QP.
 *   flush    receives posted in INIT and a send posted in ERR complete with
 *            IBV_WC_WR_FLUSH_ERR once the QP is in ERR.
 *   badrkey  an RDMA WRITE to the peer (a second process) with a wrong rkey.
 *   send     a SEND to a peer (a second process) with a receive posted,
 *            retry_cnt 1, rnr_retry 1: success, unless the peer is made
 *            silent or answers with RNR NAKs.
 *   rnr      a SEND to a peer that posted no receive, rnr_retry 1.
 *   silent   a SEND to a peer process whose QP is gone (nothing answers),
 *            retry_cnt 1: the transport retries and gives up.
 *   killed   RDMA WRITEs to a peer process killed (SIGKILL) while WRITEs
 *            are in flight.
 *
 * Two cases wait for the caller between setting up and acting, so that it
 * can change the device meanwhile (inject a fault): they print what the
 * caller needs ("CASE qpn 0x11", "CASE rkey 0x1234") and read one line
 * from stdin before they go on.
 *   errwait    a QP connected to itself with 3 receives posted; after the
 *              line, the completions that arrive within 5 s.
 *   writewait  an RDMA WRITE to the peer with its rkey, posted after the
 *              line.
 *   errafter   after the line, 50 RDMA WRITEs to the peer (16 in flight):
 *              how many succeeded before the first error, and that error.
 *   cqwait     a QP connected to itself with a receive posted; after the
 *              line, a SEND to itself: the completions that arrive within
 *              3 s, the milliseconds from the post to the first, and the
 *              async events (ibv_get_async_event) seen meanwhile.
 *
 * The peer of the two-process cases is a child forked before any verbs
 * call: it opens the device on its own, so it is a second client of the
 * device with its own objects, as a server program would be. The two
 * exchange their QP numbers, PSNs, GIDs and buffer keys over a socketpair.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF_SIZE 4096
#define DEPTH 16

static const char *dev_name;
static int gid_index = 1;

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

/* info is what one side tells the other to connect. */
struct info {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void out(const char *c, const char *check, const char *result)
{
	printf("%s %s %s\n", c, check, result);
	fflush(stdout);
}

static const char *errname(int e)
{
	const char *n;

	if (e == 0)
		return "0";
	n = strerrorname_np(e);
	return n ? n : "E?";
}

static void out_errno(const char *c, const char *check, int e)
{
	out(c, check, errname(e));
}

static void out_status(const char *c, const char *check, enum ibv_wc_status s)
{
	char b[64];
	size_t i;

	snprintf(b, sizeof(b), "%s", ibv_wc_status_str(s));
	for (i = 0; b[i]; i++)
		if (b[i] == ' ')
			b[i] = '_';
	out(c, check, b);
}

static int fail(const char *c, const char *what, int e)
{
	printf("%s setup %s: %s\n", c, what, errname(e));
	fflush(stdout);
	return -1;
}

static int open_end(const char *c, struct end *e)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr ia = {0};
	int i, n;

	memset(e, 0, sizeof(*e));
	list = ibv_get_device_list(&n);
	if (!list || n == 0)
		return fail(c, "ibv_get_device_list", errno ? errno : ENODEV);
	for (i = 0; i < n; i++)
		if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name))
			break;
	if (i == n) {
		ibv_free_device_list(list);
		return fail(c, "no such device", ENODEV);
	}
	e->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!e->ctx)
		return fail(c, "ibv_open_device", errno);
	if (!(e->pd = ibv_alloc_pd(e->ctx)))
		return fail(c, "ibv_alloc_pd", errno);
	if (!(e->cq = ibv_create_cq(e->ctx, 4 * DEPTH, NULL, NULL, 0)))
		return fail(c, "ibv_create_cq", errno);
	e->buf = calloc(1, BUF_SIZE);
	if (!e->buf)
		return fail(c, "calloc", ENOMEM);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!e->mr)
		return fail(c, "ibv_reg_mr", errno);
	ia.send_cq = e->cq;
	ia.recv_cq = e->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = DEPTH;
	ia.cap.max_recv_wr = DEPTH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	if (!(e->qp = ibv_create_qp(e->pd, &ia)))
		return fail(c, "ibv_create_qp", errno);
	return 0;
}

static void close_end(struct end *e)
{
	if (e->qp)
		ibv_destroy_qp(e->qp);
	if (e->mr)
		ibv_dereg_mr(e->mr);
	if (e->cq)
		ibv_destroy_cq(e->cq);
	if (e->pd)
		ibv_dealloc_pd(e->pd);
	if (e->ctx)
		ibv_close_device(e->ctx);
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, const struct info *peer, uint8_t min_rnr_timer)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

/* to_rts: timeout 10 is 4.096 us * 2^10, about 4 ms per try. */
static int to_rts(struct ibv_qp *qp, uint32_t psn, uint8_t retry_cnt, uint8_t rnr_retry)
{
	struct ibv_qp_attr a = {0};

	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 10;
	a.retry_cnt = retry_cnt;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int my_info(struct end *e, uint32_t psn, struct info *in)
{
	memset(in, 0, sizeof(*in));
	in->qpn = e->qp->qp_num;
	in->psn = psn;
	in->rkey = e->mr->rkey;
	in->addr = (uintptr_t)e->buf;
	return ibv_query_gid(e->ctx, 1, gid_index, &in->gid);
}

static int xfer(int fd, void *p, size_t n, int wr)
{
	char *b = p;

	while (n > 0) {
		ssize_t r = wr ? write(fd, b, n) : read(fd, b, n);
		if (r <= 0)
			return -1;
		b += r;
		n -= r;
	}
	return 0;
}

/* poll_one waits up to ms milliseconds for one completion. */
static int poll_one(struct ibv_cq *cq, int ms, struct ibv_wc *wc)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > ms)
			return 0;
		usleep(100);
	}
}

static int post_send(struct end *e, enum ibv_wr_opcode op, uint64_t wr_id, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)e->buf, .length = 64, .lkey = e->mr->lkey};
	struct ibv_send_wr wr = {0}, *bad;

	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(e->qp, &wr, &bad);
}

static int post_recv(struct end *e, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)e->buf, .length = BUF_SIZE, .lkey = e->mr->lkey};
	struct ibv_recv_wr wr = {0}, *bad;

	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(e->qp, &wr, &bad);
}

/* illegal: transitions and masks the kernel refuses, between legal ones. */
static int case_illegal(void)
{
	const char *c = "illegal";
	struct end e;
	struct ibv_qp_attr a = {0};
	struct info self;

	if (open_end(c, &e))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	out_errno(c, "RESET->RTR", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	out_errno(c, "RESET->RTS", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	out_errno(c, "RESET->INIT_without_PORT", ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
	a.qp_state = IBV_QPS_INIT;
	a.sq_psn = 1;
	out_errno(c, "RESET->INIT_with_SQ_PSN", ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
	out_errno(c, "RESET->INIT", to_init(e.qp));
	a.qp_state = IBV_QPS_RTS;
	out_errno(c, "INIT->RTS", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_SQD;
	out_errno(c, "INIT->SQD", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	if (my_info(&e, 0, &self))
		return fail(c, "ibv_query_gid", errno);
	a.qp_state = IBV_QPS_RTR;
	out_errno(c, "INIT->RTR_without_AV", ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
									   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	out_errno(c, "INIT->RTR", to_rtr(e.qp, &self, 12));
	a.qp_state = IBV_QPS_RTS;
	out_errno(c, "RTR->RTS_without_TIMEOUT", ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
									      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	out_errno(c, "RTR->RTS", to_rts(e.qp, 0, 7, 7));
	a.qp_state = IBV_QPS_INIT;
	out_errno(c, "RTS->INIT", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_ERR;
	out_errno(c, "RTS->ERR", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	out_errno(c, "ERR->RTS", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	out_errno(c, "ERR->INIT", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RESET;
	out_errno(c, "ERR->RESET", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	close_end(&e);
	return 0;
}

/* flush: work requests on a QP in ERR complete with IBV_WC_WR_FLUSH_ERR. */
static int case_flush(void)
{
	const char *c = "flush";
	struct end e;
	struct ibv_qp_attr a = {0};
	struct ibv_wc wc;
	int i, n = 0;

	if (open_end(c, &e))
		return -1;
	if (to_init(e.qp))
		return fail(c, "to INIT", errno);
	for (i = 0; i < 3; i++)
		if (post_recv(&e, 100 + i))
			return fail(c, "ibv_post_recv", errno);
	a.qp_state = IBV_QPS_ERR;
	out_errno(c, "INIT->ERR", ibv_modify_qp(e.qp, &a, IBV_QP_STATE));
	while (poll_one(e.cq, 2000, &wc) > 0) {
		char check[32];
		snprintf(check, sizeof(check), "recv_%" PRIu64, wc.wr_id);
		out_status(c, check, wc.status);
		n++;
	}
	printf("%s recv_completions %d\n", c, n);
	out_errno(c, "post_send_in_ERR", post_send(&e, IBV_WR_SEND, 7, 0, 0));
	if (poll_one(e.cq, 2000, &wc) > 0)
		out_status(c, wc.opcode == IBV_WC_SEND ? "send" : "send_opcode?", wc.status);
	else
		out(c, "send", "no_completion");
	close_end(&e);
	return 0;
}

/* peer is the child of the two-process cases. */
enum peer_mode {
	PEER_RECV,    /* posts receives, keeps its QP */
	PEER_NO_RECV, /* posts no receive */
	PEER_GONE,    /* destroys its QP after connecting: nothing answers */
};

static void peer(int fd, enum peer_mode mode)
{
	struct end e;
	struct info mine, theirs;
	char go;
	int i;

	if (open_end("peer", &e) || my_info(&e, 0x1000, &mine))
		_exit(1);
	if (xfer(fd, &mine, sizeof(mine), 1) || xfer(fd, &theirs, sizeof(theirs), 0))
		_exit(1);
	if (to_init(e.qp) || to_rtr(e.qp, &theirs, 1) || to_rts(e.qp, 0x1000, 7, 7))
		_exit(1);
	if (mode == PEER_RECV)
		for (i = 0; i < DEPTH; i++)
			post_recv(&e, i);
	if (mode == PEER_GONE) {
		ibv_destroy_qp(e.qp);
		e.qp = NULL;
	}
	go = 1;
	if (xfer(fd, &go, 1, 1))
		_exit(1);
	/* Stay until the parent is done (or kills us). */
	xfer(fd, &go, 1, 0);
	close_end(&e);
	_exit(0);
}

/* pair forks the peer and connects e to it. */
static pid_t pair(const char *c, struct end *e, struct info *theirs, int *fdp, enum peer_mode mode,
		  uint8_t retry_cnt, uint8_t rnr_retry)
{
	int sv[2];
	pid_t pid;
	struct info mine;
	char go;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return fail(c, "socketpair", errno);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return fail(c, "fork", errno);
	if (pid == 0) {
		close(sv[0]);
		peer(sv[1], mode);
	}
	close(sv[1]);
	*fdp = sv[0];
	if (open_end(c, e) || my_info(e, 0x2000, &mine))
		return -1;
	if (xfer(sv[0], theirs, sizeof(*theirs), 0) || xfer(sv[0], &mine, sizeof(mine), 1))
		return fail(c, "exchange with the peer", EPIPE);
	if (to_init(e->qp) || to_rtr(e->qp, theirs, 1) || to_rts(e->qp, 0x2000, retry_cnt, rnr_retry))
		return fail(c, "connect", errno);
	if (xfer(sv[0], &go, 1, 0))
		return fail(c, "peer ready", EPIPE);
	return pid;
}

static void unpair(struct end *e, int fd, pid_t pid)
{
	char go = 1;

	xfer(fd, &go, 1, 1);
	close(fd);
	waitpid(pid, NULL, 0);
	close_end(e);
}

/* one_send posts one work request and reports its completion. */
static int one_send(const char *c, enum peer_mode mode, enum ibv_wr_opcode op, int bad_rkey, uint8_t retry_cnt,
		    uint8_t rnr_retry)
{
	struct end e;
	struct info theirs;
	struct ibv_wc wc;
	int fd;
	pid_t pid = pair(c, &e, &theirs, &fd, mode, retry_cnt, rnr_retry);

	if (pid < 0)
		return -1;
	if (op == IBV_WR_RDMA_WRITE) {
		/* A good WRITE first: the connection works. */
		post_send(&e, op, 1, theirs.addr, theirs.rkey);
		if (poll_one(e.cq, 5000, &wc) > 0)
			out_status(c, "good_rkey", wc.status);
		else
			out(c, "good_rkey", "no_completion");
	}
	post_send(&e, op, 2, theirs.addr, bad_rkey ? theirs.rkey ^ 0x5a5a00 : theirs.rkey);
	if (poll_one(e.cq, 10000, &wc) > 0)
		out_status(c, "status", wc.status);
	else
		out(c, "status", "no_completion");
	unpair(&e, fd, pid);
	return 0;
}

/* killed: the peer dies while RDMA WRITEs to it are in flight. */
static int case_killed(void)
{
	const char *c = "killed";
	struct end e;
	struct info theirs;
	struct ibv_wc wc;
	int fd, posted = 0, done = 0, killed = 0, good = 0;
	enum ibv_wc_status first_err = IBV_WC_SUCCESS;
	pid_t pid = pair(c, &e, &theirs, &fd, PEER_RECV, 2, 7);

	if (pid < 0)
		return -1;
	while (done < posted || !killed || posted == 0) {
		while (posted - done < DEPTH && first_err == IBV_WC_SUCCESS && posted < 100000) {
			if (post_send(&e, IBV_WR_RDMA_WRITE, posted, theirs.addr, theirs.rkey))
				break;
			posted++;
		}
		if (poll_one(e.cq, 10000, &wc) == 0) {
			out(c, "status", "no_completion");
			break;
		}
		done++;
		if (wc.status == IBV_WC_SUCCESS)
			good++;
		else if (first_err == IBV_WC_SUCCESS)
			first_err = wc.status;
		if (good == 200 && !killed) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			killed = 1;
		}
		if (first_err != IBV_WC_SUCCESS && done == posted)
			break;
	}
	out(c, "writes_before_kill", good >= 200 ? "200+" : "fewer");
	out_status(c, "first_error", first_err);
	close(fd);
	close_end(&e);
	return 0;
}

/* wait_line reads one line from stdin: the caller's go-ahead. */
static void wait_line(void)
{
	char line[64];

	if (!fgets(line, sizeof(line), stdin))
		return;
}

/* errwait: completions of a QP the caller moves to ERR from outside. */
static int case_errwait(void)
{
	const char *c = "errwait";
	struct end e;
	struct info self;
	struct ibv_wc wc;
	char b[32];
	int i, n = 0;

	if (open_end(c, &e))
		return -1;
	if (my_info(&e, 0x3000, &self))
		return fail(c, "ibv_query_gid", errno);
	if (to_init(e.qp) || to_rtr(e.qp, &self, 12) || to_rts(e.qp, 0x3000, 7, 7))
		return fail(c, "connect to itself", errno);
	for (i = 0; i < 3; i++)
		if (post_recv(&e, 100 + i))
			return fail(c, "ibv_post_recv", errno);
	snprintf(b, sizeof(b), "%#x", e.qp->qp_num);
	out(c, "qpn", b);
	wait_line();
	while (poll_one(e.cq, 5000, &wc) > 0) {
		snprintf(b, sizeof(b), "recv_%" PRIu64, wc.wr_id);
		out_status(c, b, wc.status);
		n++;
	}
	printf("%s recv_completions %d\n", c, n);
	fflush(stdout);
	close_end(&e);
	return 0;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* cqwait: completions, their delay and the CQ's events, under a CQ fault. */
static int case_cqwait(void)
{
	const char *c = "cqwait";
	struct end e;
	struct info self;
	struct ibv_wc wc;
	struct ibv_async_event ev;
	struct timespec t0;
	char b[64];
	long first = -1;
	int n = 0, flags;

	if (open_end(c, &e))
		return -1;
	if (my_info(&e, 0x4000, &self))
		return fail(c, "ibv_query_gid", errno);
	if (to_init(e.qp) || to_rtr(e.qp, &self, 12) || to_rts(e.qp, 0x4000, 7, 7))
		return fail(c, "connect to itself", errno);
	if (post_recv(&e, 100))
		return fail(c, "ibv_post_recv", errno);
	flags = fcntl(e.ctx->async_fd, F_GETFL);
	fcntl(e.ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
	snprintf(b, sizeof(b), "%#x", e.qp->qp_num);
	out(c, "qpn", b);
	wait_line();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (post_send(&e, IBV_WR_SEND, 7, 0, 0))
		return fail(c, "ibv_post_send", errno);
	while (ms_since(&t0) < 3000) {
		if (ibv_poll_cq(e.cq, 1, &wc) > 0) {
			if (first < 0)
				first = ms_since(&t0);
			snprintf(b, sizeof(b), "%s_%s", wc.opcode == IBV_WC_RECV ? "recv" : "send",
				 wc.status == IBV_WC_SUCCESS ? "ok" : "error");
			out(c, "completion", b);
			n++;
		}
		if (ibv_get_async_event(e.ctx, &ev) == 0) {
			snprintf(b, sizeof(b), "%s", ibv_event_type_str(ev.event_type));
			for (size_t i = 0; b[i]; i++)
				if (b[i] == ' ')
					b[i] = '_';
			out(c, "event", b);
			ibv_ack_async_event(&ev);
		}
		if (n == 2)
			break;
		usleep(200);
	}
	printf("%s completions %d\n%s first_ms %ld\n", c, n, c, first);
	fflush(stdout);
	close_end(&e);
	return 0;
}

/* errafter: a stream of WRITEs that a fault may cut short. */
static int case_errafter(void)
{
	const char *c = "errafter";
	struct end e;
	struct info theirs;
	struct ibv_wc wc;
	char b[32];
	int fd, posted = 0, done = 0, good = 0;
	enum ibv_wc_status first_err = IBV_WC_SUCCESS;
	pid_t pid = pair(c, &e, &theirs, &fd, PEER_RECV, 7, 7);

	if (pid < 0)
		return -1;
	snprintf(b, sizeof(b), "%#x", e.qp->qp_num);
	out(c, "qpn", b);
	wait_line();
	while (done < 50) {
		while (posted < 50 && posted - done < DEPTH && !post_send(&e, IBV_WR_RDMA_WRITE, posted, theirs.addr, theirs.rkey))
			posted++;
		if (poll_one(e.cq, 5000, &wc) == 0)
			break;
		done++;
		if (wc.status == IBV_WC_SUCCESS && first_err == IBV_WC_SUCCESS)
			good++;
		else if (wc.status != IBV_WC_SUCCESS && first_err == IBV_WC_SUCCESS)
			first_err = wc.status;
		if (first_err != IBV_WC_SUCCESS && done == posted)
			break;
	}
	snprintf(b, sizeof(b), "%d", good);
	out(c, "good", b);
	out_status(c, "first_error", first_err);
	unpair(&e, fd, pid);
	return 0;
}

/* writewait: an RDMA WRITE the caller may have a fault stand in the way of. */
static int case_writewait(void)
{
	const char *c = "writewait";
	struct end e;
	struct info theirs;
	struct ibv_wc wc;
	char b[32];
	int fd;
	pid_t pid = pair(c, &e, &theirs, &fd, PEER_RECV, 7, 7);

	if (pid < 0)
		return -1;
	snprintf(b, sizeof(b), "%#x", theirs.rkey);
	out(c, "rkey", b);
	wait_line();
	post_send(&e, IBV_WR_RDMA_WRITE, 1, theirs.addr, theirs.rkey);
	if (poll_one(e.cq, 10000, &wc) > 0)
		out_status(c, "status", wc.status);
	else
		out(c, "status", "no_completion");
	unpair(&e, fd, pid);
	return 0;
}

int main(int argc, char **argv)
{
	int opt, i, rc = 0;

	while ((opt = getopt(argc, argv, "d:g:")) != -1) {
		switch (opt) {
		case 'd':
			dev_name = optarg;
			break;
		case 'g':
			gid_index = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: %s [-d DEVICE] [-g GID_INDEX] illegal|flush|send|badrkey|rnr|silent|killed|errwait|writewait|errafter|cqwait...\n", argv[0]);
			return 2;
		}
	}
	if (optind == argc) {
		fprintf(stderr, "usage: %s [-d DEVICE] [-g GID_INDEX] illegal|flush|send|badrkey|rnr|silent|killed|errwait|writewait|errafter|cqwait...\n", argv[0]);
		return 2;
	}
	for (i = optind; i < argc; i++) {
		const char *c = argv[i];
		int r;

		if (!strcmp(c, "illegal"))
			r = case_illegal();
		else if (!strcmp(c, "flush"))
			r = case_flush();
		else if (!strcmp(c, "badrkey"))
			r = one_send(c, PEER_RECV, IBV_WR_RDMA_WRITE, 1, 7, 7);
		else if (!strcmp(c, "send"))
			r = one_send(c, PEER_RECV, IBV_WR_SEND, 0, 1, 1);
		else if (!strcmp(c, "errwait"))
			r = case_errwait();
		else if (!strcmp(c, "errafter"))
			r = case_errafter();
		else if (!strcmp(c, "cqwait"))
			r = case_cqwait();
		else if (!strcmp(c, "writewait"))
			r = case_writewait();
		else if (!strcmp(c, "rnr"))
			r = one_send(c, PEER_NO_RECV, IBV_WR_SEND, 0, 7, 1);
		else if (!strcmp(c, "silent"))
			r = one_send(c, PEER_GONE, IBV_WR_SEND, 0, 1, 7);
		else if (!strcmp(c, "killed"))
			r = case_killed();
		else {
			fprintf(stderr, "%s: unknown case %s\n", argv[0], c);
			return 2;
		}
		if (r)
			rc = 1;
	}
	return rc;
}
