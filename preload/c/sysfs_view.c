/*
 * sysfs_view.c: the kernel's RDMA sysfs directories as programs that do
 * not honour $SYSFS_PATH list them. libibumad (ibstat, perfquery) scans
 * /sys/class/infiniband and /sys/class/infiniband_mad with scandir and
 * opendir, and the ibstatus script changes into them (cd) and globs; glibc
 * opens those directories with its own internal calls, past the open
 * wrappers. Each wrapper here makes the real call first, and where the
 * kernel has no such path (ENOENT) it takes the tree's directory of that
 * name (tree_path): a device of the kernel's own keeps its directories.
 * fopen is glibc's too, past the open wrappers: read-only streams get
 * the same.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "softroce_preload.h"

static void *next(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

const char *tree_retry(const char *path, int failed, char *buf, size_t n)
{
	int e = errno;
	const char *t;

	if (!failed || e != ENOENT || !path)
		return NULL;
	t = tree_path(path, buf, n);
	errno = e;
	return t;
}

DIR *opendir(const char *path)
{
	static DIR *(*real)(const char *);
	char buf[PATH_MAX];
	const char *t;
	DIR *d;

	if (!real)
		real = next("opendir");
	d = real(path);
	if ((t = tree_retry(path, d == NULL, buf, sizeof(buf))) != NULL) {
		DIR *d2 = real(t);
		if (d2 || errno != ENOENT)
			return d2;
		errno = ENOENT;
	}
	return d;
}

typedef int (*filter_fn)(const struct dirent *);
typedef int (*compar_fn)(const struct dirent **, const struct dirent **);

int scandir(const char *path, struct dirent ***list, filter_fn filter, compar_fn compar)
{
	static int (*real)(const char *, struct dirent ***, filter_fn, compar_fn);
	char buf[PATH_MAX];
	const char *t;
	int r;

	if (!real)
		real = next("scandir");
	r = real(path, list, filter, compar);
	if ((t = tree_retry(path, r < 0, buf, sizeof(buf))) != NULL) {
		int r2 = real(t, list, filter, compar);
		if (r2 >= 0 || errno != ENOENT)
			return r2;
		errno = ENOENT;
	}
	return r;
}

/* On 64-bit glibc struct dirent64 and struct dirent have one layout. */
int scandir64(const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
	      int (*compar)(const struct dirent64 **, const struct dirent64 **))
{
	static int (*real)(const char *, struct dirent64 ***, int (*)(const struct dirent64 *),
			   int (*)(const struct dirent64 **, const struct dirent64 **));
	char buf[PATH_MAX];
	const char *t;
	int r;

	if (!real)
		real = next("scandir64");
	r = real(path, list, filter, compar);
	if ((t = tree_retry(path, r < 0, buf, sizeof(buf))) != NULL) {
		int r2 = real(t, list, filter, compar);
		if (r2 >= 0 || errno != ENOENT)
			return r2;
		errno = ENOENT;
	}
	return r;
}

int chdir(const char *path)
{
	static int (*real)(const char *);
	char buf[PATH_MAX];
	const char *t;
	int r;

	if (!real)
		real = next("chdir");
	r = real(path);
	if ((t = tree_retry(path, r < 0, buf, sizeof(buf))) != NULL) {
		int r2 = real(t);
		if (r2 == 0 || errno != ENOENT)
			return r2;
		errno = ENOENT;
	}
	return r;
}

/* fopen and fopen64 open with glibc's internal open: a read-only stream
 * of a path the kernel does not have takes the tree's file. */
#define FOPEN_WRAPPER(name)                                                  \
	FILE *name(const char *path, const char *mode)                       \
	{                                                                    \
		static FILE *(*real)(const char *, const char *);            \
		char buf[PATH_MAX];                                          \
		const char *t;                                               \
		FILE *f;                                                     \
		if (!real)                                                   \
			real = next(#name);                                  \
		f = real(path, mode);                                        \
		if (mode && mode[0] == 'r' && !strchr(mode, '+') &&          \
		    (t = tree_retry(path, f == NULL, buf, sizeof(buf))) != NULL) { \
			FILE *f2 = real(t, mode);                            \
			if (f2 || errno != ENOENT)                           \
				return f2;                                   \
			errno = ENOENT;                                      \
		}                                                            \
		return f;                                                    \
	}
FOPEN_WRAPPER(fopen)
FOPEN_WRAPPER(fopen64)
