/* probe: drives the preload library's wrappers the way libibverbs and
 * librxe do, against a daemon whose File is the test's fake. Each check
 * (CHECK, from internal/testutil's ctest.h) prints "ok NAME" or
 * "FAIL NAME: why"; the exit status is 1 if any failed. With the argument
 * "hang" it opens the device, sends one command and waits to be killed;
 * with "closewait" it closes the descriptor (once a line comes on stdin)
 * while another thread's command is in flight; with "doorbells" it rings
 * QP handle 3's doorbell as librxe does, once, then once more and eight
 * times after that, each batch once a line comes on stdin, then once with
 * a response address that cannot be written, and ends at the next line;
 * with "oddbells" it rings QP handle 3's doorbell in forms librxe never
 * writes, each after one librxe's way, and checks the kernel's answer to
 * each (ib_uverbs_write's checks, the response written as copy_to_user
 * does); with "efault" it writes from buffers that cannot be read (NULL,
 * an unmapped page, a buffer running into a PROT_NONE page) to the
 * uverbs and the rdma_cm descriptor, each EFAULT, each followed by a
 * command that works; with "badptr" it gives the stat family and the open
 * family pointers that cannot be read or written (NULL, an unmapped page,
 * a path or a stat buffer running into a page that cannot be read or
 * written), on the device and on other files, and checks the kernel's
 * answers (EFAULT; ENOENT where the lookup fails first); with "accmode"
 * it opens the device read-only, write-only and with O_ACCMODE and checks
 * read(), write() and mmap() on each; with "fdflags" it checks the
 * descriptors' file flags (see fdflags); with "access", the access family
 * on the device (see access_checks); with "dup", the duplicates of the
 * device's descriptors (see dups). */
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
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

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

/* doorbells rings QP handle 3's doorbell (librxe's post_send_db: a
 * POST_SEND with no WRs) n times and checks each write's answer. */
static void doorbells(int fd, int n, const char *name)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_post_send cmd;
	} db;
	struct ib_uverbs_post_send_resp resp;
	int good = 0;

	memset(&db, 0, sizeof(db));
	db.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	db.hdr.in_words = sizeof(db) / 4;
	db.hdr.out_words = sizeof(resp) / 4;
	db.cmd.response = (uintptr_t)&resp;
	db.cmd.qp_handle = 3;
	db.cmd.wqe_size = 128;
	for (int i = 0; i < n; i++) {
		resp.bad_wr = 7;
		good += write(fd, &db, sizeof(db)) == (ssize_t)sizeof(db) && resp.bad_wr == 0;
	}
	CHECK(name, good == n, "%d of %d doorbells answered with bad_wr 0", good, n);
	fflush(stdout);
}

/* FAILS checks that the call r failed with errno want. */
#define FAILS(name, r, want)                                                                     \
	do {                                                                                     \
		long r_;                                                                         \
		errno = 0;                                                                       \
		r_ = (long)(r);                                                                  \
		CHECK(name, r_ == -1 && errno == (want), "returned %ld errno %d, want -1 errno %d", \
		      r_, errno, (want));                                                        \
	} while (0)

/* efault_write writes n bytes at p to fd and checks the answer: -1, EFAULT. */
static void efault_write(int fd, const void *p, size_t n, const char *name)
{
	ssize_t r;
	errno = 0;
	r = write(fd, p, n);
	CHECK(name, r == -1 && errno == EFAULT, "write %zd errno %d", r, errno);
}

/* hello sends the fake File's command and checks its answer. */
static void hello(int fd, const char *name)
{
	char resp[32] = {0};
	struct cmd c = {.resp = (uintptr_t)resp, .len = 12};
	ssize_t r;
	memcpy(c.data, "again world!", 12);
	r = write(fd, &c, sizeof(c));
	CHECK(name, r == (ssize_t)sizeof(c) && memcmp(resp, "!dlrow niaga", 12) == 0, "write %zd errno %d", r,
	      errno);
}

/* create_id asks rdma_cm for an ID (RDMA_USER_CM_CMD_CREATE_ID) and checks
 * the answer. */
static void create_id(int fd, const char *name)
{
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_create_id cmd;
	} c;
	struct rdma_ucm_create_id_resp resp = {.id = 0xdeadbeef};
	ssize_t r;
	memset(&c, 0, sizeof(c));
	c.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
	c.hdr.in = sizeof(c.cmd);
	c.hdr.out = sizeof(resp);
	c.cmd.response = (uintptr_t)&resp;
	c.cmd.ps = RDMA_PS_TCP;
	c.cmd.qp_type = 2; /* IBV_QPT_RC */
	r = write(fd, &c, sizeof(c));
	CHECK(name, r == (ssize_t)sizeof(c) && resp.id != 0xdeadbeef, "write %zd errno %d id %#x", r, errno, resp.id);
}

/* The top of edge_thread's stack, a PROT_NONE page above it. */
static char *stack_top;

/* edge_thread runs on a stack of its own: a buffer from its top running
 * past it is EFAULT (the library's bound of a live stack is the stack's
 * top), one in its frames works. */
static void *edge_thread(void *arg)
{
	int fd = *(int *)arg;
	efault_write(fd, stack_top - 4, sizeof(struct cmd), "uverbs write from the top of a stack into a PROT_NONE page");
	hello(fd, "uverbs command from a thread's own stack");
	return NULL;
}

/* efault drives the uverbs descriptor fd and an rdma_cm descriptor with
 * writes from buffers that cannot be read. */
