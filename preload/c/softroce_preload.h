/*
 * softroce_preload.h: what the library's files share. softroce_preload.c
 * holds the device files (open, write, mmap, close and the rest); each
 * further file presents one more kernel interface and declares here what
 * the others call: netlink.c the RDMA netlink socket.
 */
#ifndef SOFTROCE_PRELOAD_H
#define SOFTROCE_PRELOAD_H

#include <dlfcn.h>
#include <stdint.h>

/* REAL(ret, name, args) defines get_name(), the next definition of the
 * libc function name (the one the library wraps), looked up once; each
 * file has its own. */
#define REAL(ret, name, args)                                                \
	static ret(*real_##name) args;                                       \
	static ret(*get_##name(void)) args                                   \
	{                                                                    \
		if (!__atomic_load_n(&real_##name, __ATOMIC_ACQUIRE))        \
			__atomic_store_n(&real_##name, dlsym(RTLD_NEXT, #name), \
					 __ATOMIC_RELEASE);                  \
		return __atomic_load_n(&real_##name, __ATOMIC_ACQUIRE);      \
	}

/* The frame every exchange with the daemon starts with, and the first
 * request's operation and version: package preload, proto.go. */
#define PROTO_VERSION 1
#define OP_OPEN 1
struct frame_hdr {
	uint32_t op;
	uint32_t len;
	int32_t ret;
	uint32_t aux;
};

/* netlink.c: socket(AF_NETLINK, type, NETLINK_RDMA); the close of a
 * descriptor that may be one, and its duplicate under newfd (the same
 * socket). */
int nl_socket(int type);
void nl_forget(int fd);
void nl_dup(int oldfd, int newfd);

#endif
