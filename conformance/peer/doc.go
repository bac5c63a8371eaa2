// Package peer runs the Linux kernel's Soft-RoCE driver (rdma_rxe) as a
// real RoCEv2 peer for interop tests: a Debian kernel (Debian 12's 6.1,
// Debian 13's 6.12 or trixie-backports' 7.3, see Release) booted in qemu
// under TCG, from an initramfs holding busybox, the rxe modules,
// rdma-core's and perftest's tools and the rxe verbs provider.
//
// The pieces:
//
//   - BuildImage assembles the kernel and base initramfs from Debian
//     packages (the kernel via `apt-get download`, the tools from this
//     host) and caches it by a hash of its inputs.
//   - NewLab creates a network namespace with a bridge (MTU 9000) and a
//     kernel address on it, TAPs for VMs and for softroce, and a capture of
//     every frame on the bridge.
//   - Start boots one VM on a TAP: /init configures eth0 from the kernel
//     command line, runs `rdma link add rxe0 type rxe netdev eth0`, then
//     either runs a fixed command (VMConfig.Cmd) and powers off, or serves
//     commands from the host over the serial console (VM.Run, VM.StartJob)
//     so one boot serves many tool runs.
//   - CheckCapture checks every frame of a capture with the wire package
//     (wire.Parse, Packet.VerifyICRC); TsharkCheck decodes it with tshark
//     and lists malformed frames.
//
// The tests use it for interop: TestInteropRxe runs the softroce binary
// (`softroce pingpong`, `softroce perf`) against rdma-core's and
// perftest's tools on the VM, both directions, path MTU 1024 and 4096,
// IPv4 and IPv6 GIDs; TestInteropEdge drives faults and QP transitions
// from an in-process softroce node against the VM's ibv_rc_pingpong and
// mirrors each scenario between two softroce devices (docs/interop.md).
//
// In the VM, rxe0's GID index 0 is the IPv6 link-local GID, index 1 the
// RoCEv2 IPv4 GID (::ffff:a.b.c.d) and index 2 the global IPv6 address if
// one was configured. rxe sends from the VM's initial network namespace,
// the only one rxe 6.1 supports (its UDP 4791 socket and route lookups
// live in init_net; per-namespace sockets came later).
package peer