static void efault(int fd)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *mem = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *gone, *tail;
	void *volatile nul = NULL;     /* no NULL argument the compiler sees */
	volatile size_t huge = SIZE_MAX; /* nor a size past any object */
	int cm;
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_post_send cmd;
	} db;
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_get_event cmd;
	} ev;

	MUST("mmap", mem != MAP_FAILED);
	/* mem: a page to read, tail: one that cannot be, gone: none. */
	MUST("mprotect", mprotect(mem + pg, pg, PROT_NONE) == 0);
	MUST("munmap", munmap(mem + 2 * pg, pg) == 0);
	tail = mem + pg;
	gone = mem + 2 * pg;

	/* uverbs: the fake File's command and librxe's doorbell. */
	memset(&db, 0, sizeof(db));
	db.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	db.hdr.in_words = sizeof(db) / 4;
	db.hdr.out_words = 1;
	db.cmd.response = (uintptr_t)mem;
	db.cmd.qp_handle = 3;
	db.cmd.wqe_size = 128;
	errno = 0;
	CHECK("uverbs write shorter than a header from NULL", write(fd, nul, 4) == -1 && errno == EINVAL,
	      "errno %d", errno);
	/* Past the user address space: vfs_write's access_ok, first. */
	FAILS("uverbs write of SIZE_MAX bytes", write(fd, mem, huge), EFAULT);
	FAILS("uverbs write reaching past the user address space", write(fd, mem, (size_t)1 << 62), EFAULT);
	FAILS("uverbs write shorter than a header from the kernel's half", write(fd, (void *)(1ULL << 63), 4), EFAULT);
	efault_write(fd, NULL, sizeof(struct cmd), "uverbs write from NULL");
	hello(fd, "uverbs command after NULL");
	efault_write(fd, gone, sizeof(struct cmd), "uverbs write from an unmapped page");
	hello(fd, "uverbs command after an unmapped page");
	efault_write(fd, NULL, 1 << 20, "uverbs write of a MiB from NULL");
	hello(fd, "uverbs command after a MiB from NULL");
	efault_write(fd, gone + 8, sizeof(db), "uverbs doorbell from an unmapped page");
	hello(fd, "uverbs command after a doorbell from an unmapped page");
	memcpy(tail - 12, "0123456789ab", 12);
	efault_write(fd, tail - 12, sizeof(struct cmd), "uverbs write running into a PROT_NONE page");
	hello(fd, "uverbs command after a write running into a PROT_NONE page");
	memcpy(tail - 8, &db, 8); /* the header readable, the command not */
	efault_write(fd, tail - 8, sizeof(db), "uverbs doorbell whose command is on a PROT_NONE page");
	hello(fd, "uverbs command after a doorbell whose command is on a PROT_NONE page");
	memcpy(tail - sizeof(db), &db, sizeof(db)); /* librxe's doorbell readable, 8 more bytes not */
	efault_write(fd, tail - sizeof(db), sizeof(db) + 8, "uverbs doorbell with bytes on a PROT_NONE page");
	hello(fd, "uverbs command after a doorbell with bytes on a PROT_NONE page");
	{
		/* A REG_MR whose header is readable, its driver data not. */
		struct {
			struct ib_uverbs_cmd_hdr hdr;
			struct ib_uverbs_reg_mr cmd;
		} mr;
		memset(&mr, 0, sizeof(mr));
		mr.hdr.command = IB_USER_VERBS_CMD_REG_MR;
		mr.hdr.in_words = (sizeof(mr) + 8) / 4;
		mr.hdr.out_words = sizeof(struct ib_uverbs_reg_mr_resp) / 4;
		mr.cmd.start = (uintptr_t)mem;
		mr.cmd.length = pg;
		mr.cmd.hca_va = (uintptr_t)mem;
		memcpy(tail - sizeof(mr), &mr, sizeof(mr));
		efault_write(fd, tail - sizeof(mr), sizeof(mr) + 8, "uverbs REG_MR with bytes on a PROT_NONE page");
		hello(fd, "uverbs command after a REG_MR with bytes on a PROT_NONE page");
	}

	{
		size_t size = 16 * pg;
		char *st = mmap(NULL, size + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pthread_attr_t attr;
		pthread_t th;
		MUST("mmap stack", st != MAP_FAILED && mprotect(st + size, pg, PROT_NONE) == 0);
		stack_top = st + size;
		MUST("stack attr", pthread_attr_init(&attr) == 0 && pthread_attr_setstack(&attr, st, size) == 0);
		MUST("thread", pthread_create(&th, &attr, edge_thread, &fd) == 0 && pthread_join(th, NULL) == 0);
	}

	/* rdma_cm: CREATE_ID, and GET_EVENT, which would wait for an event
	 * if its command were read. */
	cm = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	MUST("open rdma_cm", cm >= 0);
	create_id(cm, "rdma_cm command");
	memset(&ev, 0, sizeof(ev));
	ev.hdr.cmd = RDMA_USER_CM_CMD_GET_EVENT;
	ev.hdr.in = sizeof(ev.cmd);
	ev.hdr.out = sizeof(struct rdma_ucm_event_resp);
	ev.cmd.response = (uintptr_t)mem;
	errno = 0;
	CHECK("rdma_cm write shorter than a header from NULL", write(cm, nul, 4) == -1 && errno == EINVAL,
	      "errno %d", errno);
	FAILS("rdma_cm write of SIZE_MAX bytes", write(cm, mem, huge), EFAULT);
	FAILS("rdma_cm write shorter than a header from the kernel's half", write(cm, (void *)(1ULL << 63), 4),
	      EFAULT);
	efault_write(cm, NULL, sizeof(ev), "rdma_cm write from NULL");
	create_id(cm, "rdma_cm command after NULL");
	efault_write(cm, gone, sizeof(ev), "rdma_cm write from an unmapped page");
	create_id(cm, "rdma_cm command after an unmapped page");
	efault_write(cm, gone, 1 << 20, "rdma_cm write of a MiB from an unmapped page");
	create_id(cm, "rdma_cm command after a MiB from an unmapped page");
	memcpy(tail - sizeof(ev.hdr), &ev.hdr, sizeof(ev.hdr));
	efault_write(cm, tail - sizeof(ev.hdr), sizeof(ev), "rdma_cm GET_EVENT whose command is on a PROT_NONE page");
	create_id(cm, "rdma_cm command after a GET_EVENT whose command is on a PROT_NONE page");
	memcpy(tail - 4, &ev.hdr, 4);
	efault_write(cm, tail - 4, sizeof(ev), "rdma_cm write whose header runs into a PROT_NONE page");
	create_id(cm, "rdma_cm command after a write whose header runs into a PROT_NONE page");
	close(cm);
}

