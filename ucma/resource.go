//go:build linux

package ucma

import (
	"net/netip"
	"sort"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/qpstate"
)

// CMID is one of the clients' IDs as the kernel's resource tracking
// reports it (nldev's fill_res_cm_id_entry, which `rdma resource show
// cm_id` prints).
type CMID struct {
	Idn      uint32 // the ID's number (the context's, as RDMA_NLDEV_ATTR_RES_CM_IDN)
	Device   string // the name of the device whose CM holds it
	PID      int    // the client process that holds it
	State    cma.State
	PS       cma.PortSpace
	Attached bool         // bound to the device's port (a local address or a connection)
	QPNum    uint32       // the QP connect or accept named; 0: none yet
	QPType   qpstate.Type // meaningful with QPNum
	Src, Dst netip.AddrPort
}

// CMIDs returns the IDs the resource tracking lists, by number: those
// attached to the device and the listeners (a listener on a wildcard
// address listens on the device too, as cma_listen_on_dev makes it).
// IDs that are only created or bound to a wildcard are not listed.
func (s *Service) CMIDs() []CMID {
	type held struct {
		idn uint32
		pid int
		id  *cma.ID
	}
	s.mu.Lock()
	hs := make([]held, 0, len(s.ctxs))
	for _, c := range s.ctxs {
		if c.cmID.Load() == nil {
			continue
		}
		pid := 0
		if f := c.file.Load(); f != nil {
			pid = f.owner
		}
		hs = append(hs, held{c.id, pid, c.cmID.Load()})
	}
	s.mu.Unlock()
	var out []CMID
	for _, h := range hs {
		in := h.id.Info()
		if !in.HasDevice && in.State != cma.StateListen {
			continue
		}
		out = append(out, CMID{Idn: h.idn, Device: h.id.CM().Device().Name(), PID: h.pid, State: in.State, PS: h.id.PortSpace(), Attached: in.HasDevice,
			QPNum: in.QPNum, QPType: h.id.QPType(), Src: in.Src, Dst: in.Dst})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Idn < out[j].Idn })
	return out
}
