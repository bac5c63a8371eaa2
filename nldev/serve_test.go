package nldev

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeSource is one rxe device with a port and a client's objects.
type fakeSource struct {
	res   Resources
	added []string // the links NewLink added
}

func (f *fakeSource) Devices() []Device {
	return []Device{{Index: 0, Name: "rxe0", CapFlags: 0x1c001223c76, NodeGUID: 0x505400fffe4d000a,
		SysImageGUID: 0x505400fffe4d000a, NodeType: NodeIBCA, Protocol: "roce",
		Ports:    []Port{{CapFlags: 0x10000, State: 4, PhysState: 5, Netdev: "eth0", NetdevIndex: 2}},
		Chardevs: map[string]Chardev{"uverbs": {Name: "uverbs0", Dev: EncodeDev(231, 192), ABI: 2, DriverID: DriverRXE}}}}
}

func (f *fakeSource) Resources(uint32) Resources { return f.res }

func (f *fakeSource) Counters(index, port uint32) ([]Counter, error) {
	return []Counter{{Name: "sent_pkts", Value: 7}, {Name: "rcvd_pkts", Value: 9}}, nil
}

func (f *fakeSource) Sys() Sys { return Sys{NetnsShared: true, CopyOnFork: true} }

func (f *fakeSource) GlobalChardev(name string) (Chardev, bool) {
	return Chardev{Name: "rdma_cm", Dev: EncodeDev(10, 122), ABI: 4}, name == "rdma_cm"
}

func (f *fakeSource) HasNetdev(name string) bool { return name == "eth0" }

func (f *fakeSource) NewLink(name, typ, netdev string) unix.Errno {
	f.added = append(f.added, name+" "+typ+" "+netdev)
	return 0
}

func (f *fakeSource) DelLink(index uint32) unix.Errno { return unix.EINVAL }

func newSource() *fakeSource {
	return &fakeSource{res: Resources{
		QPs: []QP{{Port: 1, LQPN: 17, RQPN: 18, Type: qptRC, State: 3, Owner: Owner{PID: 100}},
			{LQPN: 19, Type: 4, State: 0, Owner: Owner{PID: 200}}},
		PDs: []PD{{PDN: 0, LocalDMALKey: 0x16f, Users: 2, Owner: Owner{PID: 100}}},
		MRs: []MR{{MRN: 0, RKey: 0x1234, LKey: 0x1234, Len: 4096, Owner: Owner{PID: 100}}},
	}}
}

// request builds one message of NLDEV op with attrs (type, payload).
func request(op, flags uint16, seq uint32, attrs ...any) []byte {
	var w builder
	w.begin(Header{Type: Type(ClientNLDEV, op), Flags: flags, Seq: seq})
	for i := 0; i+1 < len(attrs); i += 2 {
		t := uint16(attrs[i].(int))
		switch v := attrs[i+1].(type) {
		case uint32:
			w.u32(t, v)
		case string:
			w.str(t, v)
		case []byte:
			w.attr(t, v)
		}
	}
	w.end()
	return w.b
}

type reply struct {
	h     Header
	attrs Attrs
	body  []byte
}

// messages splits packets into messages, failing on a malformed one.
func messages(t testing.TB, pkts [][]byte) []reply {
	t.Helper()
	var out []reply
	for _, p := range pkts {
		for len(p) > 0 {
			if len(p) < HdrLen {
				t.Fatalf("packet leaves %d bytes", len(p))
			}
			h := parseHeader(p)
			if h.Len < HdrLen || int(h.Len) > len(p) {
				t.Fatalf("message length %d of %d bytes", h.Len, len(p))
			}
			body := p[HdrLen:h.Len]
			out = append(out, reply{h, parseAttrs(body), body})
			p = p[min(align(int(h.Len)), len(p)):]
		}
	}
	return out
}

func errnoOfMsg(r reply) unix.Errno {
	return unix.Errno(-int32(binary.NativeEndian.Uint32(r.body)))
}