/* badptr gives the stat and open wrappers bad pointers; fd is the uverbs
 * descriptor. The pointers go through volatile variables: the compiler
 * must not see a NULL argument to a nonnull parameter. */
static void badptr(int fd)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *mem = mmap(NULL, 5 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *tail, *ro, *gone;
	static const char dev[] = "/dev/infiniband/uverbs0";
	void *volatile nul = NULL;
	struct stat st, *volatile bad;
	struct statx stx;
	const char *volatile path;

	MUST("mmap", mem != MAP_FAILED);
	/* Pages to read and write before tail, which cannot be read, and
	 * before ro, which cannot be written; gone: none. */
	MUST("mprotect", mprotect(mem + pg, pg, PROT_NONE) == 0 && mprotect(mem + 3 * pg, pg, PROT_READ) == 0);
	MUST("munmap", munmap(mem + 4 * pg, pg) == 0);
	tail = mem + pg;
	ro = mem + 3 * pg;
	gone = mem + 4 * pg;

	/* A stat buffer that cannot be written: EFAULT (cp_new_stat). */
	FAILS("fstat of the device into NULL", fstat(fd, nul), EFAULT);
	FAILS("fstat64 of the device into NULL", fstat64(fd, nul), EFAULT);
	bad = (struct stat *)gone;
	FAILS("fstat of the device into an unmapped page", fstat(fd, bad), EFAULT);
	bad = (struct stat *)ro;
	FAILS("fstat of the device into a read-only page", fstat(fd, bad), EFAULT);
	bad = (struct stat *)(ro - 16);
	memset(ro - 16, 0x5a, 16);
	FAILS("fstat of the device into a buffer running into a read-only page", fstat(fd, bad), EFAULT);
	bad = (struct stat *)(tail - 16);
	FAILS("fstat of the device into a buffer running into a PROT_NONE page", fstat(fd, bad), EFAULT);
	FAILS("stat of the device into NULL", stat(dev, nul), EFAULT);
	FAILS("stat64 of the device into NULL", stat64(dev, nul), EFAULT);
	FAILS("lstat of the device into NULL", lstat(dev, nul), EFAULT);
	FAILS("fstatat of the device into NULL", fstatat(AT_FDCWD, dev, nul, 0), EFAULT);
	FAILS("fstatat64 of the device into NULL", fstatat64(AT_FDCWD, dev, nul, 0), EFAULT);
	FAILS("fstatat AT_EMPTY_PATH of the descriptor into NULL", fstatat(fd, "", nul, AT_EMPTY_PATH), EFAULT);
	FAILS("statx of the device into NULL", statx(AT_FDCWD, dev, 0, STATX_BASIC_STATS, nul), EFAULT);
	FAILS("statx AT_EMPTY_PATH of the descriptor into an unmapped page",
	      statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, (struct statx *)gone), EFAULT);
	FAILS("stat of a device that does not exist into NULL", stat("/dev/infiniband/uverbs9", nul), ENOENT);
	{
		/* AT_EMPTY_PATH with a NULL path: the descriptor's stat
		 * where the kernel takes it (Linux 6.11 and later), EFAULT
		 * where it does not; never another file's. */
		int r;
		errno = 0;
		memset(&st, 0, sizeof(st));
		r = fstatat(fd, nul, &st, AT_EMPTY_PATH);
		CHECK("fstatat AT_EMPTY_PATH of the descriptor by a NULL path",
		      (r == 0 && S_ISCHR(st.st_mode)) || (r == -1 && errno == EFAULT), "returned %d errno %d mode %o", r,
		      errno, st.st_mode);
		errno = 0;
		memset(&stx, 0, sizeof(stx));
		r = statx(fd, nul, AT_EMPTY_PATH, STATX_BASIC_STATS, &stx);
		CHECK("statx AT_EMPTY_PATH of the descriptor by a NULL path",
		      (r == 0 && S_ISCHR(stx.stx_mode)) || (r == -1 && errno == EFAULT), "returned %d errno %d mode %o",
		      r, errno, stx.stx_mode);
	}
	/* The command file has no read: EINVAL, the buffer never written. */
	FAILS("read of the device into NULL", read(fd, nul, 16), EINVAL);
	FAILS("read of the device into a read-only page", read(fd, ro, 16), EINVAL);
	CHECK("fstat of the device after bad buffers", fstat(fd, &st) == 0 && S_ISCHR(st.st_mode), "errno %d",
	      errno);
	CHECK("statx of the device after bad buffers",
	      statx(AT_FDCWD, dev, 0, STATX_BASIC_STATS, &stx) == 0 && S_ISCHR(stx.stx_mode), "errno %d", errno);

	/* A path that cannot be read: EFAULT (getname), for every file. */
	FAILS("open of NULL", open(nul, O_RDONLY), EFAULT);
	FAILS("open of an unmapped page", open(gone, O_RDONLY), EFAULT);
	FAILS("open64 of an unmapped page", open64(gone, O_RDONLY), EFAULT);
	FAILS("openat of an unmapped page", openat(AT_FDCWD, gone, O_RDONLY), EFAULT);
	FAILS("openat64 of an unmapped page", openat64(AT_FDCWD, gone, O_RDONLY | O_CREAT, 0600), EFAULT);
	FAILS("stat of an unmapped page", stat(gone, &st), EFAULT);
	FAILS("lstat of an unmapped page", lstat(gone, &st), EFAULT);
	FAILS("fstatat of an unmapped page", fstatat(AT_FDCWD, gone, &st, 0), EFAULT);
	FAILS("fstatat AT_EMPTY_PATH of an unmapped page", fstatat(fd, gone, &st, AT_EMPTY_PATH), EFAULT);
	FAILS("statx of an unmapped page", statx(AT_FDCWD, gone, 0, STATX_BASIC_STATS, &stx), EFAULT);
	FAILS("statx AT_EMPTY_PATH of an unmapped page",
	      statx(fd, gone, AT_EMPTY_PATH, STATX_BASIC_STATS, &stx), EFAULT);
	/* Refused before the path is read: the kernel's EINVAL. */
	FAILS("statx with both sync flags of an unmapped page",
	      statx(AT_FDCWD, gone, AT_STATX_SYNC_TYPE, STATX_BASIC_STATS, &stx), EINVAL);
	FAILS("statx with a reserved mask bit of an unmapped page", statx(AT_FDCWD, gone, 0, STATX__RESERVED, &stx),
	      EINVAL);
	memcpy(tail - 1, "/", 1);
	path = tail - 1;
	FAILS("open of a path running into a PROT_NONE page", open(path, O_RDONLY), EFAULT);
	FAILS("stat of a path running into a PROT_NONE page", stat(path, &st), EFAULT);
	memcpy(tail - 16, dev, 16);
	path = tail - 16;
	FAILS("open of the device's directory running into a PROT_NONE page", open(path, O_RDWR), EFAULT);
	FAILS("stat of the device's directory running into a PROT_NONE page", stat(path, &st), EFAULT);
	memcpy(tail - 20, dev, 20);
	path = tail - 20;
	FAILS("open of a device name running into a PROT_NONE page", open(path, O_RDWR), EFAULT);
	FAILS("statx of a device name running into a PROT_NONE page",
	      statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &stx), EFAULT);
	{
		/* The device's path ending at a page's end, its NUL the
		 * next page's (read-only) first byte: a good path. */
		int f;
		memcpy(ro - sizeof(dev) + 1, dev, sizeof(dev) - 1);
		path = ro - sizeof(dev) + 1;
		CHECK("stat of the device's path ending at a page's end", stat(path, &st) == 0 && S_ISCHR(st.st_mode),
		      "errno %d", errno);
		f = open(path, O_RDWR | O_CLOEXEC);
		CHECK("open of the device's path ending at a page's end", f >= 0, "errno %d", errno);
		if (f >= 0)
			close(f);
	}
	CHECK("stat of a file after bad paths", stat("/", &st) == 0 && S_ISDIR(st.st_mode), "errno %d", errno);
}

