package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/uverbsd"
)

// faultFlag is --fault RULE, repeatable; each rule is parsed as given.
type faultFlag struct{ rules []*fault.Rule }

func (f *faultFlag) String() string {
	var s []string
	for _, r := range f.rules {
		s = append(s, r.String())
	}
	return strings.Join(s, " ")
}

func (f *faultFlag) Set(v string) error {
	r, err := fault.Parse(v)
	if err != nil {
		return err
	}
	f.rules = append(f.rules, r)
	return nil
}

// daemonFaults is the fault set of a daemon: its wire rules see the
// device's frames, its verbs rules the clients' commands, its port rules
// act on the node.
type daemonFaults struct {
	set *fault.Set

	mu  sync.Mutex
	n   *node.Node  // set once the node exists
	dev *rxe.Device // its rxe device (read on the write path: no node lock)
	// syncDoorbells is the server's SetSyncDoorbells, set once it
	// exists: told after each change of the rules whether one may fail a
	// POST_SEND, which a one-way doorbell would pass by.
	syncDoorbells func(sync bool)
}

// rulesChanged tells the server whether doorbells must be answered by the
// daemon (a verbs rule names post_send).
func (df *daemonFaults) rulesChanged() {
	df.mu.Lock()
	sync := df.syncDoorbells
	df.mu.Unlock()
	if sync != nil {
		sync(df.set.HasVerbRule("post_send"))
	}
}

// newDaemonFaults makes the daemon's fault set, seeded from the run's seed,
// logging to stderr and recording into cov; it wraps the device's link in
// lf so that wire rules see every frame.
func newDaemonFaults(lf *linkFlags, cov *daemonCoverage, stderr io.Writer) *daemonFaults {
	if !lf.seedSet {
		lf.seed, lf.seedSet = randomSeed(), true
	}
	df := &daemonFaults{}
	var logMu sync.Mutex
	df.set = fault.NewSet(fault.Config{
		Seed: seedFor(lf.seed, "faults"),
		Logf: func(format string, args ...any) {
			logMu.Lock()
			fmt.Fprintf(stderr, "softroce: "+format+"\n", args...)
			logMu.Unlock()
		},
		Record:    cov.rec.Fault,
		Port:      df.port,
		QPErr:     df.qpErr,
		Responder: df.responder,
		CQsOf:     df.cqsOf,
	})
	seed := seedFor(lf.seed, "fault-bits")
	lf.deviceLink = func(l link.Link) link.Link {
		// Corrupt leaves the Ethernet header alone: the frame still
		// reaches the device it was sent to, with a bad ICRC.
		// The device writes to the rewriter (qp:rnr, qp:invalidate),
		// which writes to the faults (wire rules, qp:silent) while
		// there are such rules, else to the link itself.
		faulty := link.NewFaults(l, link.FaultConfig{Seed: seed, Schedule: df.set.Frame, CorruptFrom: 14})
		return fault.NewLink(l, faulty, df.set)
	}
	// While no rule looks at frames, the device loops its own back past
	// the fault link, and a doorbell's work is done in the command
	// (uverbsd.Config.Settle) as on a daemon without faults.
	lf.deviceLinkPasses = df.set.Passes
	return df
}

// port applies a port rule to the node.
func (df *daemonFaults) port(r *fault.Rule) error {
	df.mu.Lock()
	n := df.n
	df.mu.Unlock()
	if n == nil {
		return fmt.Errorf("the device is not up yet")
	}
	switch r.Action {
	case "down", "up":
		n.SetDeviceLink(r.Action == "up")
		return nil
	case "gid":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return n.AddAddr(ctx, r.IP)
	}
	return fmt.Errorf("unknown port action %q", r.Action)
}

// qpErr moves the QP numbered qpn to ERR, as a QP that hit a fatal error.
func (df *daemonFaults) qpErr(qpn uint32) error {
	dev := df.rxe()
	if dev == nil {
		return fmt.Errorf("the device is not up yet")
	}
	q := dev.QP(qpn)
	if q == nil {
		return fmt.Errorf("no QP %#x: %w", qpn, unix.ENOENT)
	}
	return q.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
}

// responder answers for qp:rnr; called from the device's write path, it
// takes only the device's own lock.
func (df *daemonFaults) responder(qpn uint32) (fault.Responder, bool) {
	dev := df.rxe()
	if dev == nil {
		return fault.Responder{}, false
	}
	r, ok := dev.Responder(qpn)
	return fault.Responder{DestQPN: r.DestQPN, MinRNRTimer: r.MinRNRTimer, MSN: r.MSN}, ok
}

// cqsOf returns the send and receive CQ of the QP numbered qpn.
func (df *daemonFaults) cqsOf(qpn uint32) ([]any, error) {
	dev := df.rxe()
	if dev == nil {
		return nil, fmt.Errorf("the device is not up yet")
	}
	q := dev.QP(qpn)
	if q == nil {
		return nil, fmt.Errorf("no QP %#x: %w", qpn, unix.ENOENT)
	}
	var cqs []any
	for _, c := range []*emu.CQ{q.SendCQ, q.RecvCQ} {
		if c != nil {
			cqs = append(cqs, c)
		}
	}
	return cqs, nil
}

func (df *daemonFaults) rxe() *rxe.Device {
	df.mu.Lock()
	defer df.mu.Unlock()
	return df.dev
}

// configure hooks the set into the node's device and the server's
// config (verb intercept, "fault" on the control socket).
func (df *daemonFaults) configure(n *node.Node, cfg *uverbsd.Config) {
	dev := n.RxeDevice()
	df.mu.Lock()
	df.n, df.dev = n, dev
	df.mu.Unlock()
	if dev != nil {
		dev.SetCQFault(func(c *emu.CQ, wc *emu.WC) rxe.CQFault {
			var qpn uint32
			if wc.QP != nil {
				qpn = wc.QP.QPNum()
			}
			overflow, delay := df.set.CQ(c, qpn)
			return rxe.CQFault{Overflow: overflow, Delay: delay}
		})
	}
	cfg.Intercept = df.set.Verb
	if cfg.Control == nil {
		cfg.Control = map[string]uverbsd.ControlFunc{}
	}
	cfg.Control["fault"] = df.control
}

// add adds the rules given at start.
func (df *daemonFaults) add(rules []*fault.Rule) error {
	for _, r := range rules {
		if _, err := df.set.Add(r); err != nil {
			return err
		}
	}
	df.rulesChanged()
	return nil
}

// control serves "fault add RULE", "fault del ID" and "fault list".
func (df *daemonFaults) control(args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("fault: add RULE, del ID or list")
	}
	switch {
	case args[0] == "add" && len(args) == 2:
		r, err := fault.Parse(args[1])
		if err != nil {
			return "", err
		}
		id, err := df.set.Add(r)
		if err != nil {
			return "", err
		}
		df.rulesChanged()
		return fmt.Sprintf("%d %s\n", id, r), nil
	case args[0] == "del" && len(args) == 2:
		id, err := strconv.Atoi(args[1])
		if err != nil {
			return "", fmt.Errorf("fault del: %q is not a rule id (softroce fault list shows them)", args[1])
		}
		err = df.set.Del(id)
		df.rulesChanged()
		return "", err
	case args[0] == "list" && len(args) == 1:
		var b strings.Builder
		for _, l := range df.set.List() {
			b.WriteString(l + "\n")
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("fault: add RULE, del ID or list (got %q)", args)
}
