/*
 * softroce_preload.c: the LD_PRELOAD library that presents softroce's
 * emulated device to an unmodified libibverbs program.
 *
 * The program's libibverbs and its rxe provider (librxe) stay the
 * distribution's. They find the device in the sysfs tree the daemon writes
 * ($SYSFS_PATH) and talk to the kernel through /dev/infiniband/uverbsN.
 * This library wraps the libc calls that reach that device node, for those
 * paths and the descriptors they return only; every other call goes to the
 * next definition (the real libc function, found with dlsym(RTLD_NEXT)):
 *
 *   open/open64/openat/openat64/__open_2/__open64_2/__openat_2/__openat64_2
 *       of the kernel's RDMA sysfs paths: the tree's files (see
 *       tree_path); of /dev/infiniband/NAME: a SOCK_SEQPACKET connection to the daemon
 *       ($SOFTROCE_SOCK), close-on-exec if asked, then an OPEN exchange
 *       (a path pointer that cannot be read is no device's: the real call
 *       answers EFAULT, as getname; see dev_name; flags a character
 *       device refuses get the kernel's errno: see open_refused);
 *   access/faccessat/euidaccess/eaccess of the device: read and write
 *       allowed, as its mode 0666 (see access_answer);
 *   stat/stat64/lstat/lstat64/fstat/fstat64/fstatat/fstatat64/statx and the
 *       __xstat family: a character device with the dev_t the sysfs tree
 *       names (libibverbs checks S_ISCHR and st_rdev); a buffer that
 *       cannot be written is EFAULT, as cp_new_stat (see writable);
 *   ioctl on such a descriptor: RDMA_VERBS_IOCTL on a uverbs file goes
 *       to the daemon (see ioctl.c; ENOTTY with SOFTROCE_VERBS_ABI=write,
 *       and on rdma_cm, so that libibverbs uses the write() command ABI);
 *       a umad file's go to umad.c; do_vfs_ioctl's own requests (FIOCLEX,
 *       FIONCLEX, FIONBIO, FIOASYNC) as the kernel answers them; any
 *       other ENOTTY;
 *   fcntl/fcntl64: F_GETFL and F_SETFL keep the device file's flags, not
 *       the connection's, which stays blocking (see set_flags); F_DUPFD
 *       and F_DUPFD_CLOEXEC as dup;
 *   dup, and dup2/dup3 from such a descriptor: the real duplicate, and
 *       the new number is the same device file (one slot: its flags, its
 *       mode, its doorbells, its mappings), as f_dupfd and do_dup2
 *       install one open file under a new number (see dup_begin); a
 *       duplicate of an event file a command handed over is one too
 *       (see known_dup);
 *   write: one request/reply exchange; the daemon writes the command's
 *       response into this process's memory itself (as copy_to_user), and
 *       files it hands over arrive with SCM_RIGHTS: their numbers are stored
 *       as 32-bit values at the addresses the reply names and reported
 *       back to the daemon before write() returns; a REG_MR first shares
 *       the buffer's pages with the daemon (see "Shared MR pages"); a
 *       doorbell whose answer is known may go one-way (see "One-way
 *       doorbells"); a buffer that cannot be read (wholly) is EFAULT,
 *       nothing sent, as ib_uverbs_write's and ucma_write's
 *       copy_from_user (see readable);
 *   madvise: keeps the kernel's behaviour of pinned pages on shared ones
 *       (MADV_DONTNEED, MADV_FREE, MADV_REMOVE) and remembers
 *       MADV_DONTFORK ranges;
 *   read: on such a descriptor EINVAL (the kernel's uverbs command file
 *       has no read), EBADF where the open's mode gave no read (as write
 *       where it gave no write: see can_read); on an empty file of the
 *       sysfs tree ($SYSFS_PATH) EINVAL, an attribute whose show fails
 *       (see note_attr); on an
 *       event file a command handed over (a completion channel, the async
 *       event file), the end of file its daemon end's close makes is EIO,
 *       as a read of the kernel's event queue freed by ib_uverbs_close;
 *   mmap/mmap64 of such a descriptor: the daemon sends the memfd behind the
 *       offset and it is mapped in its place (EACCES where the open's mode
 *       does not allow the mapping);
 *   close, and dup2/dup3 onto such a descriptor: forget it, then close it
 *       (the daemon sees the end of the connection when the program's last
 *       descriptor of the file and the last call in flight on it are gone,
 *       as the last fput runs __fput and ib_uverbs_close). As the
 *       kernel's fdget, a call in flight holds the file: it works on the
 *       library's own descriptors of the connection and of the eventfd,
 *       which the last call out closes after the program's close (a
 *       GET_EVENT waiting when another thread closes the channel waits
 *       on, and takes an event that still comes);
 *   /dev/infiniband/rdma_cm: the daemon passes an eventfd with the OPEN
 *       reply, and that is the descriptor open() returns (poll-readable
 *       while events are queued, as the kernel's ucma file); the
 *       connection stays behind it. A GET_EVENT write first takes one
 *       count from the eventfd (blocking unless the descriptor is
 *       O_NONBLOCK: then EAGAIN), then asks the daemon; MIGRATE_ID's fd
 *       field is translated to the daemon's name for that file;
 *   /dev/infiniband/umadN: as rdma_cm, the program gets an eventfd the
 *       daemon counts queued MADs on; write, read and ioctl are umad.c's;
 *   socket(AF_NETLINK, ..., NETLINK_RDMA): EPROTONOSUPPORT, so libibverbs
 *       and librdmacm read the sysfs tree instead of asking the kernel.
 *
 * munmap needs no wrapper: the mappings are ordinary shared mappings of the
 * memfds.
 *
 * The frame layout (struct frame_hdr, the operations, the limits) is
 * defined once, in package preload's proto.go; this file follows it.
 *
 * No threads, no signal handlers. Each fake descriptor has a mutex so that
 * threads sharing a context get their own replies; EINTR never breaks an
 * exchange in the middle. A fork handler resets the child's counts of
 * calls in flight and gives the child private copies of shared MR pages.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include "softroce_preload.h"

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif
#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

/* The largest wqe_size the kernel's POST_SEND takes (KMALLOC_MAX_SIZE:
 * package uverbs, KmallocMax); a larger one is ENOMEM. */
#define KMALLOC_MAX (4u << 20)

#define DEV_PREFIX "/dev/infiniband/"

/* QP handles below DB_HANDLES may get doorbells the library answers. */
#define DB_HANDLES WATCH_HANDLES

/* The table of fake descriptors: slot_of[fd] is the slot + 1. */
#define MAX_FAKE 64
#define MAX_FD 65536

struct fake {
	pthread_mutex_t mu;
	dev_t rdev;
	int sock;       /* the connection to the daemon: the library's own descriptor */
	int ev;         /* rdma_cm: the library's own descriptor of the eventfd, else -1 */
	int cm;         /* an rdma_cm or umad file: the program's fd is its eventfd */
	int umad;       /* a umad file (umad.c) */
	int acc;        /* the open's access mode (flags & O_ACCMODE): see can_read */
	int fl;         /* the file's flags as F_GETFL reports them: see status_flags */
	uint32_t token; /* rdma_cm: the daemon's name of the file (MIGRATE_ID) */
	int share;      /* uverbs: the daemon takes shared MR pages (OP_SHARE) */
	/* uverbs one-way doorbells (see one_way_doorbell), under mu: */
	int oneway;        /* the daemon takes them */
	int sync_db;       /* its last reply asked for answered doorbells */
	const uint32_t *watch; /* the daemon's watch page (see watched), or NULL */
	int run;           /* one-way doorbells since the last answered one */
	unsigned char rts[DB_HANDLES / 8]; /* QP handles known at RTS or later */
	int refs;       /* calls in flight on the file (table_mu) */
	int users;      /* the program's descriptors of the file, its numbers in
			 * slot_of (table_mu): with none left, the last call
			 * out releases */
};

/* rdma_user_cm.h: the commands the library looks at, and the daemon's
 * MIGRATE_ID names for descriptors that are not rdma_cm files. */
#define UCM_CMD_GET_EVENT 12
#define UCM_CMD_MIGRATE_ID 18
#define UCM_TOKEN_NOT_OPEN 0xffffffffu
#define UCM_TOKEN_NOT_UCMA 0xfffffffeu

static struct fake fakes[MAX_FAKE] = {[0 ... MAX_FAKE - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER}};
static unsigned char slot_of[MAX_FD];
static unsigned char slot_used[MAX_FAKE];
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;