/* accmode opens the device read-only, write-only and with O_ACCMODE, and
 * checks read() and write() on each: EBADF where the mode gave no such
 * access, else read's EINVAL (no read) and write's answer; and mmap():
 * EACCES where the mode does not allow the mapping. */
static void accmode(void)
{
	static const struct {
		int flags;
		const char *name;
	} modes[] = {{O_RDONLY, "O_RDONLY"}, {O_WRONLY, "O_WRONLY"}, {O_ACCMODE, "O_ACCMODE"}};
	char resp[32], buf[16], name[96];

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		int f = open("/dev/infiniband/uverbs0", modes[i].flags | O_CLOEXEC);
		int rd = modes[i].flags == O_RDONLY, wr = modes[i].flags == O_WRONLY;
		struct cmd c;
		ssize_t n;
		MUST("open", f >= 0);
		memset(resp, 0, sizeof(resp));
		c.resp = (uintptr_t)resp;
		c.len = 12;
		memcpy(c.data, "hello world!", 12);
		errno = 0;
		n = write(f, &c, sizeof(c));
		snprintf(name, sizeof(name), "write on an %s descriptor", modes[i].name);
		if (wr)
			CHECK(name, n == (ssize_t)sizeof(c) && memcmp(resp, "!dlrow olleh", 12) == 0, "n %zd errno %d",
			      n, errno);
		else
			CHECK(name, n == -1 && errno == EBADF, "n %zd errno %d", n, errno);
		errno = 0;
		n = read(f, buf, sizeof(buf));
		snprintf(name, sizeof(name), "read on an %s descriptor", modes[i].name);
		CHECK(name, n == -1 && errno == (rd ? EINVAL : EBADF), "n %zd errno %d", n, errno);
		/* do_mmap: any mapping needs read access, a shared writable
		 * one write access too. */
		errno = 0;
		snprintf(name, sizeof(name), "shared writable mmap of an %s descriptor", modes[i].name);
		CHECK(name, mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0) == MAP_FAILED && errno == EACCES,
		      "errno %d", errno);
		if (!rd) {
			errno = 0;
			snprintf(name, sizeof(name), "private mmap of an %s descriptor", modes[i].name);
			CHECK(name, mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, f, 0) == MAP_FAILED && errno == EACCES,
			      "errno %d", errno);
		}
		close(f);
	}
}

