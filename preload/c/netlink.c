/*
 * netlink.c: socket(AF_NETLINK, SOCK_RAW|SOCK_DGRAM, NETLINK_RDMA), the
 * RDMA netlink family, answered by the daemon.
 *
 * The descriptor is a SOCK_SEQPACKET connection to the daemon (OP_OPEN of
 * "rdma_netlink", package preload's proto.go), after which each packet is
 * one netlink datagram both ways: read, write, send, recv, poll and their
 * flags (MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT) work on it as on a kernel
 * netlink socket. What differs is wrapped, for these descriptors only:
 *   bind, connect, getsockname, getpeername: the sockaddr_nl of a netlink
 *       socket, its port id autobound as the kernel does (the process's
 *       pid first, then negative numbers) and told to the daemon, which
 *       puts it in every reply;
 *   setsockopt, getsockopt at SOL_NETLINK: the kernel's options (only
 *       NETLINK_CAP_ACK changes what the daemon sends); SO_TYPE,
 *       SO_DOMAIN, SO_PROTOCOL as the kernel's;
 *   sendto, sendmsg: the destination must be the kernel (port id 0);
 *   recvfrom, recvmsg: the source is the kernel's sockaddr_nl.
 * A duplicate (dup, dup2, dup3, F_DUPFD) starts with the socket's port id
 * and options; an option set later through one number is not seen
 * through the other. Without a daemon (SOFTROCE_SOCK unset or not
 * answering) socket() fails with EPROTONOSUPPORT, as on a kernel without
 * ib_core.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "softroce_preload.h"

/* proto.go's NetlinkNode, NetlinkSetupMagic, NetlinkSetupCapAck. */
#define NL_NODE "rdma_netlink"
#define NL_SETUP_MAGIC 0x534e4c31u
#define NL_SETUP_CAP_ACK 1u

#define NL_MAX_FD 65536

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

/* One RDMA netlink socket. */
struct nl_sock {
	uint8_t on;       /* the descriptor is one */
	uint8_t bound;    /* its port id is set */
	uint8_t type;     /* SOCK_RAW or SOCK_DGRAM */
	uint32_t portid;  /* its port id, once bound */
	uint32_t opts;    /* the SOL_NETLINK flags set, bit per option */
};

static struct nl_sock nls[NL_MAX_FD];
static pthread_mutex_t nl_mu = PTHREAD_MUTEX_INITIALIZER;
static int32_t nl_rover = -4096; /* the next negative port id (nl_mu) */

REAL(int, socket, (int, int, int))
REAL(int, close, (int))
REAL(int, fcntl, (int, int, ...))
REAL(int, bind, (int, const struct sockaddr *, socklen_t))
REAL(int, connect, (int, const struct sockaddr *, socklen_t))
REAL(int, getsockname, (int, struct sockaddr *, socklen_t *))
REAL(int, getpeername, (int, struct sockaddr *, socklen_t *))
REAL(int, setsockopt, (int, int, int, const void *, socklen_t))
REAL(int, getsockopt, (int, int, int, void *, socklen_t *))
REAL(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t))
REAL(ssize_t, sendmsg, (int, const struct msghdr *, int))
REAL(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))
REAL(ssize_t, recvmsg, (int, struct msghdr *, int))
REAL(ssize_t, send, (int, const void *, size_t, int))

static int is_nl(int fd)
{
	return fd >= 0 && fd < NL_MAX_FD && __atomic_load_n(&nls[fd].on, __ATOMIC_ACQUIRE);
}

static int fail(int err)
{
	errno = err;
	return -1;
}

/* used reports whether another socket of the process holds portid
 * (nl_mu held). */
static int used(int fd, uint32_t portid)
{
	for (int i = 0; i < NL_MAX_FD; i++)
		if (i != fd && nls[i].on && nls[i].bound && nls[i].portid == portid)
			return 1;
	return 0;
}

/* setup tells the daemon the socket's port id and options (nl_mu held). */
static void setup(int fd)
{
	struct {
		struct nlmsghdr h;
		uint32_t magic, portid, bits;
	} m;
	memset(&m, 0, sizeof(m));
	m.h.nlmsg_len = sizeof(m);
	m.h.nlmsg_type = NLMSG_NOOP;
	m.magic = NL_SETUP_MAGIC;
	m.portid = nls[fd].portid;
	m.bits = (nls[fd].opts & (1u << NETLINK_CAP_ACK)) ? NL_SETUP_CAP_ACK : 0;
	get_send()(fd, &m, sizeof(m), MSG_NOSIGNAL);
}

/* autobind gives an unbound socket its port id, as netlink_autobind:
 * the process's pid when free, else a negative number (nl_mu held). */
static void autobind(int fd)
{
	uint32_t p = (uint32_t)getpid();
	if (nls[fd].bound)
		return;
	while (used(fd, p))
		p = (uint32_t)nl_rover--;
	nls[fd].portid = p;
	nls[fd].bound = 1;
	setup(fd);
}

static void autobind_locked(int fd)
{
	pthread_mutex_lock(&nl_mu);
	autobind(fd);
	pthread_mutex_unlock(&nl_mu);
}

