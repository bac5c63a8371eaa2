package uverbsd

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/softroce/softroce/cma"
)

// ResourceNames are the resources the control command "res" lists.
var ResourceNames = []string{"cm_id"}

// res serves the control command "res": the device's tracked resources,
// a line each, as `rdma resource show RESOURCE` prints the kernel's
// (nldev, through rdma_restrack). args names the resource; none means
// cm_id.
func (s *Server) res(args []string) (string, error) {
	if len(args) > 1 || len(args) == 1 && args[0] != "cm_id" {
		return "", fmt.Errorf("res: resource %q: the daemon lists %s", strings.Join(args, " "), strings.Join(ResourceNames, ", "))
	}
	if s.ucma == nil {
		return "", nil // rdma_cm not served: no IDs
	}
	var b strings.Builder
	for _, id := range s.ucma.CMIDs() {
		port := "-"
		if id.Attached {
			port = "1"
		}
		fmt.Fprintf(&b, "link %s/%s cm-idn %d ", id.Device, port, id.Idn)
		if id.QPNum != 0 {
			fmt.Fprintf(&b, "lqpn %d qp-type %s ", id.QPNum, id.QPType.Name())
		}
		fmt.Fprintf(&b, "state %s ps %s pid %d comm %s src-addr %s", stateName(id.State), psName(id.PS), id.PID, comm(id.PID), addrPort(id.Src))
		if id.Dst.Addr().IsValid() {
			fmt.Fprintf(&b, " dst-addr %s", addrPort(id.Dst))
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// stateName is the state as the rdma tool names it ("LISTEN").
func stateName(st cma.State) string { return strings.TrimPrefix(st.String(), "RDMA_CM_") }

// psName is the port space as the rdma tool names it.
func psName(ps cma.PortSpace) string {
	switch ps {
	case cma.PSTCP:
		return "TCP"
	case cma.PSUDP:
		return "UDP"
	case cma.PSIB, cma.PSIPoIB:
		return "IPoIB" // the rdma tool's name for both
	}
	return "---"
}

// addrPort is ADDR:PORT as the rdma tool prints it (an IPv6 address
// unbracketed, no zone).
func addrPort(a netip.AddrPort) string {
	addr := a.Addr().WithZone("")
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	return addr.String() + ":" + strconv.Itoa(int(a.Port()))
}

// comm is the process's command name, as the rdma tool reads it.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil || pid == 0 {
		return "-"
	}
	return strings.TrimSpace(string(b))
}
