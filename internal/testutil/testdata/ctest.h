/*
 * ctest.h: what the C test programs of several packages share, included by
 * its path relative to theirs: CHECK, a check that goes on, and MUST, one
 * that ends the program (exit status 1). Each prints "ok NAME" or
 * "FAIL NAME: why"; a failed CHECK sets failed, for the exit status.
 */
#ifndef SOFTROCE_CTEST_H
#define SOFTROCE_CTEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

#define CHECK(name, cond, ...)                                   \
	do {                                                         \
		if (cond) {                                              \
			printf("ok %s\n", name);                             \
		} else {                                                 \
			printf("FAIL %s: ", name);                           \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
			failed = 1;                                          \
		}                                                        \
	} while (0)

#define MUST(name, cond)                                         \
	do {                                                         \
		if (!(cond)) {                                           \
			printf("FAIL %s: %s\n", name, strerror(errno));      \
			exit(1);                                             \
		}                                                        \
	} while (0)

#endif