func TestDevDump(t *testing.T) {
	cl := Client{PortID: 4242}
	ms := messages(t, Serve(newSource(), cl, request(CmdGet, flagRequest|flagDump, 7)))
	if len(ms) != 2 {
		t.Fatalf("%d messages, want a device and DONE", len(ms))
	}
	d := ms[0]
	if d.h.Type != Type(ClientNLDEV, CmdGet) || d.h.Flags != flagMulti || d.h.Seq != 7 || d.h.PID != 4242 {
		t.Errorf("device message header %+v", d.h)
	}
	if name, _ := d.attrs.str(AttrDevName); name != "rxe0" {
		t.Errorf("name %q", name)
	}
	if p, _ := d.attrs.u32(AttrPortIndex); p != 1 {
		t.Errorf("port count %d", p)
	}
	if g := binary.NativeEndian.Uint64(d.attrs[AttrNodeGUID]); g != 0x505400fffe4d000a {
		t.Errorf("node GUID %#x", g)
	}
	if ms[1].h.Type != unix.NLMSG_DONE || errnoOfMsg(ms[1]) != 0 || ms[1].h.Flags != flagMulti {
		t.Errorf("DONE %+v errno %v", ms[1].h, errnoOfMsg(ms[1]))
	}
}

func TestErrorsAndAcks(t *testing.T) {
	src := newSource()
	for _, tc := range []struct {
		name  string
		cl    Client
		req   []byte
		want  []unix.Errno // one per message: -1 for a reply
		echo  int          // bytes of request echoed by the error
		flags uint16
	}{
		{"get without index", Client{}, request(CmdGet, flagRequest, 1), []unix.Errno{unix.EINVAL}, -1, 0},
		{"get of another index", Client{}, request(CmdGet, flagRequest, 1, AttrDevIndex, uint32(3)), []unix.Errno{unix.EINVAL}, -1, 0},
		{"short u32", Client{}, request(CmdGet, flagRequest, 1, AttrDevIndex, []byte{0}), []unix.Errno{unix.EINVAL}, -1, 0},
		{"unknown op", Client{}, request(NumOps, flagRequest, 1), []unix.Errno{unix.EINVAL}, -1, 0},
		{"capped", Client{CapAck: true}, request(NumOps, flagRequest, 1), []unix.Errno{unix.EINVAL}, HdrLen, flagCapped},
		{"admin op", Client{}, request(CmdNewlink, flagRequest, 1), []unix.Errno{unix.EPERM}, -1, 0},
		{"newlink without netdev", Client{Admin: true}, request(CmdNewlink, flagRequest, 1, AttrDevName, "rxe1", AttrLinkType, "rxe"), []unix.Errno{unix.EINVAL}, -1, 0},
		{"newlink named with %", Client{Admin: true}, request(CmdNewlink, flagRequest, 1, AttrDevName, "rxe%d", AttrLinkType, "rxe", AttrNetdevName, "eth0"), []unix.Errno{unix.EINVAL}, -1, 0},
		{"newlink on no netdev", Client{Admin: true}, request(CmdNewlink, flagRequest, 1, AttrDevName, "rxe1", AttrLinkType, "rxe", AttrNetdevName, "eth9"), []unix.Errno{unix.ENODEV}, -1, 0},
		{"newlink", Client{Admin: true}, request(CmdNewlink, flagRequest|flagAck, 1, AttrDevName, "rxe1", AttrLinkType, "rxe", AttrNetdevName, "eth0"), []unix.Errno{0}, HdrLen, 0},
		{"stat of MRs", Client{}, request(CmdStatGet, flagRequest, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1), AttrStatRes, uint32(AttrResMR)), []unix.Errno{unix.EOPNOTSUPP}, -1, 0},
		{"stat mode", Client{}, request(CmdStatGet, flagRequest|flagAck, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1), AttrStatRes, uint32(AttrResQP)), []unix.Errno{^unix.Errno(0), 0}, HdrLen, 0},
		{"dellink of no device", Client{Admin: true}, request(CmdDellink, flagRequest, 1, AttrDevIndex, uint32(5)), []unix.Errno{unix.EINVAL}, -1, 0},
		{"admin op as admin", Client{Admin: true}, request(CmdSysSet, flagRequest, 1), []unix.Errno{unix.EOPNOTSUPP}, -1, 0},
		{"ack", Client{}, request(CmdGet, flagRequest|flagAck, 1, AttrDevIndex, uint32(0)), []unix.Errno{^unix.Errno(0), 0}, HdrLen, 0},
		{"port out of range", Client{}, request(CmdPortGet, flagRequest, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(2)), []unix.Errno{unix.EINVAL}, -1, 0},
		{"no such qp", Client{}, request(CmdResQPGet, flagRequest, 1, AttrDevIndex, uint32(0), AttrResLQPN, uint32(99)), []unix.Errno{unix.ENOENT}, -1, 0},
		{"not a request", Client{}, request(CmdGet, flagAck, 1), []unix.Errno{0}, HdrLen, 0},
		{"chardev for a port", Client{}, request(CmdGetChardev, flagRequest, 1, AttrChardevType, "rdma_cm", AttrPortIndex, uint32(1)), []unix.Errno{unix.EINVAL}, -1, 0},
		{"chardev of no client", Client{}, request(CmdGetChardev, flagRequest, 1, AttrChardevType, "umad", AttrDevIndex, uint32(0)), []unix.Errno{unix.EOPNOTSUPP}, -1, 0},
	} {
		ms := messages(t, Serve(src, tc.cl, tc.req))
		if len(ms) != len(tc.want) {
			t.Errorf("%s: %d messages, want %d", tc.name, len(ms), len(tc.want))
			continue
		}
		for i, m := range ms {
			if tc.want[i] == ^unix.Errno(0) {
				if m.h.Type == unix.NLMSG_ERROR {
					t.Errorf("%s: message %d is an error %v", tc.name, i, errnoOfMsg(m))
				}
				continue
			}
			if m.h.Type != unix.NLMSG_ERROR || errnoOfMsg(m) != tc.want[i] {
				t.Errorf("%s: message %d type %d errno %v, want %v", tc.name, i, m.h.Type, errnoOfMsg(m), tc.want[i])
			}
			echo := tc.echo
			if echo < 0 {
				echo = len(tc.req)
			}
			if got := len(m.body) - 4; got != echo || !reflect.DeepEqual(m.body[4:], tc.req[:echo]) {
				t.Errorf("%s: echoes %d bytes, want the request's first %d", tc.name, got, echo)
			}
			if m.h.Flags != tc.flags || m.h.Seq != 1 {
				t.Errorf("%s: error header %+v", tc.name, m.h)
			}
		}
	}
	if !reflect.DeepEqual(src.added, []string{"rxe1 rxe eth0"}) {
		t.Errorf("links added: %q", src.added)
	}
}

