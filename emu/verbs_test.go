package emu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// manualClock is a clock whose time moves only when the test says so.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time                              { return c.now }
func (c *manualClock) AfterFunc(time.Duration, func()) clock.Timer { return stopped{} }
func (c *manualClock) Advance(d time.Duration)                     { c.now = c.now.Add(d) }

type stopped struct{}

func (stopped) Stop() bool { return false }

type resolver struct{ mac [6]byte }

func (r resolver) Resolve(_ context.Context, ip netip.Addr) ([6]byte, error) {
	if ip == netip.MustParseAddr("10.0.0.99") {
		return [6]byte{}, unix.EHOSTUNREACH
	}
	return r.mac, nil
}

var peerMAC = [6]byte{2, 0, 0, 0, 0, 2}

func newDevice(t *testing.T, mod ...func(*rxe.Config)) *rxe.Device {
	t.Helper()
	cfg := rxe.Config{Device: emu.Config{Resolver: resolver{peerMAC}, NetDev: emu.NetDev{Name: "tap0",
		Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}}}}
	for _, m := range mod {
		m(&cfg)
	}
	d, err := rxe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	if want == 0 && err != nil || want != 0 && !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func roceAV(dst string) ib.AHAttr {
	return ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
		GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(netip.MustParseAddr(dst)), SGIDIndex: 1, HopLimit: 1}}
}

// TestModifyQP walks an RC QP through RESET->INIT->RTR->RTS->ERR->RESET
// with ib_modify_qp and checks a refused transition names its bits.
func TestModifyQP(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	cq := must[*emu.CQ](t)(d.AllocCQAny(16, emu.PollDirect))
	qp := must[*emu.QP](t)(pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	steps := []struct {
		name string
		attr qpstate.Attr
		mask qpstate.AttrMask
		want unix.Errno
	}{
		{"INIT_without_ACCESS", qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1}, 0x31, unix.EINVAL},
		{"port_2", qpstate.Attr{QPState: qpstate.StateInit, PortNum: 2}, 0x39, unix.EINVAL},
		{"INIT", qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1}, 0x39, 0},
		{"INIT_to_RTS", qpstate.Attr{QPState: qpstate.StateRTS}, 0x12E01, unix.EINVAL},
		{"AV_without_GRH", qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024,
			AHAttr: ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1}}, 0x129181, unix.EINVAL},
		{"MTU_6", qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: 6, AHAttr: roceAV("10.0.0.2")}, 0x129181, unix.EINVAL},
		{"ALT_on_RoCE", qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, AHAttr: roceAV("10.0.0.2"),
			AltAHAttr: roceAV("10.0.0.2"), AltPortNum: 1}, 0x129181 | qpstate.AttrAltPath, unix.EINVAL},
		{"RTR", qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, AHAttr: roceAV("10.0.0.2"), DestQPNum: 9}, 0x129181, 0},
		{"RTR_to_RTR", qpstate.Attr{QPState: qpstate.StateRTR}, 1, unix.EINVAL},
		{"RTS_with_CUR", qpstate.Attr{QPState: qpstate.StateRTS, CurQPState: qpstate.StateRTR, Timeout: 14}, 0x12E03, 0},
		{"RTS_to_SQE", qpstate.Attr{QPState: qpstate.StateSQE}, 1, unix.EINVAL},
		{"ERR", qpstate.Attr{QPState: qpstate.StateErr}, 1, 0},
		{"RESET", qpstate.Attr{QPState: qpstate.StateReset}, 1, 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			a := s.attr
			err := qp.Modify(&a, s.mask)
			wantErrno(t, "modify", err, s.want)
			var te *qpstate.TransitionError
			if s.name == "INIT_to_RTS" && !errors.As(err, &te) {
				t.Fatalf("error %T is not a *qpstate.TransitionError", err)
			}
		})
	}
	if a, _, _ := qp.Query(0); a.QPState != qpstate.StateReset || qp.Port != 1 {
		t.Fatalf("final state %v port %d", a.QPState, qp.Port)
	}
}

