/*
 * addr_cases: how rdma_cm answers each kind of address, one line a case.
 *
 *   addr_cases OWN4 OWN6 LL6 SCOPE PEER4 PEER6 NOHOST4 OFFNET4
 *
 * OWN4, OWN6 and LL6 are the device's IPv4, global IPv6 and link-local
 * IPv6 addresses, SCOPE the interface index of LL6, PEER4 and PEER6
 * another host's addresses on the fabric, NOHOST4 an address of the subnet
 * that no host answers for, OFFNET4 an address no route reaches. Each line
 * is "CASE: STEP=ANSWER ...": an errno name or "0" for a call, the event
 * and its status for an asynchronous answer, and the source address the
 * ID ends with, named by role (own4, lo4, any6, ...), so that two hosts
 * with different addresses print the same lines for the same behaviour.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *role_addr[16], *role_name[16];
static int nroles;
static unsigned scope;
static struct rdma_event_channel *ch;

/* role names addr, kept as inet_ntop prints it. */
static void role(const char *name, const char *addr)
{
	unsigned char b[16];
	char *s = malloc(INET6_ADDRSTRLEN);

	if (inet_pton(AF_INET, addr, b) == 1)
		inet_ntop(AF_INET, b, s, INET6_ADDRSTRLEN);
	else if (inet_pton(AF_INET6, addr, b) == 1)
		inet_ntop(AF_INET6, b, s, INET6_ADDRSTRLEN);
	else
		snprintf(s, INET6_ADDRSTRLEN, "%s", addr);
	role_name[nroles] = name;
	role_addr[nroles++] = s;
}

static const char *ename(int e)
{
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case EADDRINUSE: return "EADDRINUSE";
	case ENODEV: return "ENODEV";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ENETUNREACH: return "ENETUNREACH";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EACCES: return "EACCES";
	case ENODATA: return "ENODATA";
	}
	static char b[16];
	snprintf(b, sizeof(b), "E%d", e);
	return b;
}

/* parse "ROLE[%scope]:port" or a literal address into ss. */
static socklen_t addr_of(const char *spec, int port, struct sockaddr_storage *ss)
{
	char buf[64];
	const char *a = spec;
	int withscope = 0;

	memset(ss, 0, sizeof(*ss));
	snprintf(buf, sizeof(buf), "%s", spec);
	char *pct = strchr(buf, '%');
	if (pct) {
		*pct = 0;
		withscope = 1;
	}
	a = buf;
	for (int i = 0; i < nroles; i++)
		if (!strcmp(buf, role_name[i]))
			a = role_addr[i];
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		return sizeof(*s4);
	}
	if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		if (withscope)
			s6->sin6_scope_id = scope;
		return sizeof(*s6);
	}
	fprintf(stderr, "bad address %s\n", spec);
	exit(2);
}

/* name_of prints a sockaddr by role. */
static const char *name_of(struct sockaddr *sa)
{
	static char out[80];
	char s[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, s, sizeof(s));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, s, sizeof(s));
	else {
		snprintf(out, sizeof(out), "family%d", sa->sa_family);
		return out;
	}
	const char *n = s;
	for (int i = 0; i < nroles; i++)
		if (!strcmp(s, role_addr[i]))
			n = role_name[i];
	snprintf(out, sizeof(out), "%s", n);
	return out;
}

/* wait_event prints the next event of id within ms. */
static int wait_event(int ms, int *status)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) <= 0)
		return -1;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	int t = ev->event;
	*status = ev->status;
	rdma_ack_cm_event(ev);
	return t;
}

static const char *evname(int t)
{
	switch (t) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "ROUTE_ERROR";
	case -1: return "none";
	}
	return "other";
}

#define MAXIDS 4

/*
 * run one case: a program of steps, separated by spaces:
 *   reuse        rdma_set_option REUSEADDR 1 on the current ID
 *   afonly=N     rdma_set_option AFONLY N
 *   bind=A:P     rdma_bind_addr
 *   listen       rdma_listen
 *   resolve=S>D:P rdma_resolve_addr from S ("-": none) to D, then its event
 *   route        rdma_resolve_route, then its event ("nodev" without a
 *                device: librdmacm would dereference it)
 *   src          print the source address
 *   new          a further ID
 */