/* The kernel's O_LARGEFILE, set on every file a 64-bit process opens
 * (glibc's O_LARGEFILE is 0 there): the probe runs on x86_64 or arm64. */
#define LARGEFILE 0100000

/* fdflags checks the file's flags on the device's descriptors: F_GETFL
 * (fcntl and fcntl64), F_SETFL, FIONBIO, FIOASYNC, FIOCLEX as the kernel
 * answers them on its character devices, commands that go on working on
 * an O_NONBLOCK uverbs descriptor, the opens the kernel refuses, and
 * GET_EVENT's EAGAIN on an rdma_cm descriptor opened O_NONBLOCK. */
static void fdflags(int fd)
{
	char name[96], ev[64];
	int on = 1, off = 0, good = 0, f, cm;
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		struct rdma_ucm_get_event cmd;
	} get;

	CHECK("F_GETFL of an O_RDWR|O_CLOEXEC open", fcntl(fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x",
	      fcntl(fd, F_GETFL));
	CHECK("fcntl64 F_GETFL", fcntl64(fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x", fcntl64(fd, F_GETFL));
	CHECK("F_SETFL O_NONBLOCK", fcntl(fd, F_SETFL, O_NONBLOCK) == 0 &&
					    fcntl(fd, F_GETFL) == (O_RDWR | O_NONBLOCK | LARGEFILE),
	      "%#x", fcntl(fd, F_GETFL));
	/* The kernel's write() on the device is synchronous whatever
	 * O_NONBLOCK says: every command gets its answer. */
	for (int i = 0; i < 200; i++) {
		char resp[32] = {0};
		struct cmd c = {.resp = (uintptr_t)resp, .len = 12};
		memcpy(c.data, "nonblocking!", 12);
		good += write(fd, &c, sizeof(c)) == (ssize_t)sizeof(c) && memcmp(resp, "!gnikcolbnon", 12) == 0;
	}
	CHECK("200 commands on an O_NONBLOCK descriptor", good == 200, "%d answered, errno %d", good, errno);
	CHECK("F_SETFL O_APPEND|O_ASYNC keeps O_APPEND, not O_ASYNC (no fasync)",
	      fcntl(fd, F_SETFL, O_APPEND | O_ASYNC) == 0 && fcntl(fd, F_GETFL) == (O_RDWR | O_APPEND | LARGEFILE),
	      "%#x", fcntl(fd, F_GETFL));
	FAILS("F_SETFL O_DIRECT is EINVAL", fcntl(fd, F_SETFL, O_DIRECT), EINVAL);
	if (geteuid() == 0)
		CHECK("F_SETFL O_NOATIME as root", fcntl(fd, F_SETFL, O_NOATIME) == 0 && fcntl(fd, F_SETFL, 0) == 0,
		      "errno %d", errno);
	else
		FAILS("F_SETFL O_NOATIME is EPERM (the node is root's)", fcntl(fd, F_SETFL, O_NOATIME), EPERM);
	CHECK("F_SETFL 0 clears them", fcntl(fd, F_SETFL, 0) == 0 && fcntl(fd, F_GETFL) == (O_RDWR | LARGEFILE),
	      "%#x", fcntl(fd, F_GETFL));
	CHECK("FIONBIO on", ioctl(fd, FIONBIO, &on) == 0 && fcntl(fd, F_GETFL) == (O_RDWR | O_NONBLOCK | LARGEFILE),
	      "%#x", fcntl(fd, F_GETFL));
	hello(fd, "command after FIONBIO");
	CHECK("FIONBIO off", ioctl(fd, FIONBIO, &off) == 0 && fcntl(fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x",
	      fcntl(fd, F_GETFL));
	FAILS("FIONBIO from NULL is EFAULT", ioctl(fd, FIONBIO, NULL), EFAULT);
	FAILS("FIOASYNC on is ENOTTY (no fasync)", ioctl(fd, FIOASYNC, &on), ENOTTY);
	CHECK("FIOASYNC off", ioctl(fd, FIOASYNC, &off) == 0, "errno %d", errno);
	CHECK("FIONCLEX", ioctl(fd, FIONCLEX) == 0 && fcntl(fd, F_GETFD) == 0, "errno %d", errno);
	CHECK("FIOCLEX", ioctl(fd, FIOCLEX) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC, "errno %d", errno);
	FAILS("FIONREAD is ENOTTY", ioctl(fd, FIONREAD, &on), ENOTTY);

	f = open("/dev/infiniband/uverbs0", O_RDONLY | O_NONBLOCK);
	CHECK("F_GETFL of an O_RDONLY|O_NONBLOCK open", f >= 0 && fcntl(f, F_GETFL) == (O_NONBLOCK | LARGEFILE),
	      "fd %d %#x", f, fcntl(f, F_GETFL));
	close(f);
	FAILS("open O_CREAT|O_EXCL is EEXIST", open("/dev/infiniband/uverbs0", O_RDWR | O_CREAT | O_EXCL, 0600),
	      EEXIST);
	FAILS("open O_DIRECTORY is ENOTDIR", open("/dev/infiniband/uverbs0", O_RDWR | O_DIRECTORY), ENOTDIR);
	FAILS("open O_DIRECT is EINVAL", open("/dev/infiniband/uverbs0", O_RDWR | O_DIRECT), EINVAL);

	cm = open("/dev/infiniband/rdma_cm", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	MUST("open rdma_cm O_NONBLOCK", cm >= 0);
	CHECK("F_GETFL of rdma_cm opened O_NONBLOCK", fcntl(cm, F_GETFL) == (O_RDWR | O_NONBLOCK | LARGEFILE), "%#x",
	      fcntl(cm, F_GETFL));
	memset(&get, 0, sizeof(get));
	get.hdr.cmd = RDMA_USER_CM_CMD_GET_EVENT;
	get.hdr.in = sizeof(get.cmd);
	get.hdr.out = sizeof(struct rdma_ucm_event_resp);
	get.cmd.response = (uintptr_t)ev;
	FAILS("GET_EVENT with nothing queued on an O_NONBLOCK open is EAGAIN", write(cm, &get, sizeof(get)), EAGAIN);
	CHECK("FIONBIO off on rdma_cm", ioctl(cm, FIONBIO, &off) == 0 && fcntl(cm, F_GETFL) == (O_RDWR | LARGEFILE),
	      "%#x", fcntl(cm, F_GETFL));
	CHECK("F_SETFL O_NONBLOCK on rdma_cm", fcntl(cm, F_SETFL, O_NONBLOCK) == 0, "errno %d", errno);
	snprintf(name, sizeof(name), "GET_EVENT after F_SETFL O_NONBLOCK is EAGAIN");
	FAILS(name, write(cm, &get, sizeof(get)), EAGAIN);
	close(cm);
}

/* same_dev checks that fd is the character device orig is (fstat). */
static void same_dev(int fd, int orig, const char *name)
{
	struct stat a, b;
	int r = fstat(fd, &a), r0 = fstat(orig, &b);
	CHECK(name, r == 0 && r0 == 0 && S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev, "mode %o rdev %lx errno %d",
	      a.st_mode, (unsigned long)a.st_rdev, errno);
}

/* wait_line says line on stdout and waits for a line on stdin. */
static int wait_line(const char *line)
{
	char buf[16];
	printf("%s\n", line);
	fflush(stdout);
	return fgets(buf, sizeof(buf), stdin) != NULL;
}

/* dups checks the duplicates of the uverbs descriptor fd (dup, F_DUPFD,
 * F_DUPFD_CLOEXEC, dup2, dup3) and of an rdma_cm descriptor: each is the
 * same device file (one open file, as f_dupfd and do_dup2 make): its
 * fstat, its commands, its flags, its mappings, through any number (a
 * forked child's too), and the file lives until the last number is
 * closed. Says "one left" with one number
 * of the uverbs file open, "all closed" with none, "rdma_cm dup left"
 * with the rdma_cm file's duplicate open after its original's close and
 * "rdma_cm closed" with none, each time waiting for a line on stdin. */
static int dups(int fd)
{
	struct {
		int fd;
		const char *name;
		int cloexec;
	} d[] = {
		{dup(fd), "dup", 0},
		{fcntl(fd, F_DUPFD, 100), "F_DUPFD", 0},
		{fcntl(fd, F_DUPFD_CLOEXEC, 100), "F_DUPFD_CLOEXEC", 1},
		{dup2(fd, 200), "dup2", 0},
		{dup3(fd, 201, O_CLOEXEC), "dup3 O_CLOEXEC", 1},
	};
	const int n = sizeof(d) / sizeof(d[0]);
	char name[96];
	char *p;
	int cm, cd, status = 0;
	pid_t pid;

	CHECK("dup2 and dup3 numbers", d[3].fd == 200 && d[4].fd == 201, "%d %d", d[3].fd, d[4].fd);
	for (int i = 0; i < n; i++) {
		MUST("duplicate", d[i].fd >= 0);
		snprintf(name, sizeof(name), "%s: its own descriptor, close-on-exec as asked", d[i].name);
		CHECK(name, d[i].fd != fd && fcntl(d[i].fd, F_GETFD) == (d[i].cloexec ? FD_CLOEXEC : 0), "fd %d %#x",
		      d[i].fd, fcntl(d[i].fd, F_GETFD));
		snprintf(name, sizeof(name), "%s: fstat is the device", d[i].name);
		same_dev(d[i].fd, fd, name);
		snprintf(name, sizeof(name), "%s: a command gets its answer", d[i].name);
		hello(d[i].fd, name);
		snprintf(name, sizeof(name), "%s: F_GETFL is the open's", d[i].name);
		CHECK(name, fcntl(d[i].fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x", fcntl(d[i].fd, F_GETFL));
	}
	/* One file description: its flags are every number's. */
	CHECK("F_SETFL O_NONBLOCK on the dup shows on the original",
	      fcntl(d[0].fd, F_SETFL, O_NONBLOCK) == 0 && fcntl(fd, F_GETFL) == (O_RDWR | O_NONBLOCK | LARGEFILE),
	      "%#x", fcntl(fd, F_GETFL));
	hello(fd, "command on the original after the dup's F_SETFL");
	hello(d[0].fd, "command on the dup after its F_SETFL");
	CHECK("F_SETFL 0 on the original shows on the F_DUPFD_CLOEXEC one",
	      fcntl(fd, F_SETFL, 0) == 0 && fcntl(d[2].fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x",
	      fcntl(d[2].fd, F_GETFL));
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, d[1].fd, 8192);
	CHECK("mmap of the F_DUPFD one", p != MAP_FAILED && memcmp(p, "ring", 4) == 0, "p %p errno %d", (void *)p,
	      errno);
	if (p != MAP_FAILED)
		munmap(p, 4096);

	/* A forked child has every number: its duplicate is the device
	 * after it closes its original, and its closing them all leaves
	 * the parent's file as it was. */
	fflush(stdout);
	pid = fork();
	MUST("fork", pid >= 0);
	if (pid == 0) {
		close(fd);
		same_dev(d[0].fd, d[3].fd, "fork: the child's dup after its original's close: fstat is the device");
		CHECK("fork: the child's dup after its original's close: F_GETFL is the open's",
		      fcntl(d[0].fd, F_GETFL) == (O_RDWR | LARGEFILE), "%#x", fcntl(d[0].fd, F_GETFL));
		for (int i = 0; i < n; i++)
			close(d[i].fd);
		fflush(stdout);
		_exit(failed);
	}
	CHECK("fork: the child's checks", waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
						  WEXITSTATUS(status) == 0, "status %#x", status);
	hello(fd, "a command on the original after the child closed its numbers");

	CHECK("close the original", close(fd) == 0, "errno %d", errno);
	same_dev(d[0].fd, d[3].fd, "the dup after the original's close: fstat is the device");
	hello(d[0].fd, "a command on the dup after the original's close");
	for (int i = 0; i < n - 1; i++)
		close(d[i].fd);
	hello(d[n - 1].fd, "a command on the last number");
	if (!wait_line("one left"))
		return 1;
	hello(d[n - 1].fd, "a command on the last number, later");
	CHECK("close the last number", close(d[n - 1].fd) == 0, "errno %d", errno);
	if (!wait_line("all closed"))
		return 1;

	cm = open("/dev/infiniband/rdma_cm", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	MUST("open rdma_cm", cm >= 0);
	cd = dup(cm);
	CHECK("rdma_cm dup: F_GETFL is the open's", cd >= 0 && fcntl(cd, F_GETFL) == (O_RDWR | O_NONBLOCK | LARGEFILE),
	      "fd %d %#x", cd, fcntl(cd, F_GETFL));
	same_dev(cd, cm, "rdma_cm dup: fstat is the device");
	create_id(cd, "rdma_cm dup: CREATE_ID");
	CHECK("rdma_cm dup: F_SETFL 0 shows on the original",
	      fcntl(cd, F_SETFL, 0) == 0 && fcntl(cm, F_GETFL) == (O_RDWR | LARGEFILE), "%#x", fcntl(cm, F_GETFL));
	close(cm);
	create_id(cd, "rdma_cm dup: CREATE_ID after the original's close");
	if (!wait_line("rdma_cm dup left"))
		return 1;
	CHECK("rdma_cm dup: close", close(cd) == 0, "errno %d", errno);
	if (!wait_line("rdma_cm closed"))
		return 1;
	return failed;
}

/* access_checks checks the access family on the device as the kernel
 * answers it for a node of mode 0666 that root owns: no execute bit, so
 * execute is refused to root too. */
static void access_checks(int fd)
{
	const char *dev = "/dev/infiniband/uverbs0";

	CHECK("access R_OK|W_OK", access(dev, R_OK | W_OK) == 0, "errno %d", errno);
	CHECK("access F_OK", access(dev, F_OK) == 0, "errno %d", errno);
	FAILS("access X_OK is EACCES", access(dev, X_OK), EACCES);
	FAILS("access with a bad mode is EINVAL", access(dev, 8), EINVAL);
	FAILS("access of a device the tree lacks is ENOENT", access("/dev/infiniband/uverbs7", F_OK), ENOENT);
	FAILS("access of NULL is EFAULT", access((const char *)(uintptr_t)0, F_OK), EFAULT);
	CHECK("euidaccess R_OK|W_OK", euidaccess(dev, R_OK | W_OK) == 0, "errno %d", errno);
	CHECK("eaccess W_OK", eaccess(dev, W_OK) == 0, "errno %d", errno);
	CHECK("faccessat AT_EACCESS", faccessat(AT_FDCWD, dev, R_OK | W_OK, AT_EACCESS) == 0, "errno %d", errno);
	FAILS("faccessat with a bad flag is EINVAL", faccessat(AT_FDCWD, dev, R_OK, 0x1), EINVAL);
	CHECK("faccessat of the descriptor (AT_EMPTY_PATH)", faccessat(fd, "", R_OK | W_OK, AT_EMPTY_PATH) == 0,
	      "errno %d", errno);
	FAILS("faccessat X_OK of the descriptor is EACCES", faccessat(fd, "", X_OK, AT_EMPTY_PATH), EACCES);
	CHECK("access of another file is the kernel's", access("/", X_OK) == 0, "errno %d", errno);
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
	if (argc > 1 && strcmp(argv[1], "doorbells") == 0) {
		char line[16];
		doorbells(fd, 1, "answered doorbell");
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		doorbells(fd, 1, "doorbell");
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		doorbells(fd, 8, "doorbells of a watched ring");
		{
			/* The library's write of the answer fails as
			 * copy_to_user would: the daemon answers. */
			struct {
				struct ib_uverbs_cmd_hdr hdr;
				struct ib_uverbs_post_send cmd;
			} db = {.hdr = {.command = IB_USER_VERBS_CMD_POST_SEND, .in_words = sizeof(db) / 4, .out_words = 1},
				.cmd = {.response = 8, .qp_handle = 3, .wqe_size = 128}};
			errno = 0;
			CHECK("doorbell with a bad response address", write(fd, &db, sizeof(db)) < 0 && errno == EFAULT,
			      "errno %d", errno);
			fflush(stdout);
		}
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "oddbells") == 0) {
		struct {
			struct ib_uverbs_cmd_hdr hdr;
			struct ib_uverbs_post_send cmd;
			uint32_t extra;
		} db;
		long pg = sysconf(_SC_PAGESIZE);
		char *mem = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ssize_t r;
		/* ring rings librxe's doorbell (the QP known at RTS after it),
		 * then the odd one db, with its response at resp. */
#define ODD(name, size, want_ret, want_errno, check)                                          \
	do {                                                                                  \
		doorbells(fd, 1, "librxe's doorbell before " name);                           \
		errno = 0;                                                                    \
		r = write(fd, &db, size);                                                     \
		CHECK(name, r == (want_ret) && (r >= 0 || errno == (want_errno)) && (check), \
		      "write %zd errno %d", r, errno);                                        \
	} while (0)
#define RESET(resp)                                                                          \
	do {                                                                                 \
		memset(&db, 0, sizeof(db));                                                  \
		db.hdr.command = IB_USER_VERBS_CMD_POST_SEND;                                \
		db.hdr.in_words = sizeof(db.hdr) / 4 + sizeof(db.cmd) / 4;                   \
		db.hdr.out_words = 1;                                                        \
		db.cmd.response = (uintptr_t)(resp);                                         \
		db.cmd.qp_handle = 3;                                                        \
		db.cmd.wqe_size = 128;                                                       \
	} while (0)
		const size_t base = sizeof(db.hdr) + sizeof(db.cmd);
		if (mem == MAP_FAILED || mprotect(mem + pg, pg, PROT_NONE) != 0)
			return 1;
		memset(mem, 0x5a, pg);
		/* Room for no response: verify_hdr's ENOSPC. */
		RESET(mem);
		db.hdr.out_words = 0;
		ODD("doorbell with no response room", base, -1, ENOSPC, 1);
		/* in_words not the write's length: EINVAL. */
		RESET(mem);
		db.hdr.in_words++;
		ODD("doorbell whose in_words is not its length", base, -1, EINVAL, 1);
		/* A wqe_size under a send WR's: EINVAL. */
		RESET(mem);
		db.cmd.wqe_size = 8;
		ODD("doorbell with a small wqe_size", base, -1, EINVAL, 1);
		/* A wqe_size past what kmalloc gives: ENOMEM. */
		RESET(mem);
		db.cmd.wqe_size = (4u << 20) + 1;
		ODD("doorbell with a wqe_size kmalloc cannot give", base, -1, ENOMEM, 1);
		/* Unknown request bytes not zero: EOPNOTSUPP. */
		RESET(mem);
		db.hdr.in_words++;
		db.extra = 1;
		ODD("doorbell with unknown bytes", base + 4, -1, EOPNOTSUPP, 1);
		/* Room for two words: the second is zeroed too. */
		RESET(mem + 64);
		db.hdr.out_words = 2;
		memset(mem + 64, 0x5a, 8);
		ODD("doorbell with two words of response room", base, (ssize_t)base,
		    0, memcmp(mem + 64, "\0\0\0\0\0\0\0\0", 8) == 0 && mem[72] == 0x5a);
		/* Its second word on a page that cannot be written: EFAULT. */
		RESET(mem + pg - 4);
		db.hdr.out_words = 2;
		ODD("doorbell whose response room runs onto an unwritable page", base, -1, EFAULT, 1);
		/* Librxe's form at an address not 4-byte aligned, and across
		 * the last bytes of the page: answered, only those bytes
		 * written. */
		RESET(mem + 129);
		ODD("doorbell with an unaligned response", base, (ssize_t)base, 0,
		    memcmp(mem + 129, "\0\0\0\0", 4) == 0 && mem[128] == 0x5a && mem[133] == 0x5a);
		RESET(mem + pg - 3);
		ODD("doorbell whose response crosses onto an unwritable page", base, -1, EFAULT, 1);
		/* Across two writable pages: answered. */
		mprotect(mem + pg, pg, PROT_READ | PROT_WRITE);
		memset(mem, 0x5a, 2 * pg);
		RESET(mem + pg - 2);
		ODD("doorbell whose response crosses two writable pages", base, (ssize_t)base, 0,
		    memcmp(mem + pg - 2, "\0\0\0\0", 4) == 0 && mem[pg - 3] == 0x5a && mem[pg + 2] == 0x5a);
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "efault") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		efault(fd);
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "access") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		access_checks(fd);
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "fdflags") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		alarm(20); /* a GET_EVENT that waits fails the probe */
		fdflags(fd);
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "dup") == 0) {
		alarm(20); /* a command whose answer never comes fails the probe */
		return dups(fd);
	}
	if (argc > 1 && strcmp(argv[1], "accmode") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		accmode();
		return failed;
	}
	if (argc > 1 && strcmp(argv[1], "badptr") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		badptr(fd);
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
	/* The daemon closed its end: the event file's end reads as EIO, as
	 * the kernel's event queue freed, through any duplicate too. */
	{
		int d = dup((int)passed), d2 = fcntl((int)passed, F_DUPFD_CLOEXEC, 0);
		errno = 0;
		CHECK("the passed fd's end is EIO", read((int)passed, msg, sizeof(msg)) == -1 && errno == EIO, "errno %d",
		      errno);
		errno = 0;
		CHECK("its dup's end is EIO", d >= 0 && read(d, msg, sizeof(msg)) == -1 && errno == EIO, "fd %d errno %d",
		      d, errno);
		errno = 0;
		CHECK("its F_DUPFD's end is EIO", d2 >= 0 && read(d2, msg, sizeof(msg)) == -1 && errno == EIO,
		      "fd %d errno %d", d2, errno);
		close(d);
		close(d2);
	}

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
