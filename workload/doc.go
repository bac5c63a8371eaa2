// Package workload runs the traffic of the RDMA test tools over the emulated
// verbs API (package emu), side-agnostic: one value per side, built on a
// device, given the peer's address, run. It is what `softroce loopback`,
// `softroce pingpong` and `softroce perf` drive, and what their tests and
// benchmarks measure.
//
// Two families:
//
//   - Pingpong: rdma-core 44's ibv_rc_pingpong, ibv_uc_pingpong,
//     ibv_ud_pingpong and ibv_srq_pingpong (libibverbs/examples): the same
//     objects (one buffer for sending and receiving, rx_depth receives kept
//     posted, srq's N QPs on one SRQ and CQ, ud's address handle and 40 bytes
//     of GRH room), the same main loop (the pending-bits scheme that posts
//     the next send once the previous send and a receive both completed),
//     the same -c pattern (oob.FillCheckPattern / oob.CheckPattern).
//   - Perf: perftest 4.5's ib_{write,read,send,atomic}_{bw,lat}: tx depth,
//     CQ moderation (one signaled WR every cq_mod), outstanding reads and
//     atomics, several QPs, addresses cycling through a cycle buffer, and the
//     tools' statistics (PeakBW for the BW peak, LatencyStats for
//     t_min/t_max/t_typical/t_avg/t_stdev/99%/99.9%); duration mode (-D:
//     perftest's alarm, START→SAMPLE→STOP_SAMPLE→END, on an injected
//     clock.Clock, counting only the window's completions), bidirectional
//     BW (-b; send_bw's run_iter_bi) and --perform_warm_up.
//
// The verbs calls are those a user program makes: create the PD, CQ, QP and
// MR, modify RESET→INIT→RTR→RTS with the masks ib_modify_qp requires
// (qpstate), post, poll. The emulated device completes work asynchronously;
// every wait polls, then arms the CQ (ReqNotify with
// CQReportMissedEvents) and sleeps on the completion handler, and gives up
// after Config.Timeout with an error wrapping ETIMEDOUT — never a hang.
//
// Data is checked where the tool checks it (pingpong -c), and Verify*
// functions check what a run moved when both sides are in one process
// (loopback): memory contents after WRITE, SEND and READ, the counters after
// atomics. Loopback builds two devices on an in-memory link.Pipe with
// optional faults and pcap capture.
package workload
