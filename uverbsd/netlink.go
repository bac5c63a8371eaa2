package uverbsd

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/nldev"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbs"
)

// nlClient is an RDMA netlink socket's state (conn.nl): what the replies
// depend on, set by the client's setup messages.
type nlClient struct {
	cl nldev.Client
}

// openNetlink answers the OpOpen of preload.NetlinkNode: the connection
// carries netlink datagrams from now on.
func (cn *conn) openNetlink(h preload.Header) bool {
	cn.nl = &nlClient{cl: nldev.Client{Admin: netAdmin(cn.pid)}}
	return cn.reply(preload.Header{Op: h.Op}, nil, nil)
}

// serveNetlink answers one datagram of a netlink connection; false when
// the client is gone.
func (cn *conn) serveNetlink(pkt []byte) bool {
	if cn.setupNetlink(pkt) {
		return true
	}
	for _, out := range nldev.Serve(nlSource{cn.s}, cn.nl.cl, pkt) {
		if _, err := cn.c.Write(out); err != nil {
			return false
		}
	}
	return true
}

// peerOpen reports whether the client's end is still open: a read of
// zero bytes on a SOCK_SEQPACKET socket is an empty packet then, and the
// end of the connection otherwise.
func (cn *conn) peerOpen() bool {
	open := false
	cn.raw.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(pfd, 0)
		open = err == nil && (n == 0 || pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) == 0)
	})
	return open
}

// setupNetlink takes the client's setup message (preload.NetlinkSetupMagic),
// reporting whether pkt was one.
func (cn *conn) setupNetlink(pkt []byte) bool {
	const size = nldev.HdrLen + 12
	e := binary.NativeEndian
	if len(pkt) != size || e.Uint32(pkt) != size || e.Uint16(pkt[4:]) != unix.NLMSG_NOOP ||
		e.Uint16(pkt[6:]) != 0 || e.Uint32(pkt[nldev.HdrLen:]) != preload.NetlinkSetupMagic {
		return false
	}
	cn.nl.cl.PortID = e.Uint32(pkt[nldev.HdrLen+4:])
	cn.nl.cl.CapAck = e.Uint32(pkt[nldev.HdrLen+8:])&preload.NetlinkSetupCapAck != 0
	return true
}

// netAdmin reports whether process pid may do what RDMA netlink keeps to
// CAP_NET_ADMIN (netlink_capable): it holds the capability in the
// daemon's user namespace. A process of another user namespace holds it
// only there, and the kernel would not count it.
func netAdmin(pid int) bool {
	p := "/proc/" + strconv.Itoa(pid)
	var own, its unix.Stat_t
	if unix.Stat("/proc/self/ns/user", &own) != nil || unix.Stat(p+"/ns/user", &its) != nil || own.Ino != its.Ino {
		return false
	}
	f, err := os.Open(p + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_NET_ADMIN) != 0
		}
	}
	return false
}

// restrack numbers the device's objects as the kernel's resource tracker
// does, per type, cyclically from 0 (xa_alloc_cyclic): an object keeps its
// number while it lives. Objects are numbered when RDMA netlink first
// lists them.
type restrack struct {
	mu   sync.Mutex
	ids  map[any]uint32
	next map[string]uint32
}

// number returns obj's number among the objects of kind.
func (t *restrack) number(kind string, obj any) uint32 {
	if id, ok := t.ids[obj]; ok {
		return id
	}
	if t.ids == nil {
		t.ids, t.next = map[any]uint32{}, map[string]uint32{}
	}
	id := t.next[kind]
	t.next[kind] = id + 1
	t.ids[obj] = id
	return id
}

// keep forgets the numbers of the objects not in live.
func (t *restrack) keep(live map[any]bool) {
	for o := range t.ids {
		if !live[o] {
			delete(t.ids, o)
		}
	}
}

// nlSource is the Server's device as RDMA netlink describes it.
type nlSource struct{ s *Server }

// pollUnboundWorkqueue is IB_POLL_UNBOUND_WORKQUEUE, the poll context of
// ib_core's MAD CQ.
const pollUnboundWorkqueue = 2

// devIndex is the index of the Server's device (ib_device.index).
const devIndex = 0

