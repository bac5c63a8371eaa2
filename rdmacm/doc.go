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
// does. Timers are the kernel's: a REQ waits 6144 ms per try (REQTimeout),
// a REP the REQ's Local CM Response Timeout (4096 ms from rdma_cm), a
// DREQ its side's time, each sent again up to Config.MaxRetries times
// (the REQ's Max CM Retries on the passive side) before the operation
// fails with ETIMEDOUT; an MRA stretches the wait of the message it
// acknowledges (cm_mra_handler). A duplicate REQ the consumer has not
// accepted yet gets an MRA (service timeout 24), later ones are dropped;
// a duplicate REP gets the RTU again, a duplicate DREQ the DREP.
//
// What the kernel answers without state is answered the same way, with a
// transient address handle so that a flood leaves nothing behind: REJ
// "invalid service ID" (8) for a REQ nobody listens for, REJ "consumer
// defined" (28) for one the listener cannot take, REJ "invalid
// communication ID" (6) for a REP naming no REQ, a DREP for a DREQ of an
// unknown connection, SIDR_REP "unsupported" for every SIDR_REQ (there are
// no UD listeners). A REQ beyond a listener's backlog is dropped silently,
// malformed MADs are dropped; CM.Stats counts all of it. McastJoinFor
// derives what rdma_join_multicast gives on RoCE. LAP, APR, SIDR and UD
// listeners, and alternate paths are not implemented.
package rdmacm