int nl_socket(int type)
{
	const char *path = getenv("SOFTROCE_SOCK");
	struct sockaddr_un sa;
	struct frame_hdr h;
	char req[sizeof(h) + sizeof(NL_NODE) - 1];
	int base = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK), fd, err;
	ssize_t n;

	if (base != SOCK_RAW && base != SOCK_DGRAM)
		return fail(ESOCKTNOSUPPORT);
	if (!path || strlen(path) >= sizeof(sa.sun_path))
		return fail(EPROTONOSUPPORT);
	fd = get_socket()(AF_UNIX, SOCK_SEQPACKET | (type & SOCK_CLOEXEC), 0);
	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, path);
	do
		err = get_connect()(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (err < 0 && errno == EINTR);
	if (err < 0 || fd >= NL_MAX_FD)
		goto refused;
	memset(&h, 0, sizeof(h));
	h.op = OP_OPEN;
	h.len = sizeof(NL_NODE) - 1;
	h.aux = PROTO_VERSION;
	memcpy(req, &h, sizeof(h));
	memcpy(req + sizeof(h), NL_NODE, h.len);
	do
		n = get_send()(fd, req, sizeof(req), MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(req))
		goto refused;
	do
		n = get_recvfrom()(fd, &h, sizeof(h), 0, NULL, NULL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(h) || h.op != OP_OPEN || h.ret != 0)
		goto refused;
	if ((type & SOCK_NONBLOCK) && get_fcntl()(fd, F_SETFL, O_NONBLOCK) < 0)
		goto refused;
	pthread_mutex_lock(&nl_mu);
	memset(&nls[fd], 0, sizeof(nls[fd]));
	nls[fd].type = base;
	__atomic_store_n(&nls[fd].on, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&nl_mu);
	return fd;
refused:
	get_close()(fd);
	return fail(EPROTONOSUPPORT);
}

void nl_forget(int fd)
{
	if (is_nl(fd))
		__atomic_store_n(&nls[fd].on, 0, __ATOMIC_RELEASE);
}

void nl_dup(int oldfd, int newfd)
{
	if (!is_nl(oldfd) || newfd < 0 || newfd >= NL_MAX_FD || newfd == oldfd)
		return;
	pthread_mutex_lock(&nl_mu);
	nls[newfd] = nls[oldfd];
	pthread_mutex_unlock(&nl_mu);
}

/* nl_addr checks a netlink address argument (netlink_bind's and
 * netlink_connect's checks). */
static int nl_addr(const struct sockaddr *addr, socklen_t len)
{
	if (len < sizeof(struct sockaddr_nl) || !addr)
		return -EINVAL;
	if (addr->sa_family != AF_NETLINK)
		return -EINVAL;
	return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	const struct sockaddr_nl *nl = (const void *)addr;
	int err;

	if (!is_nl(fd))
		return get_bind()(fd, addr, len);
	if ((err = nl_addr(addr, len)) < 0)
		return fail(-err);
	pthread_mutex_lock(&nl_mu);
	if (nls[fd].bound && nl->nl_pid != nls[fd].portid)
		err = -EINVAL;
	else if (!nls[fd].bound && nl->nl_pid) {
		if (used(fd, nl->nl_pid))
			err = -EADDRINUSE;
		else {
			nls[fd].portid = nl->nl_pid;
			nls[fd].bound = 1;
			setup(fd);
		}
	} else
		autobind(fd);
	/* Multicast groups (nl_groups) are accepted: the daemon sends no
	 * notifications. */
	pthread_mutex_unlock(&nl_mu);
	return err < 0 ? fail(-err) : 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int err;

	if (!is_nl(fd))
		return get_connect()(fd, addr, len);
	if (addr && len >= sizeof(addr->sa_family) && addr->sa_family == AF_UNSPEC)
		return 0;
	if ((err = nl_addr(addr, len)) < 0)
		return fail(-err);
	autobind_locked(fd);
	return 0;
}

static int nl_name(int fd, struct sockaddr *addr, socklen_t *len, int peer)
{
	struct sockaddr_nl nl = {.nl_family = AF_NETLINK};

	if (!addr || !len)
		return fail(EFAULT);
	if (!peer) {
		pthread_mutex_lock(&nl_mu);
		nl.nl_pid = nls[fd].bound ? nls[fd].portid : 0;
		pthread_mutex_unlock(&nl_mu);
	}
	memcpy(addr, &nl, *len < sizeof(nl) ? *len : sizeof(nl));
	*len = sizeof(nl);
	return 0;
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (!is_nl(fd))
		return get_getsockname()(fd, addr, len);
	return nl_name(fd, addr, len, 0);
}

int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (!is_nl(fd))
		return get_getpeername()(fd, addr, len);
	return nl_name(fd, addr, len, 1);
}

/* The SOL_NETLINK options of netlink_setsockopt that are flags. */
static int nl_flag_opt(int opt)
{
	switch (opt) {
	case NETLINK_PKTINFO:
	case NETLINK_BROADCAST_ERROR:
	case NETLINK_NO_ENOBUFS:
	case NETLINK_LISTEN_ALL_NSID:
	case NETLINK_CAP_ACK:
	case NETLINK_EXT_ACK:
	case NETLINK_GET_STRICT_CHK:
		return 1;
	}
	return 0;
}

