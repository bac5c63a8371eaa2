/*
 * umad_pma.c DEV [checks]: the PMA of DEV's port 1 through
 * /dev/infiniband/umad0, as libibumad drives ib_umad (REGISTER_AGENT2 of
 * the Performance Management class on QP1, a Get with a GRH to the port's
 * own GID 0, poll, read). Prints the ClassPortInfo capability mask, the
 * PortCounters LinkDownedCounter and the PortCountersExtended data and
 * packet counters, one "name value" a line. With "checks", then checks
 * ib_umad's answers to calls it refuses, one "NAME: ok" a line.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <rdma/ib_user_mad.h>

#define MAD_SIZE 256
#define HDR 64

static int fd;
/* An address no page is mapped at (the first page), hidden from the
 * compiler's buffer checks. */
static void *volatile unmapped = (void *)8;
static uint32_t agent;
static uint8_t gid[16];

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void read_gid(const char *dev)
{
	char path[256], buf[64];
	FILE *f;
	unsigned g[8];

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gids/0", dev);
	if (!(f = fopen(path, "r")) || !fgets(buf, sizeof(buf), f))
		die(path);
	fclose(f);
	if (sscanf(buf, "%x:%x:%x:%x:%x:%x:%x:%x", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5], &g[6], &g[7]) != 8) {
		fprintf(stderr, "gid %s", buf);
		exit(1);
	}
	for (int i = 0; i < 8; i++) {
		gid[2 * i] = g[i] >> 8;
		gid[2 * i + 1] = g[i] & 0xff;
	}
}

/* request builds a PMA Get of attr for agent id, with a GRH when grh. */
static void request(uint8_t *b, uint32_t id, uint16_t attr, uint32_t tid, int grh)
{
	struct ib_user_mad_hdr *h = (struct ib_user_mad_hdr *)b;
	uint8_t *m = b + HDR;
	uint16_t a = htons(attr);
	uint64_t t = htobe64(tid);

	memset(b, 0, HDR + MAD_SIZE);
	h->id = id;
	h->timeout_ms = 1000;
	h->qpn = htonl(1);
	h->qkey = htonl(0x80010000);
	h->grh_present = grh;
	h->hop_limit = 255;
	memcpy(h->gid, gid, 16);
	m[0] = 1;    /* base version */
	m[1] = 0x04; /* Performance Management */
	m[2] = 1;    /* class version */
	m[3] = 0x01; /* Get */
	memcpy(m + 8, &t, 8);
	memcpy(m + 16, &a, 2);
	m[64 + 1] = 1; /* PortSelect */
}

/* get sends a Get of attr and returns the answer's MAD in m, or -errno of
 * the write; the answer's status is returned in *status (ETIMEDOUT: no
 * answer). */
static int get(uint16_t attr, uint8_t *m, uint32_t *status)
{
	static uint32_t tid = 100;
	uint8_t b[HDR + MAD_SIZE];
	struct pollfd p = {.fd = fd, .events = POLLIN};

	request(b, agent, attr, ++tid, 1);
	if (write(fd, b, sizeof(b)) != sizeof(b))
		return -errno;
	if (poll(&p, 1, 5000) != 1)
		die("poll");
	if (read(fd, b, sizeof(b)) < HDR)
		die("read");
	*status = ((struct ib_user_mad_hdr *)b)->status;
	memcpy(m, b + HDR, MAD_SIZE);
	return 0;
}

static uint64_t be64at(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return be64toh(v);
}

static void check(const char *name, int ok)
{
	printf("%s: %s\n", name, ok ? "ok" : "FAIL");
}

