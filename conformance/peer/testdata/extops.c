/*
 * extops: RDMA ATOMIC_WRITE and FLUSH between the kernel's rxe (in a peer
 * VM) and softroce, for conformance/peer's TestInteropExtOps. Built on the
 * host against Debian 13's libibverbs (rdma-core 56, the first Debian
 * release whose verbs have ibv_wr_flush).
 *
 *   extops -p PORT [-g GIDX] target       listen on PORT; expose a 4 KiB MR
 *                                         (REMOTE_WRITE, FLUSH_GLOBAL); after
 *                                         the peer's "done" print its first
 *                                         8 bytes ("TARGET 0x...")
 *   extops -p PORT [-g GIDX] send HOST    connect to HOST:PORT; into the
 *                                         peer's MR: ATOMIC_WRITE, FLUSH
 *                                         global of a range and of the MR,
 *                                         FLUSH persistent (which fails: no
 *                                         MR can be persistent); one line
 *                                         per operation with its status
 *
 * The exchange over TCP is one line each way (the client first):
 * "QPN PSN VADDR RKEY GID" in hex. Path MTU 1024, timeout 14, retry 7.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MRLEN 4096
#define ATOMIC_VALUE 0x0123456789abcdefULL

struct dest {
	unsigned qpn, psn, rkey;
	unsigned long long vaddr;
	union ibv_gid gid;
};

static void die(const char *what)
{
	fprintf(stderr, "extops: %s: %s\n", what, strerror(errno));
	exit(2);
}

static int tcp(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = host ? 0 : AI_PASSIVE};
	struct addrinfo *res;
	int fd, one = 1;

	if (getaddrinfo(host, port, &hints, &res))
		die("getaddrinfo");
	fd = socket(res->ai_family, res->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	if (host) {
		if (connect(fd, res->ai_addr, res->ai_addrlen))
			die("connect");
		return fd;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1))
		die("listen");
	int c = accept(fd, NULL, NULL);
	if (c < 0)
		die("accept");
	close(fd);
	return c;
}

static void put_dest(int fd, const struct dest *d)
{
	char buf[128];
	int n = snprintf(buf, sizeof buf, "%06x %06x %016llx %08x ", d->qpn, d->psn, d->vaddr, d->rkey);
	for (int i = 0; i < 16; i++)
		n += snprintf(buf + n, sizeof buf - n, "%02x", d->gid.raw[i]);
	buf[n++] = '\n';
	if (write(fd, buf, n) != n)
		die("write address");
}

static void read_line(int fd, char *buf, size_t size)
{
	size_t n = 0;
	while (n + 1 < size) {
		if (read(fd, buf + n, 1) != 1)
			die("read");
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = 0;
}

static void get_dest(int fd, struct dest *d)
{
	char buf[128], gid[33];
	read_line(fd, buf, sizeof buf);
	if (sscanf(buf, "%x %x %llx %x %32s", &d->qpn, &d->psn, &d->vaddr, &d->rkey, gid) != 5)
		die("parse address");
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(gid + 2 * i, "%2x", &v);
		d->gid.raw[i] = v;
	}
}

static void to_rts(struct ibv_qp *qp, int gidx, const struct dest *my, const struct dest *rem, int access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = rem->qpn;
	a.rq_psn = rem->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = rem->gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my->psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

/* await_wc polls cq for one completion (5 s) and prints it as NAME's. */
static void await_wc(struct ibv_cq *cq, const char *name)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 5;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < end)
		usleep(100);
	if (n != 1) {
		printf("%s no completion\n", name);
		return;
	}
	printf("%s status=%s(%d) opcode=%d byte_len=%u\n", name, ibv_wc_status_str(wc.status), wc.status,
	       wc.status == IBV_WC_SUCCESS ? (int)wc.opcode : -1, wc.byte_len);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *port = NULL;
	int gidx = 1, opt;

	while ((opt = getopt(argc, argv, "p:g:")) != -1) {
		if (opt == 'p')
			port = optarg;
		else if (opt == 'g')
			gidx = atoi(optarg);
		else
			return 2;
	}
	if (!port || optind >= argc)
		return 2;
	int target = !strcmp(argv[optind], "target");
	const char *host = target ? NULL : argv[optind + 1];
	if (!target && !host)
		return 2;

	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("open device");
	struct ibv_device_attr_ex dx;
	if (ibv_query_device_ex(ctx, NULL, &dx))
		die("query device");
	printf("CAPS flush_global=%d flush_persistent=%d atomic_write=%d\n", !!(dx.device_cap_flags_ex & (1ULL << 38)),
	       !!(dx.device_cap_flags_ex & (1ULL << 39)), !!(dx.device_cap_flags_ex & (1ULL << 40)));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		die("PD/CQ");
	void *buf = aligned_alloc(4096, MRLEN);
	memset(buf, 0, MRLEN);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (target) {
		struct ibv_mr *p = ibv_reg_mr(pd, buf, MRLEN, access | IBV_ACCESS_FLUSH_PERSISTENT);
		printf("REG_PERSISTENT %s errno=%d\n", p ? "ok" : "failed", p ? 0 : errno);
		if (p)
			ibv_dereg_mr(p);
		access |= IBV_ACCESS_FLUSH_GLOBAL;
	}
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, MRLEN, access);
	if (!mr)
		die("reg MR");
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd, .sq_sig_all = 1,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
	if (!qp)
		die("create QP");
	struct dest my = {.qpn = qp->qp_num, .psn = target ? 0x222222 : 0x111111, .rkey = mr->rkey,
			  .vaddr = (uintptr_t)buf}, rem;
	if (ibv_query_gid(ctx, 1, gidx, &my.gid))
		die("query GID");

	int fd = tcp(host, port);
	if (target) {
		get_dest(fd, &rem);
		put_dest(fd, &my);
	} else {
		put_dest(fd, &my);
		get_dest(fd, &rem);
	}
	int qpaccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
	to_rts(qp, gidx, &my, &rem, qpaccess);
	printf("CONNECTED local QPN 0x%06x remote QPN 0x%06x\n", my.qpn, rem.qpn);
	fflush(stdout);

	if (target) {
		char line[16];
		read_line(fd, line, sizeof line);
		printf("TARGET 0x%016" PRIx64 "\n", *(uint64_t *)buf);
		return 0;
	}
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	uint64_t v = ATOMIC_VALUE;
	struct {
		const char *name;
		int op, type, level;
	} ops[] = {
		{"ATOMIC_WRITE", IBV_WR_ATOMIC_WRITE, 0, 0},
		{"FLUSH_GLOBAL_RANGE", IBV_WR_FLUSH, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE},
		{"FLUSH_GLOBAL_MR", IBV_WR_FLUSH, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR},
		{"FLUSH_PERSISTENT_RANGE", IBV_WR_FLUSH, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE},
	};
	for (unsigned i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		ibv_wr_start(qx);
		qx->wr_id = i + 1;
		qx->wr_flags = IBV_SEND_SIGNALED;
		if (ops[i].op == IBV_WR_ATOMIC_WRITE)
			ibv_wr_atomic_write(qx, rem.rkey, rem.vaddr, &v);
		else
			ibv_wr_flush(qx, rem.rkey, rem.vaddr, 8, ops[i].type, ops[i].level);
		if (ibv_wr_complete(qx)) {
			printf("%s post failed errno=%d\n", ops[i].name, errno);
			continue;
		}
		await_wc(cq, ops[i].name);
	}
	if (write(fd, "done\n", 5) != 5)
		die("write done");
	return 0;
}