int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
	int v = 0;

	if (!is_nl(fd) || level != SOL_NETLINK)
		return get_setsockopt()(fd, level, opt, val, len);
	if (len >= sizeof(int)) {
		if (!val)
			return fail(EFAULT);
		memcpy(&v, val, sizeof(v));
	}
	if (opt == NETLINK_ADD_MEMBERSHIP || opt == NETLINK_DROP_MEMBERSHIP) {
		if (len < sizeof(int))
			return fail(EINVAL);
		/* No group of RDMA netlink sends anything here. */
		return 0;
	}
	if (!nl_flag_opt(opt))
		return fail(ENOPROTOOPT);
	if (len < sizeof(int))
		return fail(EINVAL);
	pthread_mutex_lock(&nl_mu);
	if (v)
		nls[fd].opts |= 1u << opt;
	else
		nls[fd].opts &= ~(1u << opt);
	if (opt == NETLINK_CAP_ACK)
		setup(fd);
	pthread_mutex_unlock(&nl_mu);
	return 0;
}

static int put_int(void *val, socklen_t *len, int v)
{
	if (!len || !val)
		return fail(EFAULT);
	if (*len < sizeof(int))
		return fail(EINVAL);
	*len = sizeof(int);
	memcpy(val, &v, sizeof(v));
	return 0;
}

int getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
	if (!is_nl(fd))
		return get_getsockopt()(fd, level, opt, val, len);
	if (level == SOL_SOCKET) {
		switch (opt) {
		case SO_TYPE:
			return put_int(val, len, nls[fd].type);
		case SO_DOMAIN:
			return put_int(val, len, AF_NETLINK);
		case SO_PROTOCOL:
			return put_int(val, len, NETLINK_RDMA);
		}
		return get_getsockopt()(fd, level, opt, val, len);
	}
	if (level != SOL_NETLINK)
		return fail(ENOPROTOOPT);
	if (opt == NETLINK_LIST_MEMBERSHIPS) {
		if (!len)
			return fail(EFAULT);
		*len = 0;
		return 0;
	}
	if (!nl_flag_opt(opt))
		return fail(ENOPROTOOPT);
	return put_int(val, len, !!(__atomic_load_n(&nls[fd].opts, __ATOMIC_RELAXED) & (1u << opt)));
}

/* nl_dest checks a send's destination: the kernel (port id 0, no
 * group). */
static int nl_dest(const void *addr, socklen_t len)
{
	const struct sockaddr_nl *nl = addr;

	if (!addr)
		return 0;
	if (len < sizeof(*nl) || nl->nl_family != AF_NETLINK)
		return -EINVAL;
	if (nl->nl_groups)
		return -EPERM;
	if (nl->nl_pid)
		return -ECONNREFUSED; /* no other socket is reachable */
	return 0;
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr, socklen_t len)
{
	int err;

	if (!is_nl(fd))
		return get_sendto()(fd, buf, n, flags, addr, len);
	if (flags & MSG_OOB)
		return fail(EOPNOTSUPP);
	if ((err = nl_dest(addr, len)) < 0)
		return fail(-err);
	autobind_locked(fd);
	if (n == 0)
		return 0; /* an empty datagram: the kernel finds no message in it */
	return get_send()(fd, buf, n, flags | MSG_NOSIGNAL);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (!is_nl(fd))
		return get_send()(fd, buf, n, flags);
	return sendto(fd, buf, n, flags, NULL, 0);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct msghdr m;
	int err;

	if (!is_nl(fd))
		return get_sendmsg()(fd, msg, flags);
	if (!msg)
		return fail(EFAULT);
	if (flags & MSG_OOB)
		return fail(EOPNOTSUPP);
	if ((err = nl_dest(msg->msg_name, msg->msg_namelen)) < 0)
		return fail(-err);
	autobind_locked(fd);
	m = *msg;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return get_sendmsg()(fd, &m, flags | MSG_NOSIGNAL);
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
	ssize_t r;

	if (!is_nl(fd))
		return get_recvfrom()(fd, buf, n, flags, addr, len);
	r = get_recvfrom()(fd, buf, n, flags, NULL, NULL);
	if (r >= 0 && addr && len)
		nl_name(fd, addr, len, 1);
	return r;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	void *name;
	socklen_t namelen;
	ssize_t r;

	if (!is_nl(fd))
		return get_recvmsg()(fd, msg, flags);
	if (!msg)
		return fail(EFAULT);
	name = msg->msg_name;
	namelen = msg->msg_namelen;
	msg->msg_name = NULL;
	msg->msg_namelen = 0;
	r = get_recvmsg()(fd, msg, flags);
	msg->msg_name = name;
	msg->msg_namelen = 0;
	if (r >= 0 && name) {
		msg->msg_namelen = namelen;
		nl_name(fd, name, &msg->msg_namelen, 1);
	}
	return r;
}
