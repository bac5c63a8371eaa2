/*
 * softroce_preload.h: what the library's files share. softroce_preload.c
 * holds the device files (open, write, mmap, close and the rest); each
 * further file presents one more kernel interface and declares here what
 * the others call.
 */
#ifndef SOFTROCE_PRELOAD_H
#define SOFTROCE_PRELOAD_H

#endif
