// Package rdmacm is an RDMA Communication Manager for an emulated device:
// the connection setup librdmacm applications (rping, ucmatose, ib_*_bw -R)
// get from the kernel's rdma_cm (drivers/infiniband/core/cma.c) and IB CM
// (cm.c), over package emu.
//
// A CM owns the device's GSI QP (QP1): it sends the CM messages of package
// mad as UD SENDs to QP1 of the peer (Q_Key 0x80010000), addressing the
// peer by the RoCEv2 GID of its IP address, and dispatches what it
// receives. On top of it:
//
//   - active side: CM.Connect sends a REQ (service ID 0x0000000001 06 PORT,
//     the rdma_cm IP header in its private data), waits for the REP, moves
//     the consumer's RC QP through INIT, RTR and RTS with the attributes
//     the REP gives (the kernel's cm_init_qp_*_attr), and sends the RTU; a
//     REJ fails it with the reason;
//   - passive side: CM.Listen takes REQs for a port (a REQ for a port
//     nobody listens on gets REJ "invalid service ID", as from the
//     kernel); Request.Accept moves the QP to RTR, sends the REP and moves
//     it to RTS on the RTU;
//   - Conn.Disconnect moves the QP to ERR and sends a DREQ, answered by a
//     DREP; a DREQ from the peer is answered and closes Conn.Done.
//
// The whole connection uses the REQ's transaction ID, as the kernel's cm
// does. Timeouts are kept simple: a REQ, a REP and a DREQ are sent again
// every Config.RetryInterval (default the 4.096 µs × 2^20 ≈ 4.3 s the
// kernel's CM response timeout of 20 means) up to Config.MaxRetries times
// (default 15, the kernel's max CM retries); duplicates of a REQ, REP or
// DREQ are answered again with REP, RTU or DREP. MRA, LAP, SIDR and
// alternate paths are not implemented.
package rdmacm