func (n nlSource) Devices() []nldev.Device {
	d := n.s.cfg.Device
	a := d.Query()
	dev := nldev.Device{
		Index: devIndex, Name: d.Name(), CapFlags: a.DeviceCapFlags,
		NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, NodeType: uint8(a.NodeType),
		Chardevs: map[string]nldev.Chardev{"uverbs": {Name: UverbsNode,
			Dev: nldev.EncodeDev(UverbsMajor, UverbsBaseMinor), ABI: uint64(a.UverbsABIVer), DriverID: nldev.DriverRXE}},
	}
	nd := d.NetDev()
	for port := range d.Ports() {
		if d.LinkLayer(port) == emu.LinkLayerEthernet {
			dev.Protocol = "roce"
		}
		pa, err := d.QueryPort(port)
		if err != nil {
			continue
		}
		p := nldev.Port{CapFlags: uint64(pa.PortCapFlags), State: uint8(pa.State), PhysState: uint8(pa.PhysState), Netdev: nd.Name}
		if ifi, err := net.InterfaceByName(nd.Name); err == nil && nd.Name != "" {
			p.NetdevIndex = uint32(ifi.Index)
		}
		dev.Ports = append(dev.Ports, p)
	}
	return []nldev.Device{dev}
}

func (n nlSource) Sys() nldev.Sys { return nldev.Sys{NetnsShared: true, CopyOnFork: true} }

func (n nlSource) GlobalChardev(name string) (nldev.Chardev, bool) {
	if name != "rdma_cm" || n.s.ucma == nil {
		return nldev.Chardev{}, false
	}
	return nldev.Chardev{Name: RDMACMNode, Dev: nldev.EncodeDev(MiscMajor, RDMACMMinor), ABI: UcmaABIVersion}, true
}

// HasNetdev: the device's own netdev, or an interface of the daemon's
// network namespace.
func (n nlSource) HasNetdev(name string) bool {
	if name != "" && name == n.s.cfg.Device.NetDev().Name {
		return true
	}
	_, err := net.InterfaceByName(name)
	return err == nil
}

// NewLink: a daemon serves the devices it was started with, so it has no
// link type to add one with, and answers as a kernel without the type's
// module (link_ops_get finds none): EINVAL.
func (n nlSource) NewLink(name, typ, netdev string) unix.Errno { return unix.EINVAL }

// DelLink: the daemon's device goes with the daemon (softroce stop), so it
// answers as for a device that its user may not unregister
// (IBK_ALLOW_USER_UNREG unset): EINVAL.
func (n nlSource) DelLink(index uint32) unix.Errno { return unix.EINVAL }

func (n nlSource) Counters(index, port uint32) ([]nldev.Counter, error) {
	d := n.s.cfg.Device
	st, err := d.AllocHWPortStats(port)
	if err != nil {
		var e unix.Errno
		if ok := asErrno(err, &e); ok {
			return nil, e
		}
		return nil, unix.EOPNOTSUPP
	}
	d.GetHWStats(st, port)
	cs := make([]nldev.Counter, 0, len(st.Descs))
	for i, desc := range st.Descs {
		cs = append(cs, nldev.Counter{Name: desc.Name, Value: st.Value[i],
			Optional: desc.Flags&emu.StatFlagOptional != 0, Disabled: st.Disabled[i]})
	}
	return cs, nil
}

func asErrno(err error, e *unix.Errno) bool {
	x := errno(err)
	*e = unix.Errno(-x)
	return x != -int32(unix.EIO)
}