#define REAL(ret, name, args)                                                \
	static ret(*real_##name) args;                                       \
	static ret(*get_##name(void)) args                                   \
	{                                                                    \
		if (!__atomic_load_n(&real_##name, __ATOMIC_ACQUIRE))        \
			__atomic_store_n(&real_##name, dlsym(RTLD_NEXT, #name), \
					 __ATOMIC_RELEASE);                  \
		return __atomic_load_n(&real_##name, __ATOMIC_ACQUIRE);      \
	}

REAL(int, open, (const char *, int, ...))
REAL(int, open64, (const char *, int, ...))
REAL(int, openat, (int, const char *, int, ...))
REAL(int, openat64, (int, const char *, int, ...))
REAL(int, __open_2, (const char *, int))
REAL(int, __open64_2, (const char *, int))
REAL(int, __openat_2, (int, const char *, int))
REAL(int, __openat64_2, (int, const char *, int))
REAL(int, stat, (const char *, struct stat *))
REAL(int, access, (const char *, int))
REAL(int, faccessat, (int, const char *, int, int))
REAL(int, euidaccess, (const char *, int))
REAL(int, eaccess, (const char *, int))
REAL(int, stat64, (const char *, struct stat64 *))
REAL(int, lstat, (const char *, struct stat *))
REAL(int, lstat64, (const char *, struct stat64 *))
REAL(int, fstat, (int, struct stat *))
REAL(int, fstat64, (int, struct stat64 *))
REAL(int, fstatat, (int, const char *, struct stat *, int))
REAL(int, fstatat64, (int, const char *, struct stat64 *, int))
REAL(int, statx, (int, const char *, int, unsigned int, struct statx *))
REAL(int, __xstat, (int, const char *, struct stat *))
REAL(int, __xstat64, (int, const char *, struct stat64 *))
REAL(int, __lxstat, (int, const char *, struct stat *))
REAL(int, __lxstat64, (int, const char *, struct stat64 *))
REAL(int, __fxstat, (int, int, struct stat *))
REAL(int, __fxstat64, (int, int, struct stat64 *))
REAL(int, __fxstatat, (int, int, const char *, struct stat *, int))
REAL(int, __fxstatat64, (int, int, const char *, struct stat64 *, int))
REAL(int, ioctl, (int, unsigned long, ...))
REAL(ssize_t, write, (int, const void *, size_t))
REAL(ssize_t, read, (int, void *, size_t))
REAL(void *, mmap, (void *, size_t, int, int, int, off_t))
REAL(void *, mmap64, (void *, size_t, int, int, int, off64_t))
REAL(int, close, (int))
REAL(int, socket, (int, int, int))
REAL(int, dup, (int))
REAL(int, dup2, (int, int))
REAL(int, dup3, (int, int, int))
REAL(int, fcntl, (int, int, ...))
REAL(int, fcntl64, (int, int, ...))
REAL(int, madvise, (void *, size_t, int))

/* Files the library knows by number: the event files uverbs commands
 * handed over (completion channels, the async event file; KNOWN_EVFILE)
 * and the failing attributes of the sysfs tree (KNOWN_ATTR, see
 * note_attr). known_as[fd] is the kind of the file under a number, and
 * known (table_mu) names each one's inode, to tell it from a later file
 * under the same number that a close not wrapped left it to. */
#define KNOWN_EVFILE 1
#define KNOWN_ATTR 2
#define MAX_KNOWN 272
static unsigned char known_as[MAX_FD];
static struct {
	int fd;
	dev_t dev;
	ino_t ino;
} known[MAX_KNOWN];
static int n_known;

static int fake_slot(int fd)
{
	if (fd < 0 || fd >= MAX_FD)
		return -1;
	return (int)__atomic_load_n(&slot_of[fd], __ATOMIC_ACQUIRE) - 1;
}

/* can_read and can_write: the access the open's mode gave the file (the
 * kernel's FMODE_READ, FMODE_WRITE; O_ACCMODE itself gives neither). The
 * kernel opens a device read-only or write-only too; vfs_read and
 * vfs_write then answer EBADF before anything else. */
static int can_read(int s)
{
	return fakes[s].acc == O_RDONLY || fakes[s].acc == O_RDWR;
}

static int can_write(int s)
{
	return fakes[s].acc == O_WRONLY || fakes[s].acc == O_RDWR;
}

/*
 * The calling thread's stack, as pthread_getattr_np reports it (stack_hi
 * 1: not known). Every byte between the stack pointer and the stack's top
 * is mapped and readable: the live frames of the thread, up to the top of
 * its stack mapping (the guard page lies below). librxe's doorbell
 * command lives there, in post_send_db's frame: such a buffer needs no
 * probe, and the doorbell, written tens of thousands of times a second,
 * no system call. A thread on another stack (sigaltstack, a coroutine's)
 * has its buffers probed.
 */
static __thread uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));

static int on_live_stack(const void *p, size_t n)
{
	volatile char here = 0;
	uintptr_t sp = (uintptr_t)&here, a = (uintptr_t)p;

	if (!stack_hi) {
		pthread_attr_t attr;
		void *addr;
		size_t size;
		stack_hi = 1;
		if (pthread_getattr_np(pthread_self(), &attr) == 0) {
			if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size > 0) {
				stack_lo = (uintptr_t)addr;
				stack_hi = stack_lo + size;
			}
			pthread_attr_destroy(&attr);
		}
	}
	return sp >= stack_lo && sp < stack_hi && a > sp && a + n >= a && a + n <= stack_hi;
}

/*
 * readable reports whether every byte of [p, p+n) can be read: the check
 * the library makes before it reads bytes of the caller's buffer itself,
 * so that a write() from a buffer the kernel's copy_from_user would fail
 * on answers EFAULT instead of crashing the program. A page's protection
 * holds for all its bytes: one probe per page touched. The probe is
 * rt_sigprocmask with a "how" no kernel knows: it copies the 8 bytes of
 * its set from the address first (EFAULT where it cannot) and then
 * refuses the "how" (EINVAL), changing nothing; 0.2 us here, where
 * process_vm_readv of the bytes took 1.3 us. The 8 bytes probed start at
 * an address rounded down to 8, in the page of the byte checked (at 8 in
 * page 0: a NULL set is none, and the call would succeed). A buffer in
 * the calling thread's live stack frames needs no probe (on_live_stack),
 * nor do bytes the library only sends to the daemon: sendmsg copies them
 * and fails with EFAULT, sending nothing, where one cannot be read.
 * (Another thread unmapping the buffer while the write runs is a race the
 * program makes; the kernel's answer would be EFAULT, the library's may
 * be the fault.)
 */
/* probe_pages calls probe(a, end) for each page [a, end) touches, a the
 * range's first byte in that page, and reports whether every probe
 * passed; errno is kept. */
static int probe_pages(uintptr_t a, uintptr_t end, int (*probe)(uintptr_t a, uintptr_t end))
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	int e = errno, ok = 1;

	while (ok) {
		ok = probe(a, end);
		a = (a | (pg - 1)) + 1;
		if (a >= end || a == 0)
			break;
	}
	errno = e;
	return ok;
}

static int read_probe(uintptr_t a, uintptr_t end)
{
	/* A NULL set is no set: page 0 is probed at 8. */
	uintptr_t at = (a & ~(uintptr_t)7) ? (a & ~(uintptr_t)7) : 8;
	(void)end;
	return !(syscall(SYS_rt_sigprocmask, -1, (void *)at, NULL, (size_t)8) < 0 && errno == EFAULT);
}

static int readable(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p, end = a + n;

	if (n == 0 || on_live_stack(p, n))
		return 1;
	if (end < a)
		return 0;
	return probe_pages(a, end, read_probe);
}

/*
 * user_range reports whether [p, p+n) lies in the user half of the address
 * space as the kernel's access_ok sees it, the check vfs_write makes
 * before the file's write (EFAULT), mapped or not. A range that wraps or
 * reaches past 1<<63 does not, on any 64-bit kernel; the bound below that
 * (TASK_SIZE_MAX: 47, 48, 52 or 56 bits) is the kernel's to say: a write
 * of the range to /dev/null, which reads nothing, answers as access_ok.
 * Three system calls: for the writes refused without reading (shorter
 * than a header, longer than any command) only; the others read their
 * bytes through readable, whose probe fails there too.
 */
static int user_range(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	int e = errno, ok = 1, fd;

	if (a + n < a || a + n > ((uintptr_t)1 << 63))
		return 0;
	fd = get_openat()(AT_FDCWD, "/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ok = get_write()(fd, p, n) >= 0 || errno != EFAULT;
		get_close()(fd);
	}
	errno = e;
	return ok;
}

/*
 * writable reports whether every byte of [p, p+n) can be written (n at
 * least 4): the check before the library stores into the caller's memory
 * (a stat buffer), so that where the kernel's copy_to_user fails the
 * call answers EFAULT instead of crashing the program. PR_GET_PDEATHSIG
 * stores 4 bytes at its address (put_user, EFAULT where it cannot): one
 * probe per page touched, each 4 bytes inside [p, p+n) (the last may
 * straddle two pages), so nothing outside the buffer is written. Bytes of
 * the buffer the probe wrote before a later page failed hold the probe's
 * value, as the kernel's partial copy_to_user leaves bytes behind.
 */
static int write_probe(uintptr_t a, uintptr_t end)
{
	uintptr_t at = a + 4 > end ? end - 4 : a;
	return prctl(PR_GET_PDEATHSIG, (unsigned long)at, 0, 0, 0) == 0;
}

static int writable(void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p, end = a + n;

	if (on_live_stack(p, n))
		return 1;
	if (n < 4 || end < a)
		return 0;
	return probe_pages(a, end, write_probe);
}

/*
 * dev_name returns the NAME of /dev/infiniband/NAME, or NULL. It runs on
 * every path every program opens or stats, and the path may be a pointer
 * the kernel would refuse (getname: EFAULT). Unless probe is 0 (the real
 * call's getname already read the path: see path_read), the bytes are
 * compared one by one, each page proven readable before its first byte
 * is read (one probe for most paths, which differ from the prefix within
 * a page), and an unreadable path is not ours: the real call gives the
 * kernel's EFAULT.
 */
static const char *dev_name_probed(const char *path, int probe)
{
	static const char prefix[] = DEV_PREFIX;
	const size_t n = sizeof(prefix) - 1;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	size_t i;

	if (!path)
		return NULL;
	for (i = 0;; i++) {
		const char *c = path + i;
		if (probe && (i == 0 || ((uintptr_t)c & (pg - 1)) == 0) && !readable(c, 1))
			return NULL;
		if (i < n) {
			if (*c != prefix[i])
				return NULL;
			continue;
		}
		if (!*c)
			break;
		if (*c == '/' || i - n >= NAME_MAX_LEN - 1)
			return NULL;
	}
	return i > n ? path + n : NULL;
}

static const char *dev_name(const char *path)
{
	return dev_name_probed(path, 1);
}

/*
 * path_read reports whether the real stat call's answer (r, errno) shows
 * that the kernel read its path whole, up to its NUL or PATH_MAX bytes:
 * success, or an error of the lookup, which comes after getname (ENOENT,
 * ENOTDIR, EACCES, ELOOP, ENAMETOOLONG, EOVERFLOW). Not EFAULT (the path's
 * or the buffer's) nor EINVAL (bad flags, refused before getname on some
 * kernels): then the path is probed. The stat wrappers make the real call
 * first (a stat changes nothing) and look at the path after: an ordinary
 * path, the kernel's answer in hand, needs no probe, and a device's gets
 * the library's answer over the real one.
 */
static int path_read(int r)
{
	switch (r == 0 ? 0 : errno) {
	case 0:
	case ENOENT:
	case ENOTDIR:
	case EACCES:
	case ELOOP:
	case ENAMETOOLONG:
	case EOVERFLOW:
		return 1;
	}
	return 0;
}

/* empty_path reports whether path is "" (AT_EMPTY_PATH's path); a path
 * that cannot be read is not, and the real call answers EFAULT. */
static int empty_path(const char *path, int probe)
{
	return path && (!probe || readable(path, 1)) && !*path;
}

/* sysfs_rdev reads the dev_t of NAME from the sysfs tree, as udev would
 * have made the node: class/infiniband_verbs/NAME/dev (uverbsN),
 * class/infiniband_mad/NAME/dev (umadN, issmN), class/misc/NAME/dev. */
static int sysfs_rdev(const char *name, dev_t *out)
{
	const char *root = getenv("SYSFS_PATH");
	char path[4096], buf[64];
	unsigned int maj, min;
	const char *cls = strncmp(name, "uverbs", 6) == 0 ? "infiniband_verbs"
			  : strncmp(name, "umad", 4) == 0 || strncmp(name, "issm", 4) == 0 ? "infiniband_mad"
											      : "misc";
	int fd;
	ssize_t n;

	if (!root || getuid() != geteuid())
		root = "/sys";
	if (snprintf(path, sizeof(path), "%s/class/%s/%s/dev", root, cls, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = get_openat()(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOENT;
	n = get_read()(fd, buf, sizeof(buf) - 1);
	get_close()(fd);
	if (n <= 0)
		return -ENOENT;
	buf[n] = 0;
	if (sscanf(buf, "%u:%u", &maj, &min) != 2)
		return -ENOENT;
	*out = makedev(maj, min);
	return 0;
}

static void fill_stat(struct stat *st, dev_t rdev)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFCHR | 0666;
	st->st_nlink = 1;
	st->st_rdev = rdev;
	st->st_blksize = 4096;
}

static void fill_statx(struct statx *st, dev_t rdev)
{
	memset(st, 0, sizeof(*st));
	st->stx_mask = STATX_TYPE | STATX_MODE | STATX_NLINK;
	st->stx_mode = S_IFCHR | 0666;
	st->stx_nlink = 1;
	st->stx_rdev_major = major(rdev);
	st->stx_rdev_minor = minor(rdev);
	st->stx_blksize = 4096;
}

/* node_lookup looks path up as the stat and access families do: 0 it is
 * no device's path; 1 the device's node, rdev its number; -1 the lookup
 * failed (errno set, *rc -1). probe as dev_name_probed's. */
static int node_lookup(const char *path, int probe, dev_t *rdev, int *rc)
{
	const char *name = dev_name_probed(path, probe);
	int err;

	if (!name)
		return 0;
	err = sysfs_rdev(name, rdev);
	if (err < 0) {
		errno = -err;
		*rc = -1;
		return -1;
	}
	return 1;
}

/* stat_path answers a stat of /dev/infiniband/NAME: 1 done (0 or -1 with
 * errno), 0 not ours (errno untouched); probe as dev_name_probed's. As
 * vfs_stat and cp_new_stat, the lookup's error (ENOENT) comes before the
 * buffer's (EFAULT). */
static int stat_path(const char *path, struct stat *st, int *rc, int probe)
{
	dev_t rdev;
	int found = node_lookup(path, probe, &rdev, rc);

	if (found <= 0)
		return found < 0;
	if (!writable(st, sizeof(*st))) {
		errno = EFAULT;
		*rc = -1;
		return 1;
	}
	fill_stat(st, rdev);
	*rc = 0;
	return 1;
}

/* stat_fd answers an fstat of a fake descriptor as stat_path does. */
static int stat_fd(int fd, struct stat *st, int *rc)
{
	int s = fake_slot(fd);
	if (s < 0)
		return 0;
	if (!writable(st, sizeof(*st))) {
		errno = EFAULT;
		*rc = -1;
		return 1;
	}
	fill_stat(st, fakes[s].rdev);
	*rc = 0;
	return 1;
}

/* gone is the result of a failed send or receive on the connection: a
 * connection the daemon's end closed (the daemon stopped, or was killed)
 * is EIO for the program's call, as a disassociated device's commands are
 * in the kernel (ib_uverbs_free_hw_resources). */
static int gone(int err)
{
	if (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNREFUSED)
		return -EIO;
	return -err;
}

/* xfer sends one frame and receives the reply; the slot's mutex is held.
 * Returns 0 or -errno of the transport; the command's result is in *rh. */
static int xfer_fd(int fd, struct frame_hdr *h, const void *payload, int sfd, void *rbuf, uint32_t rcap,
		   struct frame_hdr *rh, int *fds, int *nfds)
{
	struct iovec iov[2];
	struct msghdr msg;
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct cmsghdr *c;
	ssize_t n;

	iov[0].iov_base = h;
	iov[0].iov_len = sizeof(*h);
	iov[1].iov_base = (void *)payload;
	iov[1].iov_len = h->len;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = iov;
	msg.msg_iovlen = h->len ? 2 : 1;
	if (sfd >= 0) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int));
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &sfd, sizeof(int));
	}
	do
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return gone(errno);

	iov[0].iov_base = rh;
	iov[0].iov_len = sizeof(*rh);
	iov[1].iov_base = rbuf;
	iov[1].iov_len = rcap;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = iov;
	msg.msg_iovlen = 2;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof(ctl.buf);
	do
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return gone(errno);
	*nfds = 0;
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < MAX_FDS)
				fds[(*nfds)++] = f;
			else
				get_close()(f);
		}
	}
	if (n == 0)
		return -EIO; /* the daemon is gone */
	if ((size_t)n < sizeof(*rh) || rh->len != (size_t)n - sizeof(*rh) ||
	    (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || rh->op != h->op) {
		for (int i = 0; i < *nfds; i++)
			get_close()(fds[i]);
		*nfds = 0;
		return -EIO;
	}
	return 0;
}