// TestRates covers ib_rate_to_mult, mult_to_ib_rate and ib_rate_to_mbps
// over the whole table, including unknown rates and 1600G.
func TestRates(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"rate_to_mbps_16", kverbs.RateToMbps(16), 103125},
		{"rate_to_mult_24", kverbs.RateToMult(24), -1},
		{"mult_to_rate_7", int(kverbs.MultToRate(7)), int(emu.RatePortCurrent)},
		{"rate_to_mult_25", kverbs.RateToMult(25), 640},
		{"port_current_mult", kverbs.RateToMult(emu.RatePortCurrent), -1},
		{"port_current_mbps", kverbs.RateToMbps(emu.RatePortCurrent), -1},
		{"14G_mbps", kverbs.RateToMbps(emu.Rate14Gbps), 14062},
		{"800G_mult", kverbs.RateToMult(emu.Rate800Gbps), 320},
		{"mult_4", int(kverbs.MultToRate(4)), int(emu.Rate10Gbps)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
			}
		})
	}
	for r := emu.Rate(0); r < 30; r++ {
		if m := kverbs.RateToMult(r); m > 0 && kverbs.MultToRate(m) != r {
			t.Errorf("mult_to_ib_rate(ib_rate_to_mult(%d)) = %d", r, kverbs.MultToRate(m))
		}
	}
}

// TestPortAttrToSpeedInfo covers ib_port_attr_to_speed_info and the rxe
// speed mapping of ib_get_eth_speed.
func TestPortAttrToSpeedInfo(t *testing.T) {
	for _, c := range []struct {
		speed emu.Speed
		width emu.Width
		rate  int
		str   string
		errno unix.Errno
	}{
		{emu.SpeedSDR, emu.Width1X, 25, "2.5 Gb/sec (1X SDR)", 0},
		{emu.SpeedEDR, emu.Width4X, 1000, "100.0 Gb/sec (4X EDR)", 0},
		{emu.SpeedNDR, emu.Width2X, 2000, "200.0 Gb/sec (2X NDR)", 0},
		{emu.SpeedFDR, emu.Width12X, 1680, "168.0 Gb/sec (12X FDR)", 0},
		{3, emu.Width1X, 25, "2.5 Gb/sec (1X SDR)", 0},
		{emu.SpeedSDR, 3, 0, "", unix.EINVAL},
	} {
		si, err := kverbs.PortAttrToSpeedInfo(&emu.PortAttr{ActiveSpeed: c.speed, ActiveWidth: c.width})
		wantErrno(t, "speed info", err, c.errno)
		if si.Rate != c.rate || si.Str != c.str {
			t.Errorf("%d/%d: %+v, want %d %q", c.speed, c.width, si, c.rate, c.str)
		}
	}
	for _, c := range []struct {
		mbps  int
		width emu.Width
		speed emu.Speed
	}{{10, emu.Width1X, emu.SpeedSDR}, {0, emu.Width1X, emu.SpeedSDR}, {10000, emu.Width1X, emu.SpeedFDR10},
		{25000, emu.Width1X, emu.SpeedEDR}, {100000, emu.Width4X, emu.SpeedEDR}, {400000, emu.Width4X, emu.SpeedNDR}} {
		d := newDevice(t, func(c2 *rxe.Config) { c2.Device.NetDev.SpeedMbps = c.mbps })
		pa := must[emu.PortAttr](t)(d.QueryPort(1))
		if pa.ActiveWidth != c.width || pa.ActiveSpeed != c.speed {
			t.Errorf("%d Mb/s: %d/%d, want %d/%d", c.mbps, pa.ActiveWidth, pa.ActiveSpeed, c.width, c.speed)
		}
	}
}

// TestLIDHelpers covers ib_lid_cpu16 and ib_lid_be16.
func TestLIDHelpers(t *testing.T) {
	for _, lid := range []uint32{0, 1, 0xC001, 0xFFFF, 0x1ABCD} {
		be := kverbs.LIDBE16(lid)
		if got := kverbs.LIDCPU16(lid); got != uint16(lid&0xFFFF) || binary.BigEndian.Uint16(be[:]) != got {
			t.Errorf("lid %#x: cpu16 %#x be16 % x", lid, got, be)
		}
	}
}

