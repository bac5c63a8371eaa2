// Package qpstate is the queue pair (QP) state machine of the Linux RDMA
// stack as data, and the checks a modify_qp passes before a driver acts on
// it.
//
// The kernel's verbs layer (drivers/infiniband/core/verbs.c) keeps a table
// qp_state_table indexed by (current state, next state, QP type) that says
// which transitions exist and which attributes each must and may carry;
// ib_modify_qp_is_ok consults it. This package holds the same table
// (Masks), the same predicate (ModifyIsOK), and Check, which gives the same
// verdict but explains it with a *TransitionError whose errno is EINVAL.
//
// On top of the table sit the value checks of the uverbs and core layers
// (uverbs_cmd.c modify_qp, _ib_modify_qp) and of a driver (rxe_modify_qp,
// rxe_qp_chk_attr): Policy.Validate applies them in
// the kernel's order for rxe as of Linux 6.4 and later (PolicyRxe, the zero
// value), rxe before 6.4 (PolicyRxePre64) and a hardware driver such as
// mlx5 (PolicyHardware). They differ in when the table is consulted: rxe
// since 6.4 only when IB_QP_STATE is in the mask, the others always.
//
// Every enum holds the kernel's values and prints the kernel's names
// (IB_QPS_RTR, IB_QPT_RC, IB_QP_AV|IB_QP_PATH_MTU). The package is pure: no
// I/O, no state, nothing of the rest of softroce.
package qpstate