/* xfer is xfer_fd sending no descriptor. */
static int xfer(int fd, struct frame_hdr *h, const void *payload, void *rbuf, uint32_t rcap,
		struct frame_hdr *rh, int *fds, int *nfds)
{
	return xfer_fd(fd, h, payload, -1, rbuf, rcap, rh, fds, nfds);
}

/* The kernel's O_LARGEFILE: open sets it on every file of a 64-bit
 * process (force_o_largefile), and F_GETFL reports it; glibc's O_LARGEFILE
 * is 0 there. A 32-bit process's open64 passes it in the flags. */
#if defined(__x86_64__) || defined(__aarch64__) || (defined(__riscv) && __riscv_xlen == 64) || defined(__s390x__)
#define KERNEL_O_LARGEFILE 0100000
#elif defined(__powerpc64__)
#define KERNEL_O_LARGEFILE 0200000
#else
#define KERNEL_O_LARGEFILE 0
#endif

/* The flags F_SETFL changes (the kernel's SETFL_MASK). */
#define SETFL_MASK (O_APPEND | O_NONBLOCK | O_NDELAY | O_DIRECT | O_NOATIME)

/* status_flags is the f_flags an open with flags gives the file: the
 * flags but those that act only at the open (do_dentry_open's O_CREAT,
 * O_EXCL, O_NOCTTY, O_TRUNC; the descriptor's O_CLOEXEC), with the
 * kernel's O_LARGEFILE. */
static int status_flags(int flags)
{
	return (flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_CLOEXEC)) | KERNEL_O_LARGEFILE;
}

/* open_refused is the kernel's answer to an open of a character device
 * with flags it refuses, in path_openat's order (0: none): the node
 * exists (O_CREAT|O_EXCL), is no directory, is root's (may_open's
 * O_NOATIME; st_uid 0 in fill_stat), and has no direct I/O
 * (do_dentry_open). */
static int open_refused(int flags)
{
	if ((flags & O_CREAT) && (flags & O_EXCL))
		return -EEXIST;
	if (flags & O_DIRECTORY)
		return -ENOTDIR;
	if ((flags & O_NOATIME) && geteuid() != 0)
		return -EPERM;
	if (flags & O_DIRECT)
		return -EINVAL;
	return 0;
}

static int fake_open(const char *name, int flags)
{
	const char *sock = getenv("SOFTROCE_SOCK");
	struct sockaddr_un sa;
	struct frame_hdr h, rh;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd, s = 0, err, nfds, fds[MAX_FDS], user, own = -1, ev = -1;
	uint32_t token = 0;
	const uint32_t *watch = NULL;
	dev_t rdev;
	char rbuf[16];

	if (!sock || strlen(sock) >= sizeof(sa.sun_path)) {
		errno = ENOENT;
		return -1;
	}
	err = sysfs_rdev(name, &rdev);
	if (err == 0)
		err = open_refused(flags);
	if (err < 0) {
		errno = -err;
		return -1;
	}
	fd = get_socket()(AF_UNIX, SOCK_SEQPACKET | ((flags & O_CLOEXEC) ? SOCK_CLOEXEC : 0), 0);
	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, sock);
	do
		err = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (err < 0 && errno == EINTR);
	if (err < 0) {
		/* Said once: libibverbs' own message ("Failed to open
		 * device") does not say why. */
		static int told;
		if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
			dprintf(2, "softroce: no daemon serves %s (%s): it ended or was stopped; start one with `softroce serve`\n",
				sock, strerror(errno));
		get_close()(fd);
		errno = ENXIO; /* no driver behind the node */
		return -1;
	}
	/* Let the daemon reach this process's memory with process_vm_readv
	 * under Yama's ptrace_scope 1 (EINVAL: no Yama, nothing to do). */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
		prctl(PR_SET_PTRACER, (unsigned long)cred.pid, 0, 0, 0);
	if (fd >= MAX_FD) {
		get_close()(fd);
		errno = EMFILE;
		return -1;
	}
	h.op = OP_OPEN;
	h.len = strlen(name);
	h.ret = 0;
	h.aux = PROTO_VERSION;
	err = xfer(fd, &h, name, rbuf, sizeof(rbuf), &rh, fds, &nfds);
	if (err == 0 && rh.ret < 0)
		err = rh.ret;
	user = fd;
	if (err == 0 && nfds == 1 && rh.len == 0 && (rh.aux & FEATURE_WATCH_PAGE)) {
		/* uverbs: the watch page, read-only (the daemon sealed it so). */
		watch = mmap(NULL, WATCH_HANDLES * sizeof(uint32_t), PROT_READ, MAP_SHARED, fds[0], 0);
		if (watch == MAP_FAILED)
			watch = NULL;
	} else if (err == 0 && nfds == 1 &&
		   (rh.len == sizeof(token) || (rh.len == 0 && (rh.aux & FEATURE_EVENT_FD)))) {
		/* rdma_cm and umad: the program gets the eventfd; the
		 * connection stays behind it. */
		if (rh.len == sizeof(token))
			memcpy(&token, rbuf, sizeof(token));
		user = fds[0];
		nfds = 0;
		if (!(flags & O_CLOEXEC))
			get_fcntl()(user, F_SETFD, 0);
		/* GET_EVENT's wait is the eventfd's (see cm_write). */
		if (flags & O_NONBLOCK)
			get_fcntl()(user, F_SETFL, O_NONBLOCK);
		if (user >= MAX_FD)
			err = -EMFILE;
	}
	for (int i = 0; i < nfds; i++)
		get_close()(fds[i]);
	/* The library's own descriptors of the file, which the calls in
	 * flight use: the program's close() does not end them. */
	if (err == 0 && user != fd) {
		own = fd;
		ev = get_fcntl()(user, F_DUPFD_CLOEXEC, 0);
		if (ev < 0)
			err = -errno;
	} else if (err == 0) {
		own = get_fcntl()(fd, F_DUPFD_CLOEXEC, 0);
		if (own < 0)
			err = -errno;
	}
	if (err == 0) {
		pthread_mutex_lock(&table_mu);
		for (s = 0; s < MAX_FAKE && slot_used[s]; s++)
			;
		if (s == MAX_FAKE) {
			pthread_mutex_unlock(&table_mu);
			err = -EMFILE;
		}
	}
	if (err < 0) {
		if (watch)
			munmap((void *)watch, WATCH_HANDLES * sizeof(uint32_t));
		if (ev >= 0)
			get_close()(ev);
		if (own >= 0 && own != fd)
			get_close()(own);
		if (user != fd)
			get_close()(user);
		get_close()(fd);
		errno = -err;
		return -1;
	}
	slot_used[s] = 1;
	fakes[s].rdev = rdev;
	fakes[s].sock = own;
	fakes[s].ev = ev;
	fakes[s].cm = user != fd;
	fakes[s].umad = user != fd && (rh.aux & FEATURE_EVENT_FD);
	fakes[s].acc = flags & O_ACCMODE;
	fakes[s].fl = status_flags(flags);
	fakes[s].token = token;
	fakes[s].share = user == fd && (rh.aux & FEATURE_SHARE_PAGES) && !getenv("SOFTROCE_NO_SHARED_PAGES");
	fakes[s].oneway = user == fd && (rh.aux & FEATURE_ONE_WAY_DOORBELLS) && !getenv("SOFTROCE_SYNC_DOORBELLS");
	fakes[s].sync_db = 0;
	fakes[s].watch = getenv("SOFTROCE_SYNC_DOORBELLS") ? NULL : watch;
	if (watch && !fakes[s].watch)
		munmap((void *)watch, WATCH_HANDLES * sizeof(uint32_t));
	fakes[s].run = 0;
	memset(fakes[s].rts, 0, sizeof(fakes[s].rts));
	fakes[s].refs = 0;
	fakes[s].users = 1;
	__atomic_store_n(&slot_of[user], (unsigned char)(s + 1), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&table_mu);
	return user;
}

/* hold takes a reference on fd's file for a call in flight: the slot's
 * descriptors stay open and the slot unused by others until release. As
 * the kernel's fdget, a call that found the file keeps it whatever another
 * thread closes meanwhile. Returns the slot or -1 (not a fake). */
static int hold(int fd)
{
	int s;
	if (fake_slot(fd) < 0)
		return -1;
	pthread_mutex_lock(&table_mu);
	s = fake_slot(fd);
	if (s >= 0)
		fakes[s].refs++;
	pthread_mutex_unlock(&table_mu);
	return s;
}

/* unhook frees slot s (table_mu held) and hands back its descriptors. */
static void unhook(int s, int *sock, int *ev)
{
	*sock = fakes[s].sock;
	*ev = fakes[s].ev;
	fakes[s].sock = fakes[s].ev = -1;
	if (fakes[s].watch)
		munmap((void *)fakes[s].watch, WATCH_HANDLES * sizeof(uint32_t));
	fakes[s].watch = NULL;
	slot_used[s] = 0;
}

static void close_own(int sock, int ev)
{
	int e = errno;
	if (sock >= 0)
		get_close()(sock);
	if (ev >= 0)
		get_close()(ev);
	errno = e;
}

/* release ends a call in flight; the last one out after the program's
 * close closes the file (the daemon sees the release then, as
 * ucma_close and ib_uverbs_close run after the last fdput). */
static void release(int s)
{
	int sock = -1, ev = -1;
	pthread_mutex_lock(&table_mu);
	if (--fakes[s].refs == 0 && fakes[s].users == 0)
		unhook(s, &sock, &ev);
	pthread_mutex_unlock(&table_mu);
	close_own(sock, ev);
}

/* drop takes fd's number out of the table (table_mu held). The file
 * goes with the program's last descriptor of it, as the last fput of a
 * file runs __fput, or when the last call in flight returns: *sock and
 * *ev are then the library's descriptors to close, else left alone. */