// TestKeyHelpers covers ib_inc_rkey (the key byte wraps without carry) and
// ib_update_fast_reg_key.
func TestKeyHelpers(t *testing.T) {
	for _, c := range []struct{ in, want uint32 }{{0x123456FF, 0x12345600}, {0x12345600, 0x12345601}, {0, 1}} {
		t.Run(fmt.Sprintf("ib_inc_rkey_%#x", c.in), func(t *testing.T) {
			if got := kverbs.IncRKey(c.in); got != c.want {
				t.Errorf("ib_inc_rkey(%#x) = %#x, want %#x", c.in, got, c.want)
			}
		})
	}
	t.Run("ib_update_fast_reg_key", func(t *testing.T) {
		pd := must[*emu.PD](t)(newDevice(t).AllocPD(0))
		mr := must[*emu.MR](t)(pd.AllocMR(emu.MRTypeMemReg, 1))
		lkey, rkey := mr.LKey(), mr.RKey()
		kverbs.UpdateFastRegKey(mr, 0xAB)
		if mr.LKey() != lkey&^0xFF|0xAB || mr.RKey() != rkey&^0xFF|0xAB {
			t.Errorf("lkey %#x rkey %#x from %#x %#x", mr.LKey(), mr.RKey(), lkey, rkey)
		}
	})
}

// TestEnumStrings checks the kernel strings of completions, events and
// MR types (ib_wc_status_msg, ib_event_msg).
func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{emu.WCWRFlushErr.Msg(), "WR flushed"},
		{emu.WCWRFlushErr.String(), "IB_WC_WR_FLUSH_ERR"},
		{emu.WCRetryExcErr.Msg(), "transport retry counter exceeded"},
		{emu.WCStatus(22).Msg(), "unrecognized status"},
		{emu.EventSQDrained.Msg(), "send queue drained"},
		{emu.EventSQDrained.String(), "IB_EVENT_SQ_DRAINED"},
		{emu.EventGIDChange.Msg(), "GID changed"},
		{emu.EventWQFatal.Msg(), "unrecognized event"},
		{emu.EventPKeyChange.Msg(), "P_key change"},
		{emu.MRTypeMemReg.String(), "IB_MR_TYPE_MEM_REG"},
		{emu.MRTypeIntegrity.String(), "IB_MR_TYPE_INTEGRITY"},
		{emu.MRType(9).String(), "IB_MR_TYPE(9)"},
		{emu.WCRecv.String(), "IB_WC_RECV"},
		{emu.WRRegMR.String(), "IB_WR_REG_MR"},
		{emu.NetworkIPv4.String(), "RDMA_NETWORK_IPV4"},
		{emu.PortActive.String(), "IB_PORT_ACTIVE"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestMRTypes covers enum ib_mr_type through ib_alloc_mr: MEM_REG only on
// rxe, INTEGRITY refused by the core.
func TestMRTypes(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	for typ := emu.MRTypeMemReg; typ <= emu.MRTypeIntegrity; typ++ {
		mr, err := pd.AllocMR(typ, 8)
		want := unix.Errno(0)
		if typ != emu.MRTypeMemReg {
			want = unix.EINVAL
		}
		wantErrno(t, "alloc_mr "+typ.String(), err, want)
		if err == nil {
			if mr.Type != typ || mr.LKey()>>8 == 0 || mr.LKey() != mr.RKey() || mr.Access != ib.AccessRemote {
				t.Errorf("MR %v access %v", mr, mr.Access)
			}
			wantErrno(t, "dereg_mr_user", mr.DeregUser(&emu.UData{}), 0)
		}
	}
	if !emu.MRTypeDMA.IsValid() || emu.MRType(6).IsValid() {
		t.Error("IsValid")
	}
	_, err := pd.AllocMR(emu.MRTypeMemReg, 513)
	wantErrno(t, "max_num_sg 513", err, unix.EINVAL)
}

// TestCheckMRStatus covers struct ib_mr_status and ib_check_mr_status on
// rxe (no check_mr_status op: EOPNOTSUPP, a zero status).
func TestCheckMRStatus(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	mr := must[*emu.MR](t)(pd.GetDMAMR(ib.AccessLocalWrite))
	st, err := mr.CheckStatus(emu.MRCheckSigStatus)
	wantErrno(t, "check_mr_status", err, unix.EOPNOTSUPP)
	if st != (emu.MRStatus{}) {
		t.Fatalf("status %+v", st)
	}
}

// TestUData covers struct ib_udata: copies in and out, and the rxe create
// paths that read and write it.
func TestUData(t *testing.T) {
	u := &emu.UData{In: []byte{1, 2}, Out: make([]byte, 4)}
	var two [2]byte
	wantErrno(t, "copy from", u.CopyFrom(two[:]), 0)
	wantErrno(t, "copy from short", u.CopyFrom(make([]byte, 3)), unix.EFAULT)
	wantErrno(t, "copy to", u.CopyTo([]byte{9, 9}), 0)
	wantErrno(t, "copy to long", u.CopyTo(make([]byte, 5)), unix.EFAULT)
	if two != [2]byte{1, 2} || u.OutLen != 2 || u.Out[0] != 9 {
		t.Fatalf("udata %+v", u)
	}
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	cq := must[*emu.CQ](t)(d.AllocCQAny(4, emu.PollDirect))
	init := &emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeUD, Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1}}
	_, err := pd.CreateUserQP(init, &emu.UData{In: []byte{1}})
	wantErrno(t, "create QP with driver input", err, unix.EINVAL)
	out := &emu.UData{Out: make([]byte, 8)}
	qp := must[*emu.QP](t)(pd.CreateUserQP(init, out))
	if out.OutLen != 4 || uint32(out.Out[0]) != qp.QPNum() {
		t.Fatalf("create QP response %+v for QPN %d", out, qp.QPNum())
	}
}

