/*
 * softroce_preload.h: what the library's files share. softroce_preload.c
 * holds the device files (open, write, mmap, close and the rest); each
 * further file presents one more kernel interface and declares here what
 * the others call.
 */
#ifndef SOFTROCE_PRELOAD_H
#define SOFTROCE_PRELOAD_H

#include <stddef.h>

/* softroce_preload.c: the tree's name of a kernel RDMA sysfs path
 * (/sys/class/infiniband, infiniband_verbs, infiniband_mad), written
 * into buf, or NULL where path is none or the tree is not set. */
const char *tree_path(const char *path, char *buf, size_t n);

/* sysfs_view.c: tree_path of path where the real call on it failed
 * (failed nonzero) with ENOENT, else NULL; errno is kept. */
const char *tree_retry(const char *path, int failed, char *buf, size_t n);

#endif
