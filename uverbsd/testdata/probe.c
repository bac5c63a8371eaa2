/* probe: drives the preload library's wrappers the way libibverbs and
 * librxe do, against a daemon whose File is the test's fake. Each check
 * (CHECK, from internal/testutil's ctest.h) prints "ok NAME" or
 * "FAIL NAME: why"; the exit status is 1 if any failed. With the argument
 * "hang" it opens the device, sends one command and waits to be killed;
 * with "closewait" it closes the descriptor (once a line comes on stdin)
 * while another thread's command is in flight. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../../internal/testutil/testdata/ctest.h"

/* The fake command: u64 response address, u32 response length, then
 * bytes the fake File writes back reversed at the response address. */
struct cmd {
	uint64_t resp;
	uint32_t len;
	char data[12];
};

static int shared_fd;

/* worker sends commands on the shared descriptor and checks that each
 * reply is its own: the preload library serialises the exchanges. */
static void *worker(void *arg)
{
	long id = (long)arg;
	for (int i = 0; i < 200; i++) {
		char resp[32] = {0}, want[13];
		struct cmd c;
		c.resp = (uintptr_t)resp;
		c.len = 12;
		char tmp[16];
		snprintf(tmp, sizeof(tmp), "t%ld-%09d", id % 10, i);
		memcpy(c.data, tmp, 12);
		for (int k = 0; k < 12; k++)
			want[k] = c.data[11 - k];
		if (write(shared_fd, &c, sizeof(c)) != (ssize_t)sizeof(c) || memcmp(resp, want, 12) != 0)
			return (void *)1;
	}
	return NULL;
}

/* inflight writes a command the fake File holds until the test lets it
 * go, while main closes the descriptor. */
static void *inflight(void *arg)
{
	char resp[32] = {0};
	struct cmd c;
	ssize_t n;
	(void)arg;
	c.resp = (uintptr_t)resp;
	c.len = 12;
	memcpy(c.data, "block write!", 12);
	n = write(shared_fd, &c, sizeof(c));
	CHECK("in-flight write", n == (ssize_t)sizeof(c) && memcmp(resp, "!etirw kcolb", 12) == 0,
	      "n %zd errno %d response %.12s", n, errno, resp);
	return NULL;
}

int main(int argc, char **argv)
{
	struct stat st;
	char resp[32];
	struct cmd c;
	int fd;

	memset(resp, 0, sizeof(resp));
	fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	CHECK("open", fd >= 0, "errno %d", errno);
	if (fd < 0)
		return 1;
	c.resp = (uintptr_t)resp;
	c.len = 12;
	memcpy(c.data, "hello world!", 12);
	if (argc > 1 && strcmp(argv[1], "hang") == 0) {
		ssize_t n = write(fd, &c, sizeof(c));
		printf("wrote %zd\n", n);
		fflush(stdout);
		pause();
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "closewait") == 0) {
		/* The test writes a line once the command is in flight. */
		pthread_t th;
		char line[16];
		shared_fd = fd;
		pthread_create(&th, NULL, inflight, NULL);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		CHECK("close while in flight", close(fd) == 0, "errno %d", errno);
		printf("closed\n");
		fflush(stdout);
		pthread_join(th, NULL);
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "threads") == 0) {
		pthread_t th[4];
		void *r;
		int bad = 0;
		shared_fd = fd;
		for (long i = 0; i < 4; i++)
			pthread_create(&th[i], NULL, worker, (void *)i);
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], &r);
			bad += r != NULL;
		}
		CHECK("threads", bad == 0, "%d threads saw another's reply", bad);
		return failed;
	}
	CHECK("cloexec", fcntl(fd, F_GETFD) & FD_CLOEXEC, "no FD_CLOEXEC");
	CHECK("fstat", fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(231, 192),
	      "mode %o rdev %lx errno %d", st.st_mode, (unsigned long)st.st_rdev, errno);
	memset(&st, 0, sizeof(st));
	CHECK("stat", stat("/dev/infiniband/uverbs0", &st) == 0 && S_ISCHR(st.st_mode) &&
			      st.st_rdev == makedev(231, 192),
	      "mode %o errno %d", st.st_mode, errno);
	CHECK("stat missing", stat("/dev/infiniband/uverbs7", &st) < 0 && errno == ENOENT, "errno %d", errno);
	errno = 0;
	CHECK("ioctl", ioctl(fd, 0xc0181b01, &c) < 0 && errno == ENOTTY, "errno %d", errno);
	errno = 0;
	CHECK("read", read(fd, resp, 8) < 0 && errno == EINVAL, "errno %d", errno);

	ssize_t n = write(fd, &c, sizeof(c));
	CHECK("write result", n == (ssize_t)sizeof(c), "n %zd errno %d", n, errno);
	CHECK("write response", memcmp(resp, "!dlrow olleh", 12) == 0, "response %.12s", resp);
	uint32_t passed;
	memcpy(&passed, resp + 16, 4);
	char msg[16] = {0};
	CHECK("passed fd", read((int)passed, msg, sizeof(msg)) == 5 && memcmp(msg, "event", 5) == 0,
	      "fd %u errno %d msg %s", passed, errno, msg);
	CHECK("passed fd cloexec", fcntl((int)passed, F_GETFD) & FD_CLOEXEC, "no FD_CLOEXEC");

	c.len = 0xffff; /* the fake File answers EFAULT-like errors as it is told */
	errno = 0;
	CHECK("write errno", write(fd, &c, sizeof(c)) < 0 && errno == ENOSPC, "errno %d", errno);

	char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 8192);
	CHECK("mmap", p != MAP_FAILED && memcmp(p, "ring", 4) == 0, "p %p errno %d", (void *)p, errno);
	if (p != MAP_FAILED) {
		p[4] = '!';
		CHECK("munmap", munmap(p, 4096) == 0, "errno %d", errno);
	}
	errno = 0;
	CHECK("mmap bad offset", mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 4096) == MAP_FAILED && errno == EINVAL,
	      "errno %d", errno);
	errno = 0;
	CHECK("netlink rdma", socket(AF_NETLINK, SOCK_RAW, 20) < 0 && errno == EPROTONOSUPPORT, "errno %d", errno);
	int other = socket(AF_NETLINK, SOCK_RAW, 0);
	CHECK("netlink route", other >= 0, "errno %d", errno);
	close(other);
	CHECK("close", close(fd) == 0, "errno %d", errno);
	/* After close the number is an ordinary descriptor again. */
	int pfd[2];
	if (pipe(pfd) == 0) {
		CHECK("reused fd", write(pfd[1], "x", 1) == 1 && read(pfd[0], msg, 1) == 1, "errno %d", errno);
	}
	return failed;
}