// TestTruncated: a message whose length is past the packet, or under a
// header, ends the packet with no answer, as netlink_rcv_skb does.
func TestTruncated(t *testing.T) {
	req := request(CmdGet, flagRequest|flagDump, 1)
	if out := Serve(newSource(), Client{}, req[:len(req)-1]); len(out) != 0 {
		t.Errorf("a message cut short got %d packets", len(out))
	}
	binary.NativeEndian.PutUint32(req, 8)
	if out := Serve(newSource(), Client{}, req); len(out) != 0 {
		t.Errorf("a message of length 8 got %d packets", len(out))
	}
	two := append(request(CmdSysGet, flagRequest, 1), request(CmdSysGet, flagRequest, 2)...)
	if ms := messages(t, Serve(newSource(), Client{}, two)); len(ms) != 2 || ms[1].h.Seq != 2 {
		t.Errorf("two requests in a packet: %d replies", len(ms))
	}
}

func TestResQPDump(t *testing.T) {
	src := newSource()
	all := messages(t, Serve(src, Client{}, request(CmdResQPGet, flagRequest|flagDump, 1)))
	entries := func(m reply) []Attrs {
		var es []Attrs
		b := m.attrs[AttrResQP]
		for len(b) >= 4 {
			n := int(binary.NativeEndian.Uint16(b))
			es = append(es, parseAttrs(b[4:n]))
			b = b[min(align(n), len(b)):]
		}
		return es
	}
	if len(all) != 2 || len(entries(all[0])) != 2 {
		t.Fatalf("dump: %d messages", len(all))
	}
	e := entries(all[0])[0]
	if q, _ := e.u32(AttrResLQPN); q != 17 {
		t.Errorf("lqpn %d", q)
	}
	if pid, _ := e.u32(AttrResPID); pid != 100 {
		t.Errorf("pid %d", pid)
	}
	if _, ok := e[AttrResRQPN]; !ok {
		t.Errorf("RC QP without rqpn")
	}
	if _, ok := entries(all[0])[1][AttrResRQPN]; ok {
		t.Errorf("UD QP with rqpn")
	}
	port := messages(t, Serve(src, Client{}, request(CmdResQPGet, flagRequest|flagDump, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1))))
	if len(port) != 2 || len(entries(port[0])) != 1 {
		t.Errorf("port 1 filter: %d messages", len(port))
	}
	// A doit names one entry, whose attributes come beside the handle.
	one := messages(t, Serve(src, Client{}, request(CmdResQPGet, flagRequest, 1, AttrDevIndex, uint32(0), AttrResLQPN, uint32(19))))
	if q, _ := one[0].attrs.u32(AttrResLQPN); len(one) != 1 || q != 19 {
		t.Errorf("doit of QP 19: %d messages, lqpn %d", len(one), q)
	}
	if pid, _ := one[0].attrs.u32(AttrResPID); pid != 200 {
		t.Errorf("doit of QP 19: pid %d", pid)
	}
	// MR keys only for CAP_NET_ADMIN.
	for _, admin := range []bool{false, true} {
		ms := messages(t, Serve(src, Client{Admin: admin}, request(CmdResMRGet, flagRequest|flagDump, 1)))
		b := ms[0].attrs[AttrResMR]
		e := parseAttrs(b[4:binary.NativeEndian.Uint16(b)])
		if _, ok := e[AttrResRKey]; ok != admin {
			t.Errorf("admin %v: rkey put %v", admin, ok)
		}
	}
}

