package main

import (
	"fmt"
	"io"

	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:     "fault",
		summary:  "add, delete and list the faults a serving daemon injects (wire, qp, cq, verbs, port rules)",
		operands: "add RULE | del ID | list",
		run:      runFault,
	})
}

// faultSyntax is the rule syntax, for -h.
const faultSyntax = `
A RULE is KIND:ACTION[,KEY=VALUE...]:
  wire:drop|duplicate|reorder|corrupt|delay   RoCE frames the device sends, chosen by
      qp=QPN (destination QP), opcode=NAME (SEND_ONLY, RC_RDMA_WRITE_FIRST, ACKNOWLEDGE, ...),
      psn=N or psn=LO-HI; then on every one, on each with probability prob=P, or on the
      nth=N-th one; count=K bounds the frames (default: 1 with nth, no bound otherwise)
  qp:silent,qp=QPN                            the QP answers nothing (its peer's retries run out)
  qp:err,qp=QPN[,at=DURATION|after=N]         the QP moves to ERR (its work requests flush), now,
                                              DURATION later or once N of its work requests completed
  qp:rnr,qp=QPN[,count=K]                     the next K (default 1) SENDs to the QP get an RNR NAK
  qp:invalidate,rkey=KEY[,qp=QPN][,count=K]   requests naming R_Key KEY are refused (remote access error)
  cq:overflow,qp=QPN[,count=K]                the next K (default 1) completions for the QP's CQs find
                                              them full: lost, and IB_EVENT_CQ_ERR
  cq:delay,qp=QPN,by=DURATION[,count=K]       completions for the QP's CQs arrive DURATION late
  verbs:fail,verb=NAME,errno=ENAME[,count=N]  the next N (default 1) uverbs commands NAME
      (create_qp, modify_qp, post_send, reg_mr, create_cq, ...) fail with errno ENAME
  port:down|up[,at=DURATION]                  the port goes down (IB_EVENT_PORT_ERR) or up
                                              (IB_EVENT_PORT_ACTIVE), now or DURATION later
  port:gid,ip=ADDR[/LEN][,at=DURATION]        a new address, so a new GID (IB_EVENT_GID_CHANGE)
Every action a rule takes is logged by the daemon and counted in its coverage profile.

examples:
  softroce serve -d rxe0 --fault verbs:fail,verb=create_qp,errno=ENOMEM &
  softroce fault add -d rxe0 wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3
  softroce fault list -d rxe0
  softroce fault del -d rxe0 2
`

// runFault sends the fault command to the daemon serving -d.
func runFault(e *env) error {
	fs := newFlagSet(e, "fault")
	dev := fs.String("d", defaultServeName, "the device `NAME` of the serving daemon")
	flagUsage := fs.Usage
	fs.Usage = func() {
		flagUsage()
		io.WriteString(e.stderr, faultSyntax)
	}
	operands, err := parseFlags(fs, e.args)
	if err != nil {
		return err
	}
	ok := len(operands) == 2 && (operands[0] == "add" || operands[0] == "del") ||
		len(operands) == 1 && operands[0] == "list"
	if !ok {
		fs.Usage()
		return errUsage
	}
	dir, err := uverbsd.DeviceDir(*dev)
	if err != nil {
		return err
	}
	out, err := uverbsd.Control(dir, "fault", operands...)
	if err != nil {
		return fmt.Errorf("fault %s -d %s: %w", operands[0], *dev, err)
	}
	_, err = io.WriteString(e.stdout, out)
	return err
}