// TestRDMANetdev covers struct rdma_netdev: rxe offers no accelerated
// netdev, so rdma_alloc_netdev is EOPNOTSUPP.
func TestRDMANetdev(t *testing.T) {
	d := newDevice(t)
	nd, err := d.AllocRDMANetdev(1)
	wantErrno(t, "alloc rdma netdev", err, unix.EOPNOTSUPP)
	if nd != nil {
		t.Fatal("netdev returned with an error")
	}
}

// TestClientData covers ib_get_client_data / ib_set_client_data and the
// client removal on unregister.
func TestClientData(t *testing.T) {
	d := newDevice(t)
	var removed any
	c := &emu.Client{Name: "cm", Add: func(*emu.Device) (any, error) { return "ctx", nil },
		Remove: func(_ *emu.Device, data any) { removed = data }}
	other := &emu.Client{Name: "sa"}
	wantErrno(t, "add client", d.AddClient(c), 0)
	if got := d.ClientData(c); got != "ctx" {
		t.Fatalf("client data %v", got)
	}
	if got := d.ClientData(other); got != nil {
		t.Fatalf("unregistered client has data %v", got)
	}
	d.SetClientData(c, 42)
	if got := d.ClientData(c); got != 42 {
		t.Fatalf("after set: %v", got)
	}
	failing := &emu.Client{Name: "bad", Add: func(*emu.Device) (any, error) { return nil, unix.ENOMEM }}
	wantErrno(t, "failing add", d.AddClient(failing), unix.ENOMEM)
	d.Close()
	if removed != 42 || d.ClientData(c) != nil {
		t.Fatalf("remove saw %v, data now %v", removed, d.ClientData(c))
	}
	wantErrno(t, "add after unregister", d.AddClient(other), unix.ENODEV)
}

// TestDeviceTryGet covers ib_device_try_get / ib_device_put against
// unregistration, which waits for every reference.
func TestDeviceTryGet(t *testing.T) {
	d := newDevice(t)
	if !d.TryGet() {
		t.Fatal("TryGet on a registered device failed")
	}
	done := make(chan struct{})
	go func() { d.Close(); close(done) }()
	// Close (the unregistration) must wait for our reference; TryGet soon fails.
	for d.TryGet() {
		d.Put()
	}
	select {
	case <-done:
		t.Fatal("Close returned while a reference was held")
	default:
	}
	d.Put()
	<-done
	if d.TryGet() {
		t.Fatal("TryGet succeeded after unregister")
	}
}