static void run(const char *name, const char *prog)
{
	struct rdma_cm_id *ids[MAXIDS];
	int n = 0;
	char buf[512], *save, *step;

	printf("%s:", name);
	if (rdma_create_id(ch, &ids[n++], NULL, RDMA_PS_TCP)) {
		printf(" create=%s\n", ename(errno));
		return;
	}
	snprintf(buf, sizeof(buf), "%s", prog);
	for (step = strtok_r(buf, " ", &save); step; step = strtok_r(NULL, " ", &save)) {
		struct rdma_cm_id *id = ids[n - 1];
		struct sockaddr_storage a, b;
		int r, st, ev;

		if (!strcmp(step, "new")) {
			r = rdma_create_id(ch, &ids[n++], NULL, RDMA_PS_TCP);
			if (r)
				printf(" new=%s", ename(errno));
			continue;
		}
		if (!strcmp(step, "reuse")) {
			int one = 1;
			r = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one));
			printf(" reuse=%s", ename(r ? errno : 0));
			continue;
		}
		if (!strncmp(step, "afonly=", 7)) {
			int v = atoi(step + 7);
			r = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v));
			printf(" afonly=%s", ename(r ? errno : 0));
			continue;
		}
		if (!strncmp(step, "bind=", 5)) {
			char *c = strrchr(step + 5, ':');
			*c = 0;
			addr_of(step + 5, atoi(c + 1), &a);
			r = rdma_bind_addr(id, (struct sockaddr *)&a);
			printf(" bind=%s", ename(r ? errno : 0));
			continue;
		}
		if (!strcmp(step, "listen")) {
			r = rdma_listen(id, 0);
			printf(" listen=%s", ename(r ? errno : 0));
			continue;
		}
		if (!strncmp(step, "resolve=", 8)) {
			char *gt = strchr(step + 8, '>');
			*gt = 0;
			char *c = strrchr(gt + 1, ':');
			*c = 0;
			struct sockaddr *src = NULL;
			if (strcmp(step + 8, "-")) {
				addr_of(step + 8, 0, &a);
				src = (struct sockaddr *)&a;
			}
			addr_of(gt + 1, atoi(c + 1), &b);
			r = rdma_resolve_addr(id, src, (struct sockaddr *)&b, 1500);
			printf(" resolve=%s", ename(r ? errno : 0));
			if (!r) {
				ev = wait_event(4000, &st);
				printf(" %s/%d", evname(ev), st);
			}
			continue;
		}
		if (!strcmp(step, "route")) {
			if (!id->verbs) {
				/* librdmacm's rdma_resolve_route reads the device. */
				printf(" route=nodev");
				continue;
			}
			r = rdma_resolve_route(id, 1500);
			printf(" route=%s", ename(r ? errno : 0));
			if (!r) {
				ev = wait_event(4000, &st);
				printf(" %s/%d", evname(ev), st);
			}
			continue;
		}
		if (!strcmp(step, "src")) {
			printf(" src=%s", name_of(rdma_get_local_addr(id)));
			printf(" dev=%s", id->verbs ? "yes" : "no");
			continue;
		}
		fprintf(stderr, "bad step %s\n", step);
		exit(2);
	}
	printf("\n");
	for (int i = n - 1; i >= 0; i--)
		rdma_destroy_id(ids[i]);
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: addr_cases OWN4 OWN6 LL6 SCOPE PEER4 PEER6 NOHOST4 OFFNET4\n");
		return 2;
	}
	role("own4", argv[1]);
	role("own6", argv[2]);
	role("ll6", argv[3]);
	scope = atoi(argv[4]);
	role("peer4", argv[5]);
	role("peer6", argv[6]);
	role("nohost4", argv[7]);
	role("offnet4", argv[8]);
	role("any4", "0.0.0.0");
	role("any6", "::");
	role("lo4", "127.0.0.1");
	role("lo6", "::1");
	role("other4", "192.0.2.1");
	role("other6", "2001:db8::1");
	ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	/* Binds. */
	run("bind-any4", "bind=any4:0 src");
	run("bind-any6", "bind=any6:0 src");
	run("bind-lo4", "bind=lo4:0 src");
	run("bind-lo4-other", "bind=127.0.0.2:0 src");
	run("bind-lo6", "bind=lo6:0 src");
	run("bind-own4", "bind=own4:0 src");
	run("bind-own6", "bind=own6:0 src");
	run("bind-ll6-noscope", "bind=ll6:0 src");
	run("bind-ll6-scope", "bind=ll6%:0 src");
	run("bind-other4", "bind=other4:0");
	run("bind-other6", "bind=other6:0");
	run("bind-other-ll6-scope", "bind=fe80::1%:0");
	run("bind-peer4", "bind=peer4:0");
	run("bind-mcast4", "bind=224.0.0.1:0");
	/* Resolve from each kind of source to each kind of destination. */
	const char *srcs[] = {"-", "any4", "lo4", "own4"};
	const char *dsts4[] = {"own4", "peer4", "lo4", "any4", "nohost4", "offnet4"};
	for (unsigned i = 0; i < sizeof(srcs) / sizeof(*srcs); i++)
		for (unsigned j = 0; j < sizeof(dsts4) / sizeof(*dsts4); j++) {
			char name[64], prog[128];
			snprintf(name, sizeof(name), "resolve-%s-%s", strcmp(srcs[i], "-") ? srcs[i] : "none", dsts4[j]);
			snprintf(prog, sizeof(prog), "resolve=%s>%s:7471 src route src", srcs[i], dsts4[j]);
			run(name, prog);
		}
	const char *srcs6[] = {"-", "any6", "lo6", "own6"};
	const char *dsts6[] = {"own6", "peer6", "lo6", "any6"};
	for (unsigned i = 0; i < sizeof(srcs6) / sizeof(*srcs6); i++)
		for (unsigned j = 0; j < sizeof(dsts6) / sizeof(*dsts6); j++) {
			char name[64], prog[128];
			snprintf(name, sizeof(name), "resolve6-%s-%s", strcmp(srcs6[i], "-") ? srcs6[i] : "none", dsts6[j]);
			snprintf(prog, sizeof(prog), "resolve=%s>%s:7471 src route src", srcs6[i], dsts6[j]);
			run(name, prog);
		}
	run("resolve6-none-ll6-scope", "resolve=->ll6%:7471 src route src");
	run("resolve-bound-any4-peer4", "bind=any4:0 resolve=->peer4:7471 src route src");
	run("resolve-bound-lo4-peer4", "bind=lo4:0 resolve=->peer4:7471 src");
	run("resolve-bound-own4-lo4", "bind=own4:0 resolve=->lo4:7471 src route src");
	run("resolve-family-4to6", "resolve=any4>peer6:7471 src");
	run("resolve-family-bound4-to6", "bind=own4:0 resolve=->peer6:7471 src");
	run("route-unresolved", "bind=own4:0 route");
	/* Ports. */
	run("port-own4-own4", "bind=own4:7480 new bind=own4:7480");
	run("port-own4-any4", "bind=own4:7481 new bind=any4:7481");
	run("port-any4-own4", "bind=any4:7482 new bind=own4:7482");
	run("port-any4-any6", "bind=any4:7483 new bind=any6:7483");
	run("port-any4-any6-afonly", "bind=any4:7484 new afonly=1 bind=any6:7484");
	run("port-any6-any4", "bind=any6:7485 new bind=any4:7485");
	run("port-any6afonly-any4", "afonly=1 bind=any6:7486 new bind=any4:7486");
	run("port-lo4-own4", "bind=lo4:7487 new bind=own4:7487");
	run("port-lo4-lo4", "bind=lo4:7488 new bind=lo4:7488");
	run("port-own4-own6", "bind=own4:7489 new bind=own6:7489");
	run("port-reuse-both", "reuse bind=any4:7490 new reuse bind=any4:7490");
	run("port-reuse-one", "reuse bind=any4:7491 new bind=any4:7491");
	run("port-reuse-listen", "reuse bind=any4:7492 new reuse bind=any4:7492 listen");
	run("port-listen-then-reuse", "reuse bind=any4:7493 listen new reuse bind=any4:7493");
	run("listen-lo4", "bind=lo4:7494 listen src");
	run("listen-idle", "listen src");
	run("reuse-after-bind", "bind=any4:0 reuse");
	run("afonly-after-listen", "bind=any4:0 listen afonly=1");
	return 0;
}
