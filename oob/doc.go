// Package oob speaks the out-of-band TCP exchanges with which the real
// RDMA test tools pair up their queue pairs, so that softroce's CLI can be
// either end against them:
//
//   - rdma-core 44.0's ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong
//     and ibv_srq_pingpong (libibverbs/examples/*_pingpong.c, pingpong.c),
//     as shipped in Debian 12's ibverbs-utils;
//   - perftest 4.5-0.17's ib_{write,read,send,atomic}_{bw,lat}
//     (src/perftest_communication.c, src/*_bw.c, src/*_lat.c) over its
//     default "ethernet" exchange (not -R/-z, which go through RDMA CM).
//
// It is the protocol layer only: message formats (Marshal / Parse, total
// parsers that return EPROTO, never panic), the exchange sequences over
// any io.ReadWriter (PingpongClientExchange, PingpongServerExchange;
// PerftestConn, PerftestConnect, PerftestFinish, PerftestFlowOf), the tools' command
// lines (ParsePingpongFlags, ParsePerftestFlags, getopt_long semantics and
// the tools' defaults) and their output lines (FormatPingpongAddress,
// FormatPingpongResult, FormatPerftestAddress, FormatPerftestInfo,
// FormatPerftestBWReport, ...). The RDMA data path and the sockets are the
// caller's.
//
// Every message is written with a single Write: the C tools read most
// messages with one read(2) of the exact size and give up on a short read.
// This package reads with io.ReadFull.
//
// The sequences are golden-tested against real traffic: captures between
// two kernel rxe hosts (Debian 12), stored once in wire/testdata for every
// package's tests (internal/testutil). The TCP payloads of each capture
// are parsed, re-marshalled to the same bytes, and replayed by both sides
// of this package over net.Pipe, write for write; the QPN, PSN, GID, R_Key,
// virtual address and path MTU exchanged are checked against the RoCE
// frames of the same capture. README.md has the sequence diagrams.
package oob