// TestPortCapabilities checks every port helper for rxe's RoCEv2 port (the
// rdma_cap_* and rdma_protocol_* family of ib_verbs.h), the port numbering
// helpers and the device attributes.
func TestPortCapabilities(t *testing.T) {
	d := newDevice(t)
	var ports []uint32
	for p := range d.Ports() {
		ports = append(ports, p)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"rdma_start_port", d.StartPort(), uint32(1)},
		{"rdma_end_port", d.EndPort(), uint32(1)},
		{"rdma_for_each_port", ports, []uint32{1}},
		{"rdma_is_port_valid(1)", d.IsPortValid(1), true},
		{"rdma_is_port_valid(0)", d.IsPortValid(0), false},
		{"rdma_cap_ib_switch", kverbs.CapIBSwitch(d.Device), false},
		{"rdma_protocol_ib", kverbs.ProtocolIB(d.Device, 1), false},
		{"rdma_protocol_roce", kverbs.ProtocolRoCE(d.Device, 1), true},
		{"rdma_protocol_roce_udp_encap", kverbs.ProtocolRoCEUDPEncap(d.Device, 1), true},
		{"rdma_protocol_iwarp", kverbs.ProtocolIWARP(d.Device, 1), false},
		{"rdma_is_grh_required", d.IsGRHRequired(1), true},
		{"rdma_cap_ib_mad", kverbs.CapIBMAD(d.Device, 1), true},
		{"rdma_cap_opa_mad", kverbs.CapOPAMAD(d.Device, 1), false},
		{"rdma_cap_ib_smi", kverbs.CapIBSMI(d.Device, 1), false},
		{"rdma_cap_ib_cm", kverbs.CapIBCM(d.Device, 1), true},
		{"rdma_cap_iw_cm", kverbs.CapIWCM(d.Device, 1), false},
		{"rdma_cap_ib_sa", kverbs.CapIBSA(d.Device, 1), false},
		{"rdma_cap_ib_mcast", kverbs.CapIBMcast(d.Device, 1), false},
		{"rdma_cap_af_ib", kverbs.CapAFIB(d.Device, 1), true},
		{"rdma_cap_eth_ah", kverbs.CapEthAH(d.Device, 1), true},
		{"rdma_cap_opa_ah", kverbs.CapOPAAH(d.Device, 1), false},
		{"rdma_cap_read_inv", kverbs.CapReadInv(d.Device, 1), false},
		{"rdma_max_mad_size", kverbs.MaxMADSize(d.Device, 1), 256},
		{"rdma_max_mad_size(port 2)", kverbs.MaxMADSize(d.Device, 2), 0},
		{"rdma_cap_roce_gid_table", kverbs.CapRoCEGIDTable(d.Device, 1), false},
		{"rdma_core_cap_opa_port", kverbs.CoreCapOPAPort(d.Device, 1), false},
		{"rdma_ah_find_type", kverbs.AHFindType(d.Device, 1), ib.AHAttrTypeRoCE},
		{"rdma_port_get_link_layer", d.LinkLayer(1), emu.LinkLayerEthernet},
		{"core caps invalid port", kverbs.CapIBCM(d.Device, 2), false},
		{"vendor_id", d.Query().VendorID, uint32(0xFFFFFF)},
		{"device_cap_flags", d.Query().DeviceCapFlags, uint64(0x1C001223C76)},
		{"node_guid", d.Query().NodeGUID, uint64(0x505400fffe123456)},
		{"max_qp", d.Query().MaxQP, 1048560},
		{"max_srq", d.Query().MaxSRQ, 917503},
		{"core_cap_flags", emu.CorePortIBARoCEUDPEncap, emu.CoreCap(0x00803005)},
	} {
		if !equalAny(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	pa := must[emu.PortAttr](t)(d.QueryPort(1))
	if pa.State != emu.PortActive || pa.PhysState != emu.PhysLinkUp || pa.GIDTblLen != 1024 ||
		pa.PortCapFlags != 0x10000 || pa.MaxMsgSz != 1<<31 || pa.PKeyTblLen != 1 || pa.MaxMTU != ib.MTU4096 {
		t.Errorf("port attr %+v", pa)
	}
	_, err := d.QueryPort(2)
	wantErrno(t, "query port 2", err, unix.EINVAL)
}

func equalAny(a, b any) bool {
	if as, ok := a.([]uint32); ok {
		return slices.Equal(as, b.([]uint32))
	}
	return a == b
}

// TestMTUHelpers covers rdma_mtu_enum_to_int, rdma_mtu_from_attr and the
// ib_mtu_int_to_enum and ib_mtu_enum_to_int edge values and rxe's active MTU
// on a 1500-byte netdev.
func TestMTUHelpers(t *testing.T) {
	d := newDevice(t)
	pa := must[emu.PortAttr](t)(d.QueryPort(1))
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"int_to_enum_1500", int(ib.MTUFromBytes(1500)), 3},
		{"int_to_enum_4096", int(ib.MTUFromBytes(4096)), 5},
		{"int_to_enum_0", int(ib.MTUFromBytes(0)), 1},
		{"enum_to_int_6", ib.MTU(6).Bytes(), -1},
		{"active_mtu_1500", int(pa.ActiveMTU), 3},
		{"rdma_mtu_enum_to_int_1024", kverbs.MTUEnumToInt(d.Device, 1, ib.MTU1024), 1024},
		{"rdma_mtu_enum_to_int_OPA8192_on_RoCE", kverbs.MTUEnumToInt(d.Device, 1, ib.OPAMTU8192), -1},
		{"rdma_mtu_from_attr", kverbs.MTUFromAttr(d.Device, 1, &pa), 4096},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
			}
		})
	}
}