int main(int argc, char **argv)
{
	struct ib_user_mad_reg_req2 req = {.qpn = 1, .mgmt_class = 0x04, .mgmt_class_version = 1};
	uint8_t m[MAD_SIZE], b[HDR + MAD_SIZE];
	uint32_t status;
	int err;

	if (argc < 2) {
		fprintf(stderr, "usage: umad_pma DEV [checks]\n");
		return 2;
	}
	read_gid(argv[1]);
	fd = open("/dev/infiniband/umad0", O_RDWR | O_NONBLOCK);
	if (fd < 0)
		die("open umad0");
	if (ioctl(fd, IB_USER_MAD_REGISTER_AGENT2, &req) != 0)
		die("REGISTER_AGENT2");
	agent = req.id;

	if ((err = get(0x0001, m, &status)) < 0 || status != 0)
		die("ClassPortInfo");
	printf("method 0x%02x status 0x%04x\n", m[3], (m[4] << 8) | m[5]);
	printf("capability_mask 0x%04x\n", (m[64 + 2] << 8) | m[64 + 3]);
	if ((err = get(0x0012, m, &status)) < 0 || status != 0)
		die("PortCounters");
	printf("link_downed %u\n", m[64 + 7]);
	if ((err = get(0x001d, m, &status)) < 0 || status != 0)
		die("PortCountersExtended");
	printf("port_xmit_data %llu\n", (unsigned long long)be64at(m + 64 + 8));
	printf("port_rcv_data %llu\n", (unsigned long long)be64at(m + 64 + 16));
	printf("port_xmit_packets %llu\n", (unsigned long long)be64at(m + 64 + 24));
	printf("port_rcv_packets %llu\n", (unsigned long long)be64at(m + 64 + 32));
	if (argc < 3)
		return 0;

	/* An attribute rxe does not answer: GetResp, UNSUPPORTED_METHOD_ATTRIB. */
	check("PortSamplesControl is answered with status 0x000c",
	      get(0x0010, m, &status) == 0 && status == 0 && m[3] == 0x81 && ((m[4] << 8) | m[5]) == 0x000c);
	request(b, agent, 0x001d, 1, 0);
	check("a write without a GRH is EINVAL", write(fd, b, sizeof(b)) < 0 && errno == EINVAL);
	request(b, agent + 1, 0x001d, 2, 1);
	check("a write of an agent not registered is EINVAL", write(fd, b, sizeof(b)) < 0 && errno == EINVAL);
	request(b, 32, 0x001d, 3, 1);
	check("a write of agent 32 is EINVAL", write(fd, b, sizeof(b)) < 0 && errno == EINVAL);
	check("a write shorter than the header and an RMPP header is EINVAL",
	      write(fd, b, HDR + 35) < 0 && errno == EINVAL);
	{
		uint8_t big[HDR + MAD_SIZE + 8];
		request(big, agent, 0x001d, 4, 1);
		check("a write past one MAD is EINVAL", write(fd, big, sizeof(big)) < 0 && errno == EINVAL);
	}
	check("a write from an unreadable buffer is EFAULT", write(fd, unmapped, HDR + MAD_SIZE) < 0 && errno == EFAULT);
	{
		struct ib_user_mad_reg_req2 smi = {.qpn = 0, .mgmt_class = 0x01, .mgmt_class_version = 1};
		check("registering an agent on QP0 (SMI) is EPROTONOSUPPORT",
		      ioctl(fd, IB_USER_MAD_REGISTER_AGENT2, &smi) < 0 && errno == EPROTONOSUPPORT);
	}
	{
		struct ib_user_mad_reg_req2 bad = {.qpn = 2, .mgmt_class = 0x04, .mgmt_class_version = 1};
		check("registering an agent on QP2 is EINVAL", ioctl(fd, IB_USER_MAD_REGISTER_AGENT2, &bad) < 0 && errno == EINVAL);
	}
	{
		struct ib_user_mad_reg_req2 fl = {.qpn = 1, .mgmt_class = 0x04, .mgmt_class_version = 1, .flags = 0x80};
		check("unknown registration flags are EINVAL, the supported ones written back",
		      ioctl(fd, IB_USER_MAD_REGISTER_AGENT2, &fl) < 0 && errno == EINVAL && fl.flags == IB_USER_MAD_USER_RMPP);
	}
	check("REGISTER_AGENT2 from an unreadable argument is EFAULT",
	      ioctl(fd, IB_USER_MAD_REGISTER_AGENT2, unmapped) < 0 && errno == EFAULT);
	check("ENABLE_PKEY after a registration is EINVAL", ioctl(fd, IB_USER_MAD_ENABLE_PKEY) < 0 && errno == EINVAL);
	check("an unknown ioctl is ENOTTY", ioctl(fd, _IO(0x1b, 9)) < 0 && errno == ENOTTY);
	check("read with nothing queued is EAGAIN (O_NONBLOCK)", read(fd, b, sizeof(b)) < 0 && errno == EAGAIN);
	{
		/* A request to a GID no port has: no answer; the send comes
		 * back with status ETIMEDOUT after timeout_ms. */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		request(b, agent, 0x001d, 5, 1);
		((struct ib_user_mad_hdr *)b)->timeout_ms = 50;
		((struct ib_user_mad_hdr *)b)->gid[15] ^= 0xff;
		check("a request to another GID is sent", write(fd, b, sizeof(b)) == sizeof(b));
		check("... and read back with status ETIMEDOUT",
		      poll(&p, 1, 5000) == 1 && read(fd, b, sizeof(b)) == HDR + 24 &&
			      ((struct ib_user_mad_hdr *)b)->status == ETIMEDOUT);
	}
	{
		/* A read shorter than the packet is EINVAL and leaves it queued. */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		request(b, agent, 0x001d, 6, 1);
		check("a Get is sent", write(fd, b, sizeof(b)) == sizeof(b));
		check("a read too short for its answer is EINVAL",
		      poll(&p, 1, 5000) == 1 && read(fd, b, HDR + 10) < 0 && errno == EINVAL);
		check("... and the answer stays queued",
		      poll(&p, 1, 0) == 1 && read(fd, b, sizeof(b)) == HDR + MAD_SIZE && b[HDR + 3] == 0x81);
	}
	check("UNREGISTER_AGENT", ioctl(fd, IB_USER_MAD_UNREGISTER_AGENT, &agent) == 0);
	check("UNREGISTER_AGENT again is EINVAL", ioctl(fd, IB_USER_MAD_UNREGISTER_AGENT, &agent) < 0 && errno == EINVAL);
	printf("done\n");
	return 0;
}
