/*
 * check.h: what the C test programs here share. check prints "ok NAME"
 * or "FAIL NAME: why" with errno and exits 1 at once (_exit: other
 * threads may be blocked in the library); addr_of makes an IPv4 address;
 * sleeping_in tells which system call a thread sleeps in.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
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

/* sleeping_in returns the number of the system call thread tid of this
 * process sleeps in (state S), or -1. */
static inline long sleeping_in(pid_t tid)
{
	char path[64], buf[512];
	FILE *f;
	long nr = -1;
	char state = 0;
	const char *p;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	if (!(f = fopen(path, "r")))
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	p = strrchr(buf, ')');
	if (p && p[1] == ' ')
		state = p[2];
	if (state != 'S')
		return -1;
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	if (!(f = fopen(path, "r")))
		return -1;
	if (fscanf(f, "%ld", &nr) != 1)
		nr = -1;
	fclose(f);
	return nr;
}