// TestPD covers ib_alloc_pd and ib_dealloc_pd: the internal DMA MR gives
// the local DMA lkey (and the unsafe global rkey on request), and a PD in
// use cannot go.
func TestPD(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	if pd.LocalDMALKey == 0 || pd.UnsafeGlobalRKey != 0 {
		t.Fatalf("pd lkey %#x global rkey %#x", pd.LocalDMALKey, pd.UnsafeGlobalRKey)
	}
	upd := must[*emu.PD](t)(d.AllocPD(emu.PDUnsafeGlobalRKey))
	if upd.UnsafeGlobalRKey == 0 || upd.UnsafeGlobalRKey != upd.LocalDMALKey {
		t.Fatalf("unsafe pd lkey %#x rkey %#x", upd.LocalDMALKey, upd.UnsafeGlobalRKey)
	}
	mw := must[*emu.MW](t)(pd.AllocMW(emu.MWType1))
	wantErrno(t, "dealloc busy PD", pd.Dealloc(), unix.EBUSY)
	wantErrno(t, "dealloc MW", mw.Dealloc(), 0)
	wantErrno(t, "dealloc PD", pd.Dealloc(), 0)
	wantErrno(t, "dealloc unsafe PD", upd.Dealloc(), 0)
}

// TestGIDTable covers the GID table built from the interface's addresses,
// GID change events and rdma_roce_rescan_device.
func TestGIDTable(t *testing.T) {
	d := newDevice(t)
	var events []emu.Event
	var mu sync.Mutex
	d.RegisterEventHandler(func(ev emu.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() })
	want := []string{"fe80::5054:ff:fe12:3456", "::ffff:10.0.0.1", "fd00::1"}
	for i, w := range want {
		e := must[emu.GIDEntry](t)(d.QueryGID(1, i))
		if e.GID.String() != w || e.Type != ib.GIDTypeRoCEv2 || e.Index != i || e.NetDev != "tap0" {
			t.Errorf("GID %d = %+v (%v), want %s RoCEv2", i, e, e.GID, w)
		}
	}
	_, err := d.QueryGID(1, 3)
	wantErrno(t, "empty slot", err, unix.ENODATA)
	_, err = d.QueryGID(1, 1024)
	wantErrno(t, "beyond the table", err, unix.EINVAL)
	d.RoCERescanDevice()
	if len(events) != 0 {
		t.Fatalf("rescan without change raised %v", events)
	}
	d.SetNetDevAddrs([]netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("192.168.1.5")})
	if len(events) != 1 || events[0].Type != emu.EventGIDChange || events[0].Port != 1 {
		t.Fatalf("events %+v", events)
	}
	// fd00::1 keeps slot 2, 10.0.0.1's slot 1 is reused by the new address.
	if e := must[emu.GIDEntry](t)(d.QueryGID(1, 2)); e.GID.String() != "fd00::1" {
		t.Errorf("slot 2 = %v", e.GID)
	}
	if e := must[emu.GIDEntry](t)(d.QueryGID(1, 1)); e.GID.String() != "::ffff:192.168.1.5" {
		t.Errorf("slot 1 = %v", e.GID)
	}
	e, err := d.FindGID(emu.GIDFromAddr(netip.MustParseAddr("192.168.1.5")), ib.GIDTypeRoCEv2, 1)
	if err != nil || e.Index != 1 {
		t.Errorf("FindGID = %+v, %v", e, err)
	}
	_, err = d.FindGID(emu.GIDFromAddr(netip.MustParseAddr("10.0.0.1")), ib.GIDTypeRoCEv2, 1)
	wantErrno(t, "removed address", err, unix.ENOENT)
}

