/*
 * check.h: what the C test programs here share. check prints "ok NAME"
 * or "FAIL NAME: why" with errno and exits 1 at once (_exit: other
 * threads may be blocked in the library); addr_of makes an IPv4 address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline void check(int ok, const char *name, const char *why)
{
	if (!ok) {
		printf("FAIL %s: %s (errno %d %s)\n", name, why, errno, strerror(errno));
		fflush(stdout);
		_exit(1);
	}
	printf("ok %s\n", name);
	fflush(stdout);
}

static inline struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	inet_pton(AF_INET, ip, &sin.sin_addr);
	return sin;
}
