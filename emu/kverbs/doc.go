// Package kverbs offers the kernel's verbs helpers that exist to mirror
// include/rdma/ib_verbs.h one to one, under their kernel names, for code
// ported from the kernel and for conformance checks: the port capability
// and protocol predicates (rdma_cap_*, rdma_protocol_*,
// rdma_core_cap_opa_port), MAD size, MTU and AH type of a port, static
// rate and port speed conversions, LID byte orders, the NUMA node of a
// device and the fast-registration key helpers.
//
// A program written against package emu rarely needs them: emu answers
// the same questions where they matter (QueryPort, LinkLayer,
// PortImmutable) and applies them itself.
package kverbs
