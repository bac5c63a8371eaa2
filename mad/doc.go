// Package mad holds zero-copy views of InfiniBand Management Datagrams
// (IBA vol. 1 §13.4) and of the Communication Management messages an RDMA
// CM exchanges: REQ, MRA, REJ, REP, RTU, DREQ and DREP for connections
// (IBA vol. 1 §12.6), SIDR_REQ and SIDR_REP for UD service ID resolution (IBA vol. 1 §12.11);
// plus the private-data header librdmacm and the kernel's rdma_cm
// (drivers/infiniband/core/cma.c, struct cma_hdr) put in a REQ or a
// SIDR_REQ to carry IP addressing, the service IDs of the rdma_cm port
// spaces, and the private-data limits the kernel's cm enforces
// (CheckPrivateData, REJFields.Check, SIDRREPFields.Check).
//
// A MAD is exactly Size (256) bytes: a 24-byte common header followed by
// 232 bytes of class data. On RoCE it is the payload of a UD SEND to QP1
// (the GSI QP) with Q_Key 0x80010000. The package knows nothing of how it
// travels: package cma sends and receives it.
//
// As package wire does for RoCEv2 headers, each message is a []byte view
// over the whole MAD with getters and setters named after the IBA fields,
// and a Fields struct for construction (Encode) and inspection (Fields).
// Parse and ParseCM check lengths and versions once; after them, views are
// used unchecked. Multi-byte fields are big-endian; sub-byte fields are
// masked as the IBA figures lay them out (most significant bit first).
package mad