static void drop(int fd, int *sock, int *ev)
{
	int s = fake_slot(fd);
	if (s < 0)
		return;
	__atomic_store_n(&slot_of[fd], 0, __ATOMIC_RELEASE);
	if (--fakes[s].users == 0 && fakes[s].refs == 0)
		unhook(s, sock, ev);
}

/* forget is the program's close of fd: one descriptor of the file less. */
static void forget(int fd)
{
	int sock = -1, ev = -1;
	if (fake_slot(fd) < 0)
		return;
	pthread_mutex_lock(&table_mu);
	drop(fd, &sock, &ev);
	pthread_mutex_unlock(&table_mu);
	close_own(sock, ev);
}

/*
 * Duplicates. The kernel's dup, dup2, dup3 and F_DUPFD (f_dupfd,
 * do_dup2) give a new number to the same open file: the device file, its
 * flags, its mappings, reached through either number, released when the
 * last one goes (see drop). The real duplicate is made (the number is a
 * descriptor of the same connection, or eventfd, close-on-exec as asked)
 * and the new number maps to the same slot. dup_begin takes table_mu for
 * a fake oldfd and returns its slot (else -1, unlocked); the real dup is
 * made under it, so that a close of oldfd in another thread, whose drop
 * takes table_mu before its real close, comes wholly before (the number
 * is no fake any more: a plain dup) or after (the copy is of the device
 * file). dup_end records the new number r and unlocks.
 */
static int dup_begin(int oldfd)
{
	int s;
	if (fake_slot(oldfd) < 0)
		return -1;
	pthread_mutex_lock(&table_mu);
	s = fake_slot(oldfd);
	if (s < 0)
		pthread_mutex_unlock(&table_mu);
	return s;
}