// TestPortEvents covers PORT_ERR / PORT_ACTIVE and link_downed.
func TestPortEvents(t *testing.T) {
	d := newDevice(t)
	var got []emu.EventType
	d.RegisterEventHandler(func(ev emu.Event) { got = append(got, ev.Type) })
	d.SetLink(false)
	if pa, _ := d.QueryPort(1); pa.State != emu.PortDown || pa.PhysState != emu.PhysDisabled {
		t.Fatalf("down port %v %v", pa.State, pa.PhysState)
	}
	d.SetLink(true)
	if !slices.Equal(got, []emu.EventType{emu.EventPortErr, emu.EventPortActive}) {
		t.Fatalf("events %v", got)
	}
	s := must[*emu.HWStats](t)(d.AllocHWPortStats(1))
	d.GetHWStats(s, 1)
	if v, _ := s.Counter("link_downed"); v != 1 {
		t.Fatalf("link_downed %d", v)
	}
}

// TestHWStats covers struct rdma_hw_stats and struct rdma_stat_desc:
// rxe's counter names in order, the clearly marked extras, and the 10 ms
// cache on the injected clock.
func TestHWStats(t *testing.T) {
	clk := &manualClock{now: time.Unix(1000, 0)}
	d := newDevice(t, func(c *rxe.Config) { c.Device.Clock = clk })
	s := must[*emu.HWStats](t)(d.AllocHWPortStats(1))
	rxeNames := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
		"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
		"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs"}
	for i, n := range rxeNames {
		if s.Descs[i].Name != n || s.Descs[i].Flags != 0 {
			t.Errorf("desc %d = %+v, want %s", i, s.Descs[i], n)
		}
	}
	for _, x := range s.Descs[len(rxeNames):] {
		if x.Name != "sent_bytes" && x.Name != "rcvd_bytes" && (x.Flags != emu.StatFlagOptional || x.Name[:9] != "softroce_") {
			t.Errorf("extra counter %+v is not clearly marked", x)
		}
	}
	if s.Lifespan != emu.DefaultStatsLifespan || len(s.Value) != len(s.Descs) {
		t.Fatalf("stats %+v", s)
	}
	d.GetHWStats(s, 1)
	d.SetLink(false)
	d.GetHWStats(s, 1)
	if v, _ := s.Counter("link_downed"); v != 0 {
		t.Fatalf("cached read within 10 ms saw %d", v)
	}
	clk.Advance(10 * time.Millisecond)
	d.GetHWStats(s, 1)
	if v, _ := s.Counter("link_downed"); v != 1 {
		t.Fatalf("read after 10 ms saw %d", v)
	}
}