// TestDumpPacking: a dump's messages are packed into packets of at most
// GoodSize, the last carrying NLMSG_DONE.
func TestDumpPacking(t *testing.T) {
	src := &fakeSource{}
	for i := range 500 {
		src.res.QPs = append(src.res.QPs, QP{Port: 1, LQPN: uint32(17 + i), Type: 4, Owner: Owner{PID: 1}})
	}
	pkts := Serve(src, Client{}, request(CmdResQPGet, flagRequest|flagDump, 1))
	ms := messages(t, pkts)
	n := 0
	for _, p := range pkts {
		if len(p) > 2*GoodSize {
			t.Errorf("packet of %d bytes", len(p))
		}
	}
	for _, m := range ms[:len(ms)-1] {
		b := m.attrs[AttrResQP]
		for len(b) >= 4 {
			n++
			b = b[min(align(int(binary.NativeEndian.Uint16(b))), len(b)):]
		}
	}
	if n != 500 {
		t.Errorf("%d QPs dumped, want 500", n)
	}
	if ms[len(ms)-1].h.Type != unix.NLMSG_DONE {
		t.Errorf("last message type %d", ms[len(ms)-1].h.Type)
	}
	devs := &fakeSource{}
	pkts = Serve(devs, Client{}, request(CmdGet, flagRequest|flagDump, 1))
	if len(pkts) != 1 {
		t.Errorf("a one-device dump took %d packets", len(pkts))
	}
}

// TestStatStatus: "rdma statistic mode" lists each counter with its
// index, an optional one with whether it is on; the counters of
// "statistic show" leave a disabled one out.
func TestStatStatus(t *testing.T) {
	src := &optionalCounters{newSource()}
	ms := messages(t, Serve(src, Client{}, request(CmdStatGetStatus, flagRequest, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1))))
	if len(ms) != 1 || ms[0].h.Type != Type(ClientNLDEV, CmdStatGetStatus) {
		t.Fatalf("%d messages", len(ms))
	}
	var got []string
	b := ms[0].attrs[AttrStatHWCounters]
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		e := parseAttrs(b[4:n])
		name, _ := e.str(AttrStatHWCounterEntryName)
		i, _ := e.u32(AttrStatHWCounterIndex)
		on, opt := e[AttrStatHWCounterDynamic]
		got = append(got, name+" "+strconv.Itoa(int(i))+" "+strconv.FormatBool(opt)+" "+strconv.FormatBool(opt && on[0] == 1))
		b = b[min(align(n), len(b)):]
	}
	want := []string{"sent_pkts 0 false false", "extra 1 true false"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
	ms = messages(t, Serve(src, Client{}, request(CmdStatGet, flagRequest, 1, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1))))
	if len(ms) != 1 || bytes.Contains(ms[0].body, []byte("extra")) || !bytes.Contains(ms[0].body, []byte("sent_pkts")) {
		t.Errorf("statistic show lists a disabled counter: %q", ms[0].body)
	}
}

type optionalCounters struct{ *fakeSource }

func (o *optionalCounters) Counters(index, port uint32) ([]Counter, error) {
	return []Counter{{Name: "sent_pkts", Value: 1}, {Name: "extra", Optional: true, Disabled: true}}, nil
}
