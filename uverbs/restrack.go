//go:build linux

package uverbs

import (
	"sort"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
)

// Tracked is one object of a File as the kernel's resource tracker
// (rdma_restrack) lists it to RDMA netlink: the verbs object behind a
// handle, with the attributes nldev reports of it.
type Tracked struct {
	Kind   string // "pd", "cq", "qp", "mr", "srq"
	Handle uint32 // the file's handle
	PD     *emu.PD
	CQ     *emu.CQ
	MR     *emu.MR
	QP     *emu.QP
	SRQ    *emu.SRQ
	// PDHandle is the handle of the PD an MR, QP or SRQ is on; CQHandle
	// an XRC SRQ's CQ (HasCQ).
	PDHandle, CQHandle uint32
	HasCQ              bool
	// CQE is a CQ's capacity; Users how many QPs use a CQ, or how many
	// MRs, MWs, QPs, SRQs and AHs a PD (ib_cq.usecnt, ib_pd.usecnt).
	CQE   int
	Users uint64
	// Attr is a QP's queried attributes.
	Attr qpstate.Attr
}

// Tracked lists the File's objects, by handle; Context says whether it
// has a ucontext (GET_CONTEXT done).
func (f *File) Tracked() (objs []Tracked, context bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	pdOf := map[*emu.PD]uint32{}
	cqOf := map[*emu.CQ]uint32{}
	for h, o := range f.objects {
		switch o.kind {
		case kindPD:
			pdOf[o.pd] = h
		case kindCQ:
			cqOf[o.cq.cq] = h
		}
	}
	users := map[uint32]uint64{}
	for h, o := range f.objects {
		t := Tracked{Handle: h}
		switch o.kind {
		case kindPD:
			t.Kind, t.PD = "pd", o.pd
		case kindCQ:
			t.Kind, t.CQ, t.CQE = "cq", o.cq.cq, o.cq.cq.CQE
		case kindMR:
			t.Kind, t.MR = "mr", o.mr
			t.PDHandle = pdOf[o.mr.PD]
			users[t.PDHandle]++
		case kindQP:
			q := o.qp.qp
			t.Kind, t.QP = "qp", q
			t.PDHandle = pdOf[q.PD]
			users[t.PDHandle]++
			if q.SendCQ != nil {
				users[cqOf[q.SendCQ]]++
			}
			if q.RecvCQ != nil {
				users[cqOf[q.RecvCQ]]++
			}
			if a, _, err := q.Query(0); err == nil {
				t.Attr = a
			}
		case kindSRQ:
			t.Kind, t.SRQ = "srq", o.srq.srq
			t.PDHandle = pdOf[o.srq.srq.PD]
			users[t.PDHandle]++
		case kindAH:
			users[pdOf[o.ah.PD]]++
			continue
		case kindMW:
			users[pdOf[o.mw.PD]]++
			continue
		default:
			continue
		}
		objs = append(objs, t)
	}
	for i := range objs {
		if objs[i].Kind == "pd" || objs[i].Kind == "cq" {
			objs[i].Users = users[objs[i].Handle]
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Handle < objs[j].Handle })
	return objs, f.context
}