static int dup_end(int s, int oldfd, int r)
{
	int sock = -1, ev = -1, e = errno;
	if (s < 0)
		return r;
	if (r >= MAX_FD) {
		/* No room in the table for the number. */
		get_close()(r);
		e = EMFILE;
		r = -1;
	} else if (r >= 0 && r != oldfd) {
		/* A number left in the table by a close the library did not
		 * see (close_range, a raw system call) is another file's no
		 * more. */
		drop(r, &sock, &ev);
		fakes[s].users++;
		__atomic_store_n(&slot_of[r], (unsigned char)(s + 1), __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&table_mu);
	close_own(sock, ev);
	errno = e;
	return r;
}

/* know records fd, a file of kind with stat st, replacing what the number
 * was; with the table full fd stays unknown (an event file's end then
 * reads as end of file, not EIO; an attribute reads as it is). */
static void know(int fd, int kind, const struct stat *st)
{
	int i;
	if (fd < 0 || fd >= MAX_FD)
		return;
	pthread_mutex_lock(&table_mu);
	for (i = 0; i < n_known && known[i].fd != fd; i++)
		;
	if (i < MAX_KNOWN) {
		if (i == n_known)
			n_known++;
		known[i].fd = fd;
		known[i].dev = st->st_dev;
		known[i].ino = st->st_ino;
		__atomic_store_n(&known_as[fd], (unsigned char)kind, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&table_mu);
}

/* unknow drops fd (table_mu held). */
static void unknow(int fd)
{
	__atomic_store_n(&known_as[fd], 0, __ATOMIC_RELEASE);
	for (int i = 0; i < n_known; i++) {
		if (known[i].fd == fd) {
			known[i] = known[--n_known];
			break;
		}
	}
}

/* forget_known drops fd: the program closes it. */
static void forget_known(int fd)
{
	if (fd < 0 || fd >= MAX_FD || !__atomic_load_n(&known_as[fd], __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&table_mu);
	unknow(fd);
	pthread_mutex_unlock(&table_mu);
}

/* is_known reports whether fd is a file of kind still: the number's inode
 * is the one recorded; a number since reused is forgotten. */
static int is_known(int fd, int kind)
{
	struct stat st;
	int ok = 0;
	if (fd < 0 || fd >= MAX_FD || __atomic_load_n(&known_as[fd], __ATOMIC_ACQUIRE) != kind)
		return 0;
	if (get_fstat()(fd, &st) < 0)
		return 0;
	pthread_mutex_lock(&table_mu);
	for (int i = 0; i < n_known; i++)
		if (known[i].fd == fd && known[i].dev == st.st_dev && known[i].ino == st.st_ino)
			ok = 1;
	if (!ok)
		unknow(fd);
	pthread_mutex_unlock(&table_mu);
	return ok;
}

/* known_dup makes r, a duplicate of oldfd, the same known file as oldfd
 * (an event file's duplicate reads its end as EIO too); it returns r. */
static int known_dup(int oldfd, int r)
{
	struct stat st;
	int kind, e = errno;

	if (r < 0 || r == oldfd || oldfd < 0 || oldfd >= MAX_FD)
		return r;
	kind = __atomic_load_n(&known_as[oldfd], __ATOMIC_ACQUIRE);
	if (kind && is_known(oldfd, kind) && get_fstat()(r, &st) == 0)
		know(r, kind, &st);
	errno = e;
	return r;
}

/* ev_add records fd as an event file handed over. */
static void ev_add(int fd)
{
	struct stat st;
	if (fd >= 0 && get_fstat()(fd, &st) == 0)
		know(fd, KNOWN_EVFILE, &st);
}

/*
 * Shared MR pages. The kernel's device reaches an MR through the pages
 * ib_umem_get pins; the daemon reaches the program's memory with a system
 * call per transfer unless it maps the pages too. Before a REG_MR on whole
 * pages of private anonymous memory (malloc, anonymous mmap), this library
 * moves those pages into a memfd mapped MAP_SHARED over the same addresses
 * (the program sees the same bytes) and passes the memfd to the daemon
 * (OP_SHARE), which maps it for the MR. Where shared memory behaves
 * otherwise than private memory, the library keeps the kernel's behaviour
 * for pinned pages:
 *  - fork: the child gets a private copy of each such mapping, as the
 *    kernel copies pinned anonymous pages at fork (the child's fork
 *    handler makes it); a range the program marked MADV_DONTFORK stays out
 *    of the child, the mark put back on the new mapping;
 *  - madvise(MADV_DONTNEED or MADV_FREE) there: the program gets fresh zero
 *    pages while the MR keeps the old ones, as when the kernel zaps the
 *    page table entries of pinned pages; MADV_REMOVE is EINVAL, as on
 *    private memory.
 * libc's internal calls (malloc's own madvise) do not pass through here;
 * glibc's allocator does not rely on their zeroing. A write by another
 * thread to the pages while the REG_MR copies them would be lost: programs
 * do not write a buffer while they register it. SOFTROCE_NO_SHARED_PAGES
 * in the environment turns this off.
 */
#define SHARE_MAX (1ULL << 36)
#define SHARE_NAME "softroce-mr"
#define MAX_DONTFORK 64

static int n_shared;                   /* regions shared so far (share_mu; read atomically) */
static uintptr_t shared_lo, shared_hi; /* bounds of every region shared (written under share_mu, read atomically) */
static pthread_mutex_t share_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uintptr_t lo, hi;
} dontfork[MAX_DONTFORK]; /* the MADV_DONTFORK ranges (share_mu) */
static int n_dontfork, dontfork_lost;

/* One line of /proc/self/maps. */
struct vma {
	uintptr_t start, end;
	char perms[4];
	unsigned long long inode;
	char path[32]; /* its first bytes */
};

/* maps_reader reads /proc/self/maps with plain system calls (no stdio:
 * it runs in a fork handler too). */
struct maps_reader {
	int fd;
	char buf[4096];
	size_t len, pos;
};

static int maps_open(struct maps_reader *r)
{
	r->fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
	r->len = r->pos = 0;
	return r->fd >= 0;
}

static void maps_close(struct maps_reader *r)
{
	syscall(SYS_close, r->fd);
}

static int maps_char(struct maps_reader *r)
{
	if (r->pos == r->len) {
		long k;
		do
			k = syscall(SYS_read, r->fd, r->buf, sizeof(r->buf));
		while (k < 0 && errno == EINTR);
		if (k <= 0)
			return -1;
		r->len = k;
		r->pos = 0;
	}
	return (unsigned char)r->buf[r->pos++];
}

/* num reads a number in base 16 or 10 ending at a byte in stop; -1 if none. */
static int num(struct maps_reader *r, int base, const char *stop, unsigned long long *v)
{
	int c, n = 0;
	*v = 0;
	while ((c = maps_char(r)) >= 0 && !strchr(stop, c)) {
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99;
		if (d >= base)
			return -1;
		*v = *v * base + d;
		n++;
	}
	return c < 0 || n == 0 ? -1 : c;
}

/* maps_next reads the next line into v: 1, or 0 at the end (or at a line
 * it cannot read, which ends the walk: nothing past it is touched). */
static int maps_next(struct maps_reader *r, struct vma *v)
{
	unsigned long long a, b, x;
	int c, n = 0;
	if (num(r, 16, "-", &a) < 0 || num(r, 16, " ", &b) < 0)
		return 0;
	for (int i = 0; i < 4; i++) {
		if ((c = maps_char(r)) < 0)
			return 0;
		v->perms[i] = c;
	}
	if (maps_char(r) != ' ' || num(r, 16, " ", &x) < 0 || num(r, 16, ":", &x) < 0 ||
	    num(r, 16, " ", &x) < 0 || num(r, 10, " \n", &v->inode) < 0)
		return 0;
	while ((c = maps_char(r)) == ' ')
		;
	while (c >= 0 && c != '\n') {
		if (n + 1 < (int)sizeof(v->path))
			v->path[n++] = c;
		c = maps_char(r);
	}
	v->path[n] = 0;
	v->start = a;
	v->end = b;
	return 1;
}

static int prot_of(const char *perms)
{
	return (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
	       (perms[2] == 'x' ? PROT_EXEC : 0);
}

static int is_shared_region(const struct vma *v)
{
	return v->perms[3] == 's' && !strncmp(v->path, "/memfd:" SHARE_NAME, strlen("/memfd:" SHARE_NAME));
}

/* private_anon returns the protection of [lo, hi) when every byte of it
 * lies in readable private anonymous memory of one protection (anonymous
 * mappings, the heap), else -1. */
static int private_anon(uintptr_t lo, uintptr_t hi)
{
	struct maps_reader r;
	struct vma v;
	uintptr_t a = lo;
	int prot = -1;
	if (!maps_open(&r))
		return -1;
	while (a < hi && maps_next(&r, &v)) {
		if (v.end <= a)
			continue;
		if (v.start > a || v.perms[3] != 'p' || v.inode != 0 || v.perms[0] != 'r' ||
		    (v.path[0] && strcmp(v.path, "[heap]") && strncmp(v.path, "[anon:", 6)) ||
		    (prot >= 0 && prot != prot_of(v.perms))) {
			prot = -1;
			break;
		}
		prot = prot_of(v.perms);
		a = v.end;
	}
	maps_close(&r);
	return a >= hi ? prot : -1;
}

/* dontfork_note records madvise(MADV_DONTFORK or MADV_DOFORK) of [lo, hi).
 * share_mu held. */
static void dontfork_note(uintptr_t lo, uintptr_t hi, int dont)
{
	if (dont) {
		if (n_dontfork == MAX_DONTFORK) {
			dontfork_lost = 1;
			return;
		}
		dontfork[n_dontfork].lo = lo;
		dontfork[n_dontfork++].hi = hi;
		return;
	}
	for (int i = 0; i < n_dontfork; i++) {
		uintptr_t a = dontfork[i].lo, b = dontfork[i].hi;
		if (b <= lo || a >= hi)
			continue;
		if (a < lo && b > hi) { /* split */
			if (n_dontfork == MAX_DONTFORK) {
				dontfork_lost = 1;
				return;
			}
			dontfork[n_dontfork].lo = hi;
			dontfork[n_dontfork++].hi = b;
			dontfork[i].hi = lo;
		} else if (a < lo) {
			dontfork[i].hi = lo;
		} else if (b > hi) {
			dontfork[i].lo = hi;
		} else {
			dontfork[i--] = dontfork[--n_dontfork];
		}
	}
}

/* share_pages moves [start, start+len) into a memfd and tells the daemon
 * (sock), when it is whole pages of private anonymous memory. Nothing
 * changes where a step fails before the pages moved. */
static void share_pages(int sock, uint64_t start, uint64_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct frame_hdr h, rh;
	uint64_t req[2] = {start, len};
	int prot, fd, nfds = 0, fds[MAX_FDS];
	void *tmp, *p;

	if (pg <= 0 || start % pg || len % pg || len == 0 || len > SHARE_MAX || start + len < start)
		return;
	pthread_mutex_lock(&share_mu);
	prot = dontfork_lost ? -1 : private_anon(start, start + len);
	if (prot < 0)
		goto out;
	fd = syscall(SYS_memfd_create, SHARE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		goto out;
	tmp = MAP_FAILED;
	if (ftruncate(fd, len) == 0)
		tmp = get_mmap()(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED)
		goto close;
	memcpy(tmp, (void *)(uintptr_t)start, len);
	p = get_mmap()((void *)(uintptr_t)start, len, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		/* The old pages may be gone: put the copy back, private. */
		p = get_mmap()((void *)(uintptr_t)start, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (p != MAP_FAILED) {
			memcpy(p, tmp, len);
			mprotect(p, len, prot);
		}
		munmap(tmp, len);
		goto close;
	}
	munmap(tmp, len);
	get_fcntl()(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	for (int i = 0; i < n_dontfork; i++) {
		uintptr_t a = dontfork[i].lo > start ? dontfork[i].lo : start;
		uintptr_t b = dontfork[i].hi < start + len ? dontfork[i].hi : start + len;
		if (a < b)
			get_madvise()((void *)a, b - a, MADV_DONTFORK);
	}
	if (!n_shared || start < shared_lo)
		__atomic_store_n(&shared_lo, start, __ATOMIC_RELAXED);
	if (!n_shared || start + len > shared_hi)
		__atomic_store_n(&shared_hi, start + len, __ATOMIC_RELAXED);
	__atomic_store_n(&n_shared, n_shared + 1, __ATOMIC_RELEASE);
	h.op = OP_SHARE;
	h.len = sizeof(req);
	h.ret = 0;
	h.aux = 0;
	/* The daemon's answer changes nothing here: refused, the MR's pages
	 * are reached through /proc/PID/mem, which sees these pages too. */
	if (xfer_fd(sock, &h, req, fd, NULL, 0, &rh, fds, &nfds) == 0)
		for (int i = 0; i < nfds; i++)
			get_close()(fds[i]);
close:
	get_close()(fd);
out:
	pthread_mutex_unlock(&share_mu);
}

/* share_reg_mr shares the pages of the REG_MR command in buf. A command
 * that cannot be read whole shares nothing: its write fails with EFAULT
 * and nothing reaches the daemon. Nor does an on-demand paging MR
 * (IB_UVERBS_ACCESS_ON_DEMAND): its pages are not pinned but reached
 * where the program maps them at each access, so they stay its own. */
static void share_reg_mr(int sock, const void *buf, size_t n)
{
	struct ib_uverbs_reg_mr cmd;
	if (n < sizeof(struct ib_uverbs_cmd_hdr) + sizeof(cmd) || !readable(buf, n))
		return;
	memcpy(&cmd, (const char *)buf + sizeof(struct ib_uverbs_cmd_hdr), sizeof(cmd));
	if (cmd.access_flags & IB_UVERBS_ACCESS_ON_DEMAND)
		return;
	share_pages(sock, cmd.start, cmd.length);
}

/* private_copy gives the process private pages with the bytes of the
 * shared region v, at the same addresses and protection. */
static void private_copy(const struct vma *v)
{
	size_t len = v->end - v->start;
	int prot = prot_of(v->perms);
	void *tmp = get_mmap()(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return;
	if (!(prot & PROT_READ))
		mprotect((void *)v->start, len, PROT_READ);
	memcpy(tmp, (void *)v->start, len);
	if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)v->start) == MAP_FAILED) {
		munmap(tmp, len);
		mprotect((void *)v->start, len, prot);
		return;
	}
	mprotect((void *)v->start, len, prot);
}

/* unshare_all runs in a fork's child: every shared region becomes a
 * private copy. */
static void unshare_all(void)
{
	struct maps_reader r;
	struct vma v;
	if (!maps_open(&r))
		return;
	while (maps_next(&r, &v))
		if (is_shared_region(&v))
			private_copy(&v);
	maps_close(&r);
}

/* zap_shared gives [lo, hi)'s shared regions fresh zero pages
 * (MADV_DONTNEED, MADV_FREE), or finds MADV_REMOVE on them EINVAL.
 * Returns 0 or -errno. */
static int zap_shared(uintptr_t lo, uintptr_t hi, int remove)
{
	struct maps_reader r;
	struct vma v;
	int err = 0;
	pthread_mutex_lock(&share_mu);
	if (!maps_open(&r)) {
		pthread_mutex_unlock(&share_mu);
		return 0;
	}
	while (maps_next(&r, &v)) {
		uintptr_t a = v.start > lo ? v.start : lo, b = v.end < hi ? v.end : hi;
		if (v.start >= hi)
			break;
		if (a >= b || !is_shared_region(&v))
			continue;
		if (remove) {
			err = -EINVAL;
			break;
		}
		get_mmap()((void *)a, b - a, prot_of(v.perms), MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	}
	maps_close(&r);
	pthread_mutex_unlock(&share_mu);
	return err;
}

int madvise(void *addr, size_t len, int advice)
{
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;
	long pg = sysconf(_SC_PAGESIZE);
	int err;
	if (hi < lo || pg <= 0 || lo % pg)
		return get_madvise()(addr, len, advice);
	hi = (hi + pg - 1) / pg * pg;
	switch (advice) {
	case MADV_DONTFORK:
	case MADV_DOFORK:
		pthread_mutex_lock(&share_mu);
		err = get_madvise()(addr, len, advice);
		if (err == 0)
			dontfork_note(lo, hi, advice == MADV_DONTFORK);
		pthread_mutex_unlock(&share_mu);
		return err;
	case MADV_DONTNEED:
	case MADV_FREE:
	case MADV_REMOVE:
		if (__atomic_load_n(&n_shared, __ATOMIC_ACQUIRE) && lo < __atomic_load_n(&shared_hi, __ATOMIC_RELAXED) &&
		    hi > __atomic_load_n(&shared_lo, __ATOMIC_RELAXED)) {
			err = zap_shared(lo, hi, advice == MADV_REMOVE);
			if (err < 0) {
				errno = -err;
				return -1;
			}
		}
	}
	return get_madvise()(addr, len, advice);
}

/* A fork copies the table with the calls in flight of the parent's other
 * threads, which the child does not have: there each file's count starts
 * at zero, and a file its program closed meanwhile (no descriptor of it
 * left) is closed. The child inherits every descriptor: the counts of
 * them (users) hold there too. table_mu is held across the fork so that
 * the copy is whole. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&share_mu);
	pthread_mutex_lock(&table_mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&table_mu);
	pthread_mutex_unlock(&share_mu);
}

static void fork_child(void)
{
	for (int s = 0; s < MAX_FAKE; s++) {
		int sock = -1, ev = -1;
		pthread_mutex_init(&fakes[s].mu, NULL);
		if (!slot_used[s])
			continue;
		fakes[s].refs = 0;
		if (fakes[s].users == 0) {
			unhook(s, &sock, &ev);
			close_own(sock, ev);
		}
	}
	pthread_mutex_unlock(&table_mu);
	pthread_mutex_init(&share_mu, NULL);
	if (__atomic_load_n(&n_shared, __ATOMIC_ACQUIRE))
		unshare_all();
}

/*
 * Attributes whose read fails. In the kernel's sysfs the GID attribute of
 * an unused slot (ports/N/gid_attrs/types/I) exists and its read fails;
 * libibverbs' fallback for ibv_query_gid_ex and ibv_query_gid_table
 * (query_sysfs_gid_type) takes EINVAL there as "no type" and goes on. In
 * the tree the daemon writes ($SYSFS_PATH) such an attribute is an empty
 * file: a descriptor this library opened on an empty file of the tree
 * reads as EINVAL.
 */
static const char *sysfs_root;
static size_t sysfs_len;

/* note_attr records fd, just opened on path, if it is an empty file of
 * the tree; it returns fd. */
static int note_attr(const char *path, int fd)
{
	struct stat st;
	int e = errno;

	if (fd >= 0 && sysfs_len && strncmp(path, sysfs_root, sysfs_len) == 0 && path[sysfs_len] == '/' &&
	    get_fstat()(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
		know(fd, KNOWN_ATTR, &st);
	else
		forget_known(fd); /* a number a close not wrapped left known */
	errno = e;
	return fd;
}

/*
 * The kernel's sysfs paths of RDMA devices. libibverbs reads the tree at
 * $SYSFS_PATH; other libraries read /sys itself (UCX the GID types, to
 * tell a GID of IPv4 from one of IPv6; libibumad everything). A read-only
 * open, a stat or an access of a path under /sys/class/infiniband,
 * infiniband_verbs or infiniband_mad (or of one of those directories)
 * that the kernel does not have (ENOENT) takes the tree's file of that
 * name, where the tree has one: a device of the kernel's own keeps its
 * files. sysfs_view.c does the same for the directory calls.
 */
const char *tree_path(const char *path, char *buf, size_t n)
{
	static const char sys[] = "/sys/class/infiniband";
	const size_t k = sizeof(sys) - 1;
	const char *rest = path + 4; /* "/class/..." */
	const char *tail = path + k;

	if (!sysfs_len || strncmp(path, sys, k) != 0)
		return NULL;
	if (strncmp(tail, "_verbs", 6) == 0)
		tail += 6;
	else if (strncmp(tail, "_mad", 4) == 0)
		tail += 4;
	if (*tail != '/' && *tail != 0)
		return NULL;
	if (sysfs_len + strlen(rest) + 1 > n)
		return NULL;
	memcpy(buf, sysfs_root, sysfs_len);
	strcpy(buf + sysfs_len, rest);
	return buf;
}

/* opened finishes an open of path whose real call answered r: a kernel's
 * RDMA sysfs path it did not find comes from the tree (tree_path), and an
 * empty file of the tree is marked (note_attr). The kernel read the path
 * (it answered ENOENT, or opened it): it can be read here too. */
static int opened(const char *path, int flags, mode_t mode, int r)
{
	char buf[PATH_MAX];
	const char *t;
	int r2;

	if (r < 0 && errno == ENOENT && (flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | __O_TMPFILE)) &&
	    (t = tree_path(path, buf, sizeof(buf))) != NULL) {
		r2 = get_open()(t, flags, mode);
		if (r2 < 0 && errno == ENOENT)
			return r;
		return note_attr(t, r2);
	}
	return note_attr(path, r);
}

__attribute__((constructor)) static void setup(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	sysfs_root = getenv("SYSFS_PATH");
	sysfs_len = sysfs_root ? strlen(sysfs_root) : 0;
	while (sysfs_len > 1 && sysfs_root[sysfs_len - 1] == '/')
		sysfs_len--;
}

static mode_t open_mode(int flags, va_list ap)
{
	if (flags & (O_CREAT | __O_TMPFILE))
		return va_arg(ap, mode_t);
	return 0;
}

#define OPEN_WRAPPER(name)                                                   \
	int name(const char *path, int flags, ...)                           \
	{                                                                    \
		va_list ap;                                                  \
		mode_t mode;                                                 \
		const char *dev = dev_name(path);                            \
		va_start(ap, flags);                                         \
		mode = open_mode(flags, ap);                                 \
		va_end(ap);                                                  \
		if (dev)                                                     \
			return fake_open(dev, flags);                        \
		return opened(path, flags, mode, get_##name()(path, flags, mode)); \
	}
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(name)                                                 \
	int name(int dirfd, const char *path, int flags, ...)                \
	{                                                                    \
		va_list ap;                                                  \
		mode_t mode;                                                 \
		const char *dev = dev_name(path);                            \
		va_start(ap, flags);                                         \
		mode = open_mode(flags, ap);                                 \
		va_end(ap);                                                  \
		if (dev)                                                     \
			return fake_open(dev, flags);                        \
		return opened(path, flags, mode, get_##name()(dirfd, path, flags, mode)); \
	}
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

int __open_2(const char *path, int flags)
{
	const char *dev = dev_name(path);
	return dev ? fake_open(dev, flags) : opened(path, flags, 0, get___open_2()(path, flags));
}

int __open64_2(const char *path, int flags)
{
	const char *dev = dev_name(path);
	return dev ? fake_open(dev, flags) : opened(path, flags, 0, get___open64_2()(path, flags));
}

int __openat_2(int dirfd, const char *path, int flags)
{
	const char *dev = dev_name(path);
	return dev ? fake_open(dev, flags) : opened(path, flags, 0, get___openat_2()(dirfd, path, flags));
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	const char *dev = dev_name(path);
	return dev ? fake_open(dev, flags) : opened(path, flags, 0, get___openat64_2()(dirfd, path, flags));
}

/* On x86_64 and arm64 struct stat64 and struct stat have one layout. */
_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "struct stat64 differs from struct stat");

/*
 * The access family on the device, as do_faccessat answers it: the node
 * as stat_path finds it, with its mode 0666: read and write for every
 * user, execute for none, root neither (no execute bit is set). The real
 * call comes first, as in the stat wrappers: its EINVAL (mode bits or
 * flags it refuses, before the lookup) and EFAULT (a path it could not
 * read) stand. UCX, for one, takes only the devices access() finds
 * readable and writable.
 */
static int access_answer(int r, int mode, int *rc)
{
	if (r < 0 && (errno == EINVAL || errno == EFAULT))
		return 0;
	if (mode & X_OK) {
		errno = EACCES;
		*rc = -1;
	} else {
		*rc = 0;
	}
	return 1;
}

static int access_path(const char *path, int mode, int *rc, int r)
{
	dev_t rdev;
	int found;

	if (r < 0 && (errno == EINVAL || errno == EFAULT))
		return 0;
	found = node_lookup(path, !path_read(r), &rdev, rc);
	if (found <= 0)
		return found < 0;
	return access_answer(r, mode, rc);
}

/* TREE_RETRY redoes a path call that failed with ENOENT on the tree's
 * file of that name (tree_retry), keeping the first answer where the
 * tree has none either. */
#define TREE_RETRY(r, path, call)                                            \
	do {                                                                 \
		char tbuf_[PATH_MAX];                                        \
		const char *t_ = tree_retry(path, (r) < 0, tbuf_, sizeof(tbuf_)); \
		if (t_) {                                                    \
			int r2_ = call;                                      \
			if (r2_ == 0 || errno != ENOENT)                     \
				return r2_;                                  \
			errno = ENOENT;                                      \
		}                                                            \
	} while (0)

int access(const char *path, int mode)
{
	int rc, r = get_access()(path, mode);
	TREE_RETRY(r, path, get_access()(t_, mode));
	return access_path(path, mode, &rc, r) ? rc : r;
}

int euidaccess(const char *path, int mode)
{
	int rc, r = get_euidaccess()(path, mode);
	TREE_RETRY(r, path, get_euidaccess()(t_, mode));
	return access_path(path, mode, &rc, r) ? rc : r;
}

int eaccess(const char *path, int mode)
{
	int rc, r = get_eaccess()(path, mode);
	TREE_RETRY(r, path, get_eaccess()(t_, mode));
	return access_path(path, mode, &rc, r) ? rc : r;
}

/* faccessat: a path as access; with AT_EMPTY_PATH and "", the descriptor
 * dirfd, the device's where it is a fake one. */
int faccessat(int dirfd, const char *path, int mode, int flags)
{
	int rc, r = get_faccessat()(dirfd, path, mode, flags);
	TREE_RETRY(r, path, get_faccessat()(dirfd, t_, mode, flags));
	if ((flags & AT_EMPTY_PATH) && empty_path(path, !path_read(r)) && fake_slot(dirfd) >= 0)
		return access_answer(r, mode, &rc) ? rc : r;
	return access_path(path, mode, &rc, r) ? rc : r;
}

int stat(const char *path, struct stat *st)
{
	int rc, r = get_stat()(path, st);
	TREE_RETRY(r, path, get_stat()(t_, st));
	return stat_path(path, st, &rc, !path_read(r)) ? rc : r;
}

int stat64(const char *path, struct stat64 *st)
{
	int rc, r = get_stat64()(path, st);
	TREE_RETRY(r, path, get_stat64()(t_, st));
	return stat_path(path, (struct stat *)st, &rc, !path_read(r)) ? rc : r;
}

int lstat(const char *path, struct stat *st)
{
	int rc, r = get_lstat()(path, st);
	TREE_RETRY(r, path, get_lstat()(t_, st));
	return stat_path(path, st, &rc, !path_read(r)) ? rc : r;
}

int lstat64(const char *path, struct stat64 *st)
{
	int rc, r = get_lstat64()(path, st);
	TREE_RETRY(r, path, get_lstat64()(t_, st));
	return stat_path(path, (struct stat *)st, &rc, !path_read(r)) ? rc : r;
}

int fstat(int fd, struct stat *st)
{
	int rc;
	return stat_fd(fd, st, &rc) ? rc : get_fstat()(fd, st);
}

int fstat64(int fd, struct stat64 *st)
{
	int rc;
	return stat_fd(fd, (struct stat *)st, &rc) ? rc : get_fstat64()(fd, st);
}

/* statat answers fstatat and statx as stat_path and stat_fd, r the real
 * call's answer. With AT_EMPTY_PATH the descriptor's stat is asked for by
 * "" and, on kernels that take it (Linux 6.11 and later: the real call
 * succeeded), by a NULL path; older kernels answer NULL with EFAULT. */
static int statat(int dirfd, const char *path, struct stat *st, int flags, int *rc, int r)
{
	int probe = !path_read(r);
	if ((flags & AT_EMPTY_PATH) && (path ? empty_path(path, probe) : r == 0))
		return stat_fd(dirfd, st, rc);
	return stat_path(path, st, rc, probe);
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	int rc, r = get_fstatat()(dirfd, path, st, flags);
	TREE_RETRY(r, path, get_fstatat()(dirfd, t_, st, flags));
	return statat(dirfd, path, st, flags, &rc, r) ? rc : r;
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	int rc, r = get_fstatat64()(dirfd, path, st, flags);
	TREE_RETRY(r, path, get_fstatat64()(dirfd, t_, st, flags));
	return statat(dirfd, path, (struct stat *)st, flags, &rc, r) ? rc : r;
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
	struct stat st;
	int rc, r = get_statx()(dirfd, path, flags, mask, stx);
	TREE_RETRY(r, path, get_statx()(dirfd, t_, flags, mask, stx));
	if (statat(dirfd, path, &st, flags, &rc, r)) {
		if (rc == 0 && !writable(stx, sizeof(*stx))) {
			errno = EFAULT;
			rc = -1;
		} else if (rc == 0) {
			fill_statx(stx, st.st_rdev);
		}
		return rc;
	}
	return r;
}

/* The __xstat family: what binaries built against glibc before 2.33 call.
 * glibc 2.33 and later keep them only as compat symbols, which dlsym does
 * not find; then the stat functions above stand in (the version argument
 * is _STAT_VER_LINUX, the layout of struct stat). */
int __xstat(int ver, const char *path, struct stat *st)
{
	int rc, r = get___xstat() ? get___xstat()(ver, path, st) : get_stat()(path, st);
	return stat_path(path, st, &rc, !path_read(r)) ? rc : r;
}

int __xstat64(int ver, const char *path, struct stat64 *st)
{
	int rc, r = get___xstat64() ? get___xstat64()(ver, path, st) : get_stat64()(path, st);
	return stat_path(path, (struct stat *)st, &rc, !path_read(r)) ? rc : r;
}

int __lxstat(int ver, const char *path, struct stat *st)
{
	int rc, r = get___lxstat() ? get___lxstat()(ver, path, st) : get_lstat()(path, st);
	return stat_path(path, st, &rc, !path_read(r)) ? rc : r;
}

int __lxstat64(int ver, const char *path, struct stat64 *st)
{
	int rc, r = get___lxstat64() ? get___lxstat64()(ver, path, st) : get_lstat64()(path, st);
	return stat_path(path, (struct stat *)st, &rc, !path_read(r)) ? rc : r;
}

int __fxstat(int ver, int fd, struct stat *st)
{
	int rc;
	if (stat_fd(fd, st, &rc))
		return rc;
	return get___fxstat() ? get___fxstat()(ver, fd, st) : get_fstat()(fd, st);
}

int __fxstat64(int ver, int fd, struct stat64 *st)
{
	int rc;
	if (stat_fd(fd, (struct stat *)st, &rc))
		return rc;
	return get___fxstat64() ? get___fxstat64()(ver, fd, st) : get_fstat64()(fd, st);
}

int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	int rc, r = get___fxstatat() ? get___fxstatat()(ver, dirfd, path, st, flags)
			      : get_fstatat()(dirfd, path, st, flags);
	return statat(dirfd, path, st, flags, &rc, r) ? rc : r;
}

int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	int rc, r = get___fxstatat64() ? get___fxstatat64()(ver, dirfd, path, st, flags)
			      : get_fstatat64()(dirfd, path, st, flags);
	return statat(dirfd, path, (struct stat *)st, flags, &rc, r) ? rc : r;
}

/*
 * The file's flags. The program's descriptor of a uverbs file is the
 * library's connection to the daemon, which must stay blocking: each
 * command is one exchange, and the kernel's write() on the device is
 * synchronous whatever O_NONBLOCK says. The slot keeps the flags the
 * device file would have (fl): F_GETFL reports them, F_SETFL and FIONBIO
 * change them as setfl and ioctl_fionbio would, and only an rdma_cm
 * file's O_NONBLOCK reaches a real descriptor, its eventfd, on which
 * GET_EVENT waits. An event file handed over reports O_RDONLY, as the
 * kernel's anonymous inode opened read-only.
 */
static int set_flags(int fd, int s, int arg)
{
	int fl = fakes[s].fl;
	/* O_NOATIME only by the node's owner (root) or with CAP_FOWNER. */
	if ((arg & O_NOATIME) && !(fl & O_NOATIME) && geteuid() != 0) {
		errno = EPERM;
		return -1;
	}
	/* A character device has no direct I/O. */
	if (arg & O_DIRECT) {
		errno = EINVAL;
		return -1;
	}
	/* Neither device file has fasync: O_ASYNC is not kept. */
	fl = (arg & SETFL_MASK) | (fl & ~SETFL_MASK);
	if (fakes[s].cm && get_fcntl()(fd, F_SETFL, fl & O_NONBLOCK) < 0)
		return -1;
	fakes[s].fl = fl;
	return 0;
}

static int fake_fcntl(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	int s = fake_slot(fd), r;
	if (s >= 0 && cmd == F_GETFL)
		return fakes[s].fl;
	if (s >= 0 && cmd == F_SETFL) {
		pthread_mutex_lock(&table_mu);
		r = fake_slot(fd) == s ? set_flags(fd, s, (int)(long)arg) : real(fd, cmd, arg);
		pthread_mutex_unlock(&table_mu);
		return r;
	}
	if (s >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
		/* f_dupfd: the same file under a new number. */
		s = dup_begin(fd);
		return dup_end(s, fd, real(fd, cmd, arg));
	}
	r = real(fd, cmd, arg);
	if (cmd == F_GETFL && r >= 0 && is_known(fd, KNOWN_EVFILE))
		r = (r & ~O_ACCMODE) | O_RDONLY;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		r = known_dup(fd, r);
	return r;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fake_fcntl(get_fcntl(), fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fake_fcntl(get_fcntl64() ? get_fcntl64() : get_fcntl(), fd, cmd, arg);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int s, on, r;
	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	s = fake_slot(fd);
	if (s < 0)
		return get_ioctl()(fd, req, arg);
	switch (req) {
	case FIOCLEX:
	case FIONCLEX:
		/* The descriptor's close-on-exec (do_vfs_ioctl). */
		return get_ioctl()(fd, req, arg);
	case FIONBIO:
	case FIOASYNC:
		/* ioctl_fionbio, ioctl_fioasync: get_user of the int. */
		if (!readable(arg, sizeof(on))) {
			errno = EFAULT;
			return -1;
		}
		memcpy(&on, arg, sizeof(on));
		if (req == FIOASYNC) {
			/* No fasync to turn it on (fl never has O_ASYNC). */
			if (on) {
				errno = ENOTTY;
				return -1;
			}
			return 0;
		}
		pthread_mutex_lock(&table_mu);
		r = 0;
		if (fake_slot(fd) == s)
			r = set_flags(fd, s, on ? fakes[s].fl | O_NONBLOCK : fakes[s].fl & ~O_NONBLOCK);
		pthread_mutex_unlock(&table_mu);
		return r;
	}
	if (fakes[s].umad) {
		s = hold(fd);
		if (s < 0)
			return get_ioctl()(fd, req, arg);
		r = umad_ioctl(s, req, arg);
		release(s);
		return r;
	}
	if (req == RDMA_VERBS_IOCTL && !fakes[s].cm && verbs_ioctl_on()) {
		s = hold(fd);
		if (s < 0)
			return get_ioctl()(fd, req, arg);
		r = verbs_ioctl(s, arg);
		release(s);
		return r;
	}
	/* No ioctl framework (SOFTROCE_VERBS_ABI=write, or rdma_cm):
	 * libibverbs falls back to write(). */
	errno = ENOTTY;
	return -1;
}

int fake_xfer(int s, struct frame_hdr *h, const void *payload, void *rbuf, uint32_t rcap, struct frame_hdr *rh)
{
	int err, nfds = 0, fds[MAX_FDS];

	pthread_mutex_lock(&fakes[s].mu);
	err = xfer(fakes[s].sock, h, payload, rbuf, rcap, rh, fds, &nfds);
	pthread_mutex_unlock(&fakes[s].mu);
	for (int i = 0; i < nfds; i++)
		get_close()(fds[i]);
	return err;
}

int fake_take_event(int s)
{
	uint64_t one;
	int fl = get_fcntl()(fakes[s].ev, F_GETFL);

	/* A blocking wait watches the connection too: the daemon's end
	 * (stopped, or killed) ends it with EIO, as every other call on
	 * the device, instead of a wait on a count nobody will raise. */
	if (fl >= 0 && !(fl & O_NONBLOCK)) {
		struct pollfd p[2] = {{.fd = fakes[s].ev, .events = POLLIN}, {.fd = fakes[s].sock, .events = POLLRDHUP}};
		if (poll(p, 2, -1) < 0)
			return -errno; /* EINTR */
		if (!(p[0].revents & POLLIN) && (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR)))
			return -EIO;
	}
	if (get_read()(fakes[s].ev, &one, sizeof(one)) < 0)
		return -errno; /* EAGAIN when O_NONBLOCK, EINTR */
	return 0;
}

void fake_give_event(int s)
{
	uint64_t one = 1;
	if (get_write()(fakes[s].ev, &one, sizeof(one)) < 0)
		return; /* the count cannot overflow: one was taken */
}

int fake_readable(const void *p, size_t n)
{
	return readable(p, n);
}

int fake_writable(void *p, size_t n)
{
	return writable(p, n);
}

/* cm_write is write() on an rdma_cm descriptor, slot s held: GET_EVENT
 * waits on the eventfd first, MIGRATE_ID names the other file as the
 * daemon knows it. */
static ssize_t cm_write(int s, const void *buf, size_t n)
{
	struct frame_hdr h, rh;
	uint64_t at[MAX_FDS];
	uint32_t cmd = 0;
	unsigned char copy[64];
	int err, nfds = 0, fds[MAX_FDS];

	/* ucma_write copies the header, the handler its command: a buffer
	 * that cannot be read is EFAULT before anything waits or is sent. */
	if (!readable(buf, n)) {
		errno = EFAULT;
		return -1;
	}
	if (n >= sizeof(cmd))
		memcpy(&cmd, buf, sizeof(cmd));
	if (cmd == UCM_CMD_MIGRATE_ID && n >= 24 && n <= sizeof(copy)) {
		uint32_t other, token;
		int o;
		memcpy(copy, buf, n);
		memcpy(&other, copy + 20, sizeof(other));
		o = fake_slot((int)other);
		if (o >= 0 && fakes[o].cm && !fakes[o].umad)
			token = fakes[o].token;
		else if (get_fcntl()((int)other, F_GETFD) < 0)
			token = UCM_TOKEN_NOT_OPEN;
		else
			token = UCM_TOKEN_NOT_UCMA;
		memcpy(copy + 20, &token, sizeof(token));
		buf = copy;
	}
	h.op = OP_WRITE;
	h.len = n;
	h.ret = 0;
	h.aux = 0;
	for (;;) {
		if (cmd == UCM_CMD_GET_EVENT) {
			/* The library's own descriptor of the eventfd (it
			 * shares the program's O_NONBLOCK): a close by
			 * another thread leaves this wait as the kernel's
			 * GET_EVENT, on the file it holds. */
			uint64_t one;
			ssize_t r;
			int fl = get_fcntl()(fakes[s].ev, F_GETFL);
			/* A blocking wait watches the connection too: the
			 * daemon's end (stopped, or killed) ends it with EIO,
			 * as every other call on the device, instead of a
			 * wait on a count nobody will raise. */
			if (fl >= 0 && !(fl & O_NONBLOCK)) {
				struct pollfd p[2] = {{.fd = fakes[s].ev, .events = POLLIN},
						      {.fd = fakes[s].sock, .events = POLLRDHUP}};
				if (poll(p, 2, -1) < 0)
					return -1; /* EINTR */
				if (!(p[0].revents & POLLIN) && (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR))) {
					errno = EIO;
					return -1;
				}
			}
			r = get_read()(fakes[s].ev, &one, sizeof(one));
			if (r < 0)
				return -1; /* EAGAIN when O_NONBLOCK, EINTR */
		}
		pthread_mutex_lock(&fakes[s].mu);
		err = xfer(fakes[s].sock, &h, buf, at, sizeof(at), &rh, fds, &nfds);
		pthread_mutex_unlock(&fakes[s].mu);
		for (int i = 0; i < nfds; i++)
			get_close()(fds[i]);
		if (err < 0) {
			errno = -err;
			return -1;
		}
		/* A count whose event went away (its ID destroyed): wait
		 * for the next one. */
		if (cmd == UCM_CMD_GET_EVENT && rh.ret == -EAGAIN)
			continue;
		break;
	}
	if (rh.ret < 0) {
		errno = -rh.ret;
		return -1;
	}
	return rh.ret;
}

/* null_post_send returns the QP handle of librxe's doorbell (post_send_db:
 * a POST_SEND with no WRs) in buf, -1 if buf is another command, or
 * NOT_READABLE if the bytes it reads (the header, and a POST_SEND's
 * command) cannot be read: ib_uverbs_write's copy_from_user fails there,
 * EFAULT. hdr gets the header (command 0 when buf is shorter). */
#define NOT_READABLE (-2)
static long null_post_send(const void *buf, size_t n, struct ib_uverbs_cmd_hdr *hdr, struct ib_uverbs_post_send *cmd)
{
	size_t k = n < sizeof(*hdr) + sizeof(*cmd) ? sizeof(*hdr) : sizeof(*hdr) + sizeof(*cmd);
	memset(hdr, 0, sizeof(*hdr));
	if (n < sizeof(*hdr))
		return -1;
	if (!readable(buf, k))
		return NOT_READABLE;
	memcpy(hdr, buf, sizeof(*hdr));
	if (hdr->command != IB_USER_VERBS_CMD_POST_SEND || n < sizeof(*hdr) + sizeof(*cmd))
		return -1;
	memcpy(cmd, (const char *)buf + sizeof(*hdr), sizeof(*cmd));
	return cmd->wr_count == 0 ? (long)cmd->qp_handle : -1;
}

/*
 * Doorbells the library answers. librxe rings a QP's send doorbell with a
 * write() of a POST_SEND with no WRs after it put the WRs on the ring; the
 * kernel runs the requester and answers. Each answer here is a round trip
 * to the daemon, whose wake-ups across CPUs cost more than its work: a
 * stream of posts (ib_write_bw) would wait for the daemon at every post.
 * Where the kernel's answer is known the library gives it itself: the
 * QP's last answered POST_SEND succeeded (it was at RTS or later, and
 * stays so until a command moves it back, after which nothing is known:
 * any other command forgets every QP), the daemon did not ask for
 * answered doorbells, and the response (bad_wr 0) takes the write.
 * answer_doorbell checks and writes. fakes[s].mu held.
 *
 * The write must fail where the kernel's copy_to_user would (the daemon
 * then answers EFAULT), not crash the program. PR_GET_PDEATHSIG is the
 * cheapest system call that stores 4 bytes at a user address (put_user,
 * EFAULT where it cannot; 0.25 us here, where process_vm_writev took
 * 1.5 us): once it succeeded, a plain store of the answer cannot fault.
 */
static int answer_doorbell(int s, long qh, const struct ib_uverbs_cmd_hdr *hdr,
			   const struct ib_uverbs_post_send *cmd, size_t n)
{
	struct ib_uverbs_post_send_resp resp = {0};

	if (fakes[s].sync_db || qh < 0 || qh >= DB_HANDLES || !(fakes[s].rts[qh / 8] & (1u << (qh % 8))))
		return 0;
	/* Only librxe's own form is known to succeed: the write's length in
	 * in_words, one word of response room, a send WR's wqe_size (not
	 * more than kmalloc gives), no bytes after the command. Any other
	 * goes to the daemon, which answers it as ib_uverbs_write does
	 * (ENOSPC, EINVAL, EOPNOTSUPP, ENOMEM, or zeros over a larger room,
	 * EFAULT where they cannot go). */
	if (n != sizeof(*hdr) + sizeof(*cmd) || (size_t)hdr->in_words * 4 != n ||
	    (size_t)hdr->out_words * 4 != sizeof(resp) || cmd->wqe_size < sizeof(struct ib_uverbs_send_wr) ||
	    cmd->wqe_size > KMALLOC_MAX || cmd->sge_count != 0)
		return 0;
	if (prctl(PR_GET_PDEATHSIG, (unsigned long)cmd->response, 0, 0, 0) != 0)
		return 0;
	memcpy((void *)(uintptr_t)cmd->response, &resp, sizeof(resp));
	return 1;
}

/* watched reports whether the daemon's watch page has QP qh's word set:
 * the daemon looks at its send ring once more before it waits, and the
 * doorbell need not reach it. The fence orders librxe's store of the
 * ring's producer index before the load of the word (the daemon clears
 * the word, then loads the index): either the daemon sees the WQE or the
 * library sees the cleared word and rings. */
static int watched(int s, long qh)
{
	if (!fakes[s].watch || fakes[s].sync_db || qh < 0 || qh >= WATCH_HANDLES)
		return 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&fakes[s].watch[qh], __ATOMIC_RELAXED) != 0;
}

/* one_way_doorbell sends a doorbell the library answered (WRITE_ONE_WAY),
 * where the daemon offers them (softroce serve --one-way-doorbells): the
 * daemon rings the QP and sends no reply. At most MAX_ONE_WAY_RUN go in a
 * row: the next is answered, and its reply says whether the daemon now
 * wants answered doorbells. fakes[s].mu held. */
static int one_way_doorbell(int s, long qh, const struct ib_uverbs_cmd_hdr *hdr,
			    const struct ib_uverbs_post_send *cmd, const void *buf, size_t n)
{
	struct frame_hdr h = {.op = OP_WRITE, .len = n, .ret = 0, .aux = WRITE_ONE_WAY};
	struct iovec iov[2];
	struct msghdr msg;
	ssize_t k;

	if (!fakes[s].oneway || fakes[s].run >= MAX_ONE_WAY_RUN || !answer_doorbell(s, qh, hdr, cmd, n))
		return 0;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	iov[1].iov_base = (void *)buf;
	iov[1].iov_len = n;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = iov;
	msg.msg_iovlen = 2;
	do
		k = sendmsg(fakes[s].sock, &msg, MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k != (ssize_t)(sizeof(h) + n))
		return 0;
	fakes[s].run++;
	return 1;
}

/* hand_over finishes an exchange on slot s whose reply (rh, at) passed
 * nfds files (fds), s's mutex held, which it unlocks. Each file's number
 * goes where the reply says (the fd field of the response the daemon
 * wrote, an ioctl attribute's data), and the daemon is told the numbers
 * before the call returns (later commands name a completion channel by
 * its number). Returns 0, or -errno when the daemon refused them (the
 * files are then closed). */
static int hand_over(int s, const struct frame_hdr *rh, const uint64_t *at, int *fds, int nfds)
{
	int err;

	if (nfds > 0 && rh->ret >= 0 && (size_t)nfds == rh->len / sizeof(uint64_t)) {
		uint32_t nums[MAX_FDS];
		struct frame_hdr ah, arh;
		int anfds = 0, afds[MAX_FDS];
		for (int i = 0; i < nfds; i++) {
			nums[i] = (uint32_t)fds[i];
			memcpy((void *)(uintptr_t)at[i], &nums[i], sizeof(nums[i]));
		}
		ah.op = OP_FDS;
		ah.len = nfds * sizeof(uint32_t);
		ah.ret = 0;
		ah.aux = 0;
		err = xfer(fakes[s].sock, &ah, nums, NULL, 0, &arh, afds, &anfds);
		for (int i = 0; i < anfds; i++)
			get_close()(afds[i]);
		pthread_mutex_unlock(&fakes[s].mu);
		if (err == 0 && arh.ret < 0)
			err = arh.ret;
		if (err < 0) {
			for (int i = 0; i < nfds; i++)
				get_close()(fds[i]);
			return err;
		}
		for (int i = 0; i < nfds; i++)
			ev_add(fds[i]);
		return 0;
	}
	pthread_mutex_unlock(&fakes[s].mu);
	for (int i = 0; i < nfds; i++)
		get_close()(fds[i]);
	return 0;
}

int uverbs_exchange(int s, uint32_t op, const void *payload, uint32_t len, const uint64_t *share)
{
	struct frame_hdr h = {.op = op, .len = len, .ret = 0, .aux = 0}, rh;
	uint64_t at[MAX_FDS];
	int err, nfds = 0, fds[MAX_FDS];

	pthread_mutex_lock(&fakes[s].mu);
	/* A command may change a QP's state: the doorbells go answered. */
	memset(fakes[s].rts, 0, sizeof(fakes[s].rts));
	if (share && fakes[s].share)
		share_pages(fakes[s].sock, share[0], share[1]);
	err = xfer(fakes[s].sock, &h, payload, at, sizeof(at), &rh, fds, &nfds);
	if (err < 0) {
		pthread_mutex_unlock(&fakes[s].mu);
		return err;
	}
	err = hand_over(s, &rh, at, fds, nfds);
	if (err < 0)
		return err;
	return rh.ret;
}

/* uverbs_write is write() on a uverbs descriptor, slot s held. */
static ssize_t uverbs_write(int s, const void *buf, size_t n)
{
	struct frame_hdr h, rh;
	struct ib_uverbs_cmd_hdr chdr;
	struct ib_uverbs_post_send pcmd;
	uint64_t at[MAX_FDS];
	int fd = fakes[s].sock, err, nfds = 0, fds[MAX_FDS];
	long qh = null_post_send(buf, n, &chdr, &pcmd);

	if (qh == NOT_READABLE) {
		errno = EFAULT;
		return -1;
	}
	h.op = OP_WRITE;
	h.len = n;
	h.ret = 0;
	h.aux = 0;
	pthread_mutex_lock(&fakes[s].mu);
	if (qh >= 0 && watched(s, qh) && answer_doorbell(s, qh, &chdr, &pcmd, n)) {
		pthread_mutex_unlock(&fakes[s].mu);
		return n;
	}
	if (qh >= 0 && one_way_doorbell(s, qh, &chdr, &pcmd, buf, n)) {
		pthread_mutex_unlock(&fakes[s].mu);
		return n;
	}
	if (qh < 0)
		memset(fakes[s].rts, 0, sizeof(fakes[s].rts));
	if (fakes[s].share && chdr.command == IB_USER_VERBS_CMD_REG_MR)
		share_reg_mr(fd, buf, n);
	err = xfer(fd, &h, buf, at, sizeof(at), &rh, fds, &nfds);
	if (err < 0) {
		pthread_mutex_unlock(&fakes[s].mu);
		errno = -err;
		return -1;
	}
	fakes[s].sync_db = rh.aux & AUX_SYNC_DOORBELLS;
	if (qh >= 0) {
		fakes[s].run = 0;
		if (qh < DB_HANDLES) {
			if (rh.ret == (int32_t)n)
				fakes[s].rts[qh / 8] |= 1u << (qh % 8);
			else
				fakes[s].rts[qh / 8] &= ~(1u << (qh % 8));
		}
	}
	err = hand_over(s, &rh, at, fds, nfds);
	if (err < 0) {
		errno = -err;
		return -1;
	}
	if (rh.ret < 0) {
		errno = -rh.ret;
		return -1;
	}
	return rh.ret;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	int s = hold(fd);
	ssize_t r;

	if (s < 0)
		return get_write()(fd, buf, n);
	if (!can_write(s)) {
		errno = EBADF;
		r = -1;
	} else if (n < sizeof(struct ib_uverbs_cmd_hdr)) {
		/* Shorter than a header (struct rdma_ucm_cmd_hdr too): EINVAL
		 * before anything is read (ib_uverbs_write, ucma_write), after
		 * vfs_write's access_ok (EFAULT). */
		errno = user_range(buf, n) ? EINVAL : EFAULT;
		r = -1;
	} else if (n > MAX_PAYLOAD) {
		/* More than any command the daemon takes: EINVAL, after
		 * access_ok and the header's copy_from_user (EFAULT). */
		errno = user_range(buf, n) && readable(buf, sizeof(struct ib_uverbs_cmd_hdr)) ? EINVAL : EFAULT;
		r = -1;
	} else if (fakes[s].umad) {
		r = umad_write(s, buf, n);
	} else if (fakes[s].cm) {
		r = cm_write(s, buf, n);
	} else {
		r = uverbs_write(s, buf, n);
	}
	release(s);
	return r;
}

ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t r;
	int ev, s = fake_slot(fd);
	if (is_known(fd, KNOWN_ATTR)) {
		errno = EINVAL;
		return -1;
	}
	if (s >= 0 && fakes[s].umad && can_read(s)) {
		s = hold(fd);
		if (s < 0)
			return get_read()(fd, buf, n);
		r = umad_read(s, buf, n);
		release(s);
		return r;
	}
	if (s >= 0) {
		/* No read (EINVAL), after vfs_read's mode check (EBADF). */
		errno = can_read(s) ? EINVAL : EBADF;
		return -1;
	}
	/* Looked up before the read, which may outlast the program's close:
	 * an event file's end of file is its daemon end gone, its context
	 * closed (ib_uverbs_close frees the event queues, and a waiting or
	 * later read is EIO) or the daemon dead. */
	ev = is_known(fd, KNOWN_EVFILE);
	r = get_read()(fd, buf, n);
	if (r == 0 && n > 0 && ev) {
		errno = EIO;
		return -1;
	}
	return r;
}

/* mmap_allowed reports whether the open's mode allows the mapping, as
 * do_mmap checks the file before its mmap: any mapping needs read access,
 * a shared writable one write access too (EACCES). An empty one is
 * refused earlier (EINVAL), by the daemon. */
static int mmap_allowed(int s, size_t len, int prot, int flags)
{
	int type = flags & MAP_TYPE;
	if (len == 0)
		return 1;
	if ((type == MAP_SHARED || type == MAP_SHARED_VALIDATE) && (prot & PROT_WRITE) && !can_write(s))
		return 0;
	return can_read(s);
}

static void *fake_mmap(int s, void *addr, size_t len, int prot, int flags, off_t off)
{
	struct frame_hdr h, rh;
	uint64_t req[2] = {(uint64_t)off, (uint64_t)len};
	int64_t foff = 0;
	int err, nfds = 0, fds[MAX_FDS];
	void *p;

	h.op = OP_MMAP;
	h.len = sizeof(req);
	h.ret = 0;
	h.aux = 0;
	pthread_mutex_lock(&fakes[s].mu);
	err = xfer(fakes[s].sock, &h, req, &foff, sizeof(foff), &rh, fds, &nfds);
	pthread_mutex_unlock(&fakes[s].mu);
	if (err == 0 && rh.ret < 0)
		err = rh.ret;
	if (err == 0 && (nfds != 1 || rh.len != sizeof(foff)))
		err = -EIO;
	if (err < 0) {
		for (int i = 0; i < nfds; i++)
			get_close()(fds[i]);
		errno = -err;
		return MAP_FAILED;
	}
	p = get_mmap()(addr, len, prot, flags, fds[0], (off_t)foff);
	err = errno;
	get_close()(fds[0]);
	errno = err;
	return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int s = flags & MAP_ANONYMOUS ? -1 : hold(fd);
	void *p;
	if (s < 0)
		return get_mmap()(addr, len, prot, flags, fd, off);
	if (!mmap_allowed(s, len, prot, flags)) {
		release(s);
		errno = EACCES;
		return MAP_FAILED;
	}
	p = fake_mmap(s, addr, len, prot, flags, off);
	release(s);
	return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	int s = flags & MAP_ANONYMOUS ? -1 : hold(fd);
	void *p;
	if (s < 0)
		return get_mmap64()(addr, len, prot, flags, fd, off);
	if (!mmap_allowed(s, len, prot, flags)) {
		release(s);
		errno = EACCES;
		return MAP_FAILED;
	}
	p = fake_mmap(s, addr, len, prot, flags, (off_t)off);
	release(s);
	return p;
}

int close(int fd)
{
	forget(fd);
	forget_known(fd);
	return get_close()(fd);
}

/* dup of a fake descriptor is the same file (see dup_begin). */
int dup(int oldfd)
{
	int s = dup_begin(oldfd);
	return known_dup(oldfd, dup_end(s, oldfd, get_dup()(oldfd)));
}

/* dup2 and dup3 over a fake descriptor close it: forget it first; of a
 * fake descriptor, the new number is the same file. */
int dup2(int oldfd, int newfd)
{
	int s;
	if (oldfd != newfd) {
		forget(newfd);
		forget_known(newfd);
	}
	s = dup_begin(oldfd);
	return known_dup(oldfd, dup_end(s, oldfd, get_dup2()(oldfd, newfd)));
}

int dup3(int oldfd, int newfd, int flags)
{
	int s;
	if (oldfd != newfd) {
		forget(newfd);
		forget_known(newfd);
	}
	s = dup_begin(oldfd);
	return known_dup(oldfd, dup_end(s, oldfd, get_dup3()(oldfd, newfd, flags)));
}

int socket(int domain, int type, int protocol)
{
	if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
		/* As a kernel without ib_core: the RDMA netlink family is
		 * absent, so the libraries read the sysfs tree. */
		errno = EPROTONOSUPPORT;
		return -1;
	}
	return get_socket()(domain, type, protocol);
}
