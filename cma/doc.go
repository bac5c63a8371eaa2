// Package cma is the kernel's RDMA Communication Manager for an emulated
// device: the rdma_cm IDs of drivers/infiniband/core/cma.c with the IB CM
// of cm.c beneath them, driven by events as in the kernel.
//
// A CM owns the device's GSI QP (QP1). An ID (rdma_create_id) lives in a
// port space (RDMA_PS_TCP, ...) and walks the kernel's rdma_cm states:
// bound to an address (Bind), resolved to a destination (ResolveAddr, an
// ADDR_RESOLVED or ADDR_ERROR event later), given a route (ResolveRoute,
// ROUTE_RESOLVED), listening (Listen: a REQ that matches gives the
// listener's handler a CONNECT_REQUEST with a new ID), connecting
// (Connect sends a REQ; the REP gives CONNECT_RESPONSE, a REJ REJECTED
// with the reason as status, no answer UNREACHABLE), accepting (Accept
// sends the REP, the RTU gives ESTABLISHED), disconnecting (DREQ, DREP,
// DISCONNECTED, and TIMEWAIT_EXIT once the timewait is over).
//
// The CM never touches a consumer's QP: as for a userspace QP under the
// kernel's rdma_cm, the consumer (librdmacm through package ucma, or
// package rping's librdmacm calls in Go) asks InitQPAttr for the
// attributes of each transition and modifies its QP itself, then calls
// Accept on the active side to send the RTU.
//
// A REQ from a QP (CA GUID and QP number) that still has a connection
// here is stale: it gets REJ "stale connection" and the old connection a
// DREQ (cm_match_req).
//
// Handlers run with the CM's lock held, one event at a time: they must not
// call back into the CM (package ucma queues the event and returns).
package cma