// Resources lists the objects of every open uverbs file and the CM IDs,
// each owned by its client's process.
func (n nlSource) Resources(index uint32) nldev.Resources {
	type open struct {
		pid  int
		file *uverbs.File
	}
	s := n.s
	s.mu.Lock()
	var files []open
	for cn, f := range s.files {
		if uf, ok := f.(uverbsFile); ok {
			files = append(files, open{cn.pid, uf.f})
		}
	}
	s.mu.Unlock()
	sort.Slice(files, func(i, j int) bool { return files[i].pid < files[j].pid })

	var res nldev.Resources
	t := &s.restrack
	t.mu.Lock()
	defer t.mu.Unlock()
	live := map[any]bool{}
	num := func(kind string, obj any) uint32 {
		live[obj] = true
		return t.number(kind, obj)
	}
	if s.cm != nil {
		// ib_core's MAD layer: kernel resources, numbered first as
		// the kernel makes them when the device registers.
		pd, cq, qp := s.cm.MADObjects()
		kern := nldev.Owner{Kern: "ib_core"}
		pdn := num("pd", pd)
		res.PDs = append(res.PDs, nldev.PD{PDN: pdn, LocalDMALKey: pd.LocalDMALKey, Users: 1, Owner: kern})
		res.CQs = append(res.CQs, nldev.CQ{CQN: num("cq", cq), CQE: uint32(cq.CQE), Users: 2,
			PollCtx: pollUnboundWorkqueue, Owner: kern})
		if a, _, err := qp.Query(0); err == nil {
			res.QPs = append(res.QPs, nldev.QP{Port: 1, LQPN: qp.QPNum(), SQPSN: a.SQPSN, Type: uint8(qp.QPType),
				State: uint8(a.QPState), PDN: pdn, Owner: kern})
		}
	}
	for _, o := range files {
		objs, hasCtx := o.file.Tracked()
		if !hasCtx {
			continue
		}
		owner := nldev.Owner{PID: uint32(o.pid)}
		ctxn := num("ctx", o.file)
		res.Ctxs = append(res.Ctxs, nldev.Ctx{CtxN: ctxn, Owner: owner})
		pdn := map[uint32]uint32{}
		cqn := map[uint32]uint32{}
		for _, ob := range objs {
			switch ob.Kind {
			case "pd":
				pdn[ob.Handle] = num("pd", ob.PD)
			case "cq":
				cqn[ob.Handle] = num("cq", ob.CQ)
			}
		}
		for _, ob := range objs {
			switch ob.Kind {
			case "pd":
				res.PDs = append(res.PDs, nldev.PD{PDN: pdn[ob.Handle], LocalDMALKey: ob.PD.LocalDMALKey,
					UnsafeGlobalRKey: ob.PD.UnsafeGlobalRKey, Users: ob.Users, CtxN: ctxn, Owner: owner})
			case "cq":
				res.CQs = append(res.CQs, nldev.CQ{CQN: cqn[ob.Handle], CQE: uint32(ob.CQE), Users: ob.Users,
					CtxN: ctxn, Owner: owner})
			case "mr":
				res.MRs = append(res.MRs, nldev.MR{MRN: num("mr", ob.MR), RKey: ob.MR.RKey(), LKey: ob.MR.LKey(),
					Len: ob.MR.Length, PDN: pdn[ob.PDHandle], Owner: owner})
			case "qp":
				a := ob.Attr
				res.QPs = append(res.QPs, nldev.QP{Port: a.PortNum, LQPN: ob.QP.QPNum(), RQPN: a.DestQPNum,
					RQPSN: a.RQPSN, SQPSN: a.SQPSN, PathMigState: uint8(a.PathMigState), Type: uint8(ob.QP.QPType),
					State: uint8(a.QPState), PDN: pdn[ob.PDHandle], Owner: owner})
			case "srq":
				res.SRQs = append(res.SRQs, nldev.SRQ{SRQN: num("srq", ob.SRQ), Type: uint8(ob.SRQ.Type),
					PDN: pdn[ob.PDHandle], Owner: owner})
			}
		}
	}
	t.keep(live)
	sort.Slice(res.QPs, func(i, j int) bool { return res.QPs[i].LQPN < res.QPs[j].LQPN })
	if s.ucma != nil {
		for _, id := range s.ucma.CMIDs() {
			c := nldev.CMID{PS: uint32(id.PS), State: uint8(id.State), CMIDN: id.Idn,
				Owner: nldev.Owner{PID: uint32(id.PID)}, Src: sockaddr(id.Src)}
			if id.Attached {
				c.Port = 1
			}
			if id.QPNum != 0 {
				c.LQPN, c.QPType = id.QPNum, uint8(id.QPType)
			}
			if id.Dst.Addr().IsValid() {
				c.Dst = sockaddr(id.Dst)
			}
			res.CMIDs = append(res.CMIDs, c)
		}
	}
	return res
}

// sockaddr is a as a struct sockaddr_storage (128 bytes): sockaddr_in
// for an IPv4 address, else sockaddr_in6; the unspecified IPv4 address
// for none.
func sockaddr(a netip.AddrPort) []byte {
	b := make([]byte, 128)
	addr := a.Addr()
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	binary.BigEndian.PutUint16(b[2:], a.Port())
	if addr.Is4() || addr.Is4In6() {
		binary.NativeEndian.PutUint16(b, unix.AF_INET)
		v4 := addr.Unmap().As4()
		copy(b[4:], v4[:])
		return b
	}
	binary.NativeEndian.PutUint16(b, unix.AF_INET6)
	v6 := addr.As16()
	copy(b[8:], v6[:])
	return b
}
