package emu_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestAH covers rdma_create_ah, rdma_create_user_ah, rdma_modify_ah,
// rdma_query_ah, rdma_destroy_ah_user and rdma_destroy_ah (an AH without a GRH
// on a RoCE port is EINVAL).
func TestAH(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	for _, c := range []struct {
		name  string
		attr  ib.AHAttr
		user  bool
		errno unix.Errno
		dmac  [6]byte
		hop   uint8
	}{
		{"kernel AH keeps the given MAC", withMAC(roceAV("10.0.0.2"), [6]byte{2, 9}), false, 0, [6]byte{2, 9}, 1},
		{"user AH resolves the MAC and hop limit", roceAV("10.0.0.2"), true, 0, peerMAC, 64},
		{"user AH multicast IPv4", roceAV("239.1.2.3"), true, 0, [6]byte{1, 0, 0x5e, 1, 2, 3}, 1},
		{"user AH multicast IPv6", roceAV("ff0e::1:2:3:4"), true, 0, [6]byte{0x33, 0x33, 0, 3, 0, 4}, 1},
		{"user AH unreachable", roceAV("10.0.0.99"), true, unix.EHOSTUNREACH, [6]byte{}, 0},
		{"no_GRH", func() ib.AHAttr { a := roceAV("10.0.0.2"); a.AHFlags = 0; return a }(), false, unix.EINVAL, [6]byte{}, 0},
		{"port 2", func() ib.AHAttr { a := roceAV("10.0.0.2"); a.PortNum = 2; return a }(), false, unix.EINVAL, [6]byte{}, 0},
		{"empty SGID slot", func() ib.AHAttr { a := roceAV("10.0.0.2"); a.GRH.SGIDIndex = 9; return a }(), false, unix.ENODATA, [6]byte{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := c.attr
			var ah *emu.AH
			var err error
			if c.user {
				ah, err = pd.CreateUserAH(&a, &emu.UData{Out: make([]byte, 4)})
			} else {
				ah, err = pd.CreateAH(&a)
			}
			wantErrno(t, "create AH", err, c.errno)
			if err != nil {
				return
			}
			q := must[ib.AHAttr](t)(ah.Query())
			if q.Type != ib.AHAttrTypeRoCE || q.AHFlags != ib.AHGRH || q.DMAC != c.dmac || q.GRH.HopLimit != c.hop {
				t.Fatalf("query %+v", q)
			}
			if n := rxe.AHNum(ah); n == 0 || n > 32767 {
				t.Fatalf("ah_num %d", n)
			}
			wantErrno(t, "destroy", ah.DestroyUser(&emu.UData{}), 0)
		})
	}
	a := roceAV("10.0.0.2")
	ah := must[*emu.AH](t)(pd.CreateAH(&a))
	b := roceAV("fd00::9")
	b.GRH.SGIDIndex = 2
	wantErrno(t, "modify", ah.Modify(&b), 0)
	if q := must[ib.AHAttr](t)(ah.Query()); q.GRH.DGID != b.GRH.DGID || q.GRH.SGIDIndex != 2 {
		t.Fatalf("after modify %+v", q)
	}
	b.Type = ib.AHAttrTypeIB
	wantErrno(t, "modify type", ah.Modify(&b), unix.EINVAL)
	wantErrno(t, "destroy", ah.Destroy(), 0)
	wantErrno(t, "dealloc PD after the AHs", pd.Dealloc(), 0)
}

func withMAC(a ib.AHAttr, mac [6]byte) ib.AHAttr { a.DMAC = mac; return a }

// ipv4Hdr builds a UD receive's 40-byte header area for IPv4: 20 zero
// bytes, then the IPv4 header with a correct checksum.
func ipv4Hdr(src, dst string) *[emu.GRHSize]byte {
	var h [emu.GRHSize]byte
	ip := h[20:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 20+8+12+4)
	ip[8], ip[9] = 64, 17
	s, dd := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(ip[12:], s[:])
	copy(ip[16:], dd[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return &h
}

// ipv6Hdr builds the header area for IPv6: the IPv6 header itself.
func ipv6Hdr(src, dst string, flow uint32, tclass uint8) *[emu.GRHSize]byte {
	var h [emu.GRHSize]byte
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(tclass)<<20|flow)
	h[6], h[7] = 17, 64
	s, dd := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(h[8:], s[:])
	copy(h[24:], dd[:])
	return &h
}

// TestRDMAHeader covers ib_get_rdma_header_version (a valid IPv4 header
// with a good checksum at bytes 20..39 wins over a 0x60 first byte) and
// ib_get_gids_from_rdma_hdr.
func TestRDMAHeader(t *testing.T) {
	v4 := ipv4Hdr("10.0.0.2", "10.0.0.1")
	v6 := ipv6Hdr("fd00::2", "fd00::1", 0, 0)
	v6in4 := ipv4Hdr("10.0.0.2", "10.0.0.1")
	v6in4[0] = 0x60
	ihl6 := *v6in4
	ihl6[20] = 0x46
	badsum := *v6in4
	badsum[30] ^= 0xFF
	zero := &[emu.GRHSize]byte{}
	for _, c := range []struct {
		name string
		hdr  *[emu.GRHSize]byte
		want int
	}{
		{"IPv4", v4, 4}, {"IPv6", v6, 6}, {"0x60_with_valid_IPv4", v6in4, 4},
		{"IHL_6", &ihl6, 6}, {"0x60_bad_checksum", &badsum, 6}, {"neither", zero, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := emu.GetRDMAHeaderVersion(c.hdr); got != c.want {
				t.Errorf("version %d, want %d", got, c.want)
			}
		})
	}
	s, dd, err := emu.GetGIDsFromRDMAHdr(v4, emu.NetworkIPv4)
	if err != nil || s.String() != "::ffff:10.0.0.2" || dd.String() != "::ffff:10.0.0.1" {
		t.Errorf("IPv4 GIDs %v %v %v", s, dd, err)
	}
	s, dd, err = emu.GetGIDsFromRDMAHdr(v6, emu.NetworkIPv6)
	if err != nil || s.String() != "fd00::2" || dd.String() != "fd00::1" {
		t.Errorf("IPv6 GIDs %v %v %v", s, dd, err)
	}
	_, _, err = emu.GetGIDsFromRDMAHdr(v6, 9)
	wantErrno(t, "bad network type", err, unix.EINVAL)
}

// TestAHFromWC covers ib_init_ah_attr_from_wc (EPROTOTYPE on RoCE for a
// completion without IB_WC_GRH) and
// ib_create_ah_from_wc.
func TestAHFromWC(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	wc := &emu.WC{WCFlags: emu.WCGRH, SL: 0, PortNum: 1}
	a, err := d.InitAHAttrFromWC(1, wc, ipv4Hdr("10.0.0.2", "10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.GRH.DGID != emu.GIDFromAddr(netip.MustParseAddr("10.0.0.2")) || a.GRH.SGIDIndex != 1 ||
		a.GRH.HopLimit != 64 || a.DMAC != peerMAC || a.Type != ib.AHAttrTypeRoCE || a.AHFlags != ib.AHGRH {
		t.Fatalf("IPv4 reply AH %+v", a)
	}
	wc6 := &emu.WC{WCFlags: emu.WCGRH | emu.WCWithNetworkHdrType, NetworkHdrType: emu.NetworkIPv6}
	a, err = d.InitAHAttrFromWC(1, wc6, ipv6Hdr("fd00::2", "fd00::1", 0x12345, 0xB8))
	if err != nil {
		t.Fatal(err)
	}
	if a.GRH.SGIDIndex != 2 || a.GRH.FlowLabel != 0x12345 || a.GRH.TrafficClass != 0xB8 {
		t.Fatalf("IPv6 reply AH %+v", a)
	}
	t.Run("no_GRH_on_RoCE", func(t *testing.T) {
		_, err := d.InitAHAttrFromWC(1, &emu.WC{}, ipv4Hdr("10.0.0.2", "10.0.0.1"))
		wantErrno(t, "ib_init_ah_attr_from_wc without IB_WC_GRH", err, unix.EPROTOTYPE)
	})
	_, err = d.InitAHAttrFromWC(1, wc, ipv4Hdr("10.0.0.2", "10.9.9.9"))
	wantErrno(t, "not our GID", err, unix.ENOENT)
	_, err = d.InitAHAttrFromWC(1, wc, ipv4Hdr("10.0.0.99", "10.0.0.1"))
	wantErrno(t, "unresolvable sender", err, unix.EHOSTUNREACH)
	ah, err := pd.CreateAHFromWC(wc, ipv4Hdr("10.0.0.2", "10.0.0.1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if q := must[ib.AHAttr](t)(ah.Query()); q.DMAC != peerMAC {
		t.Fatalf("AH from WC %+v", q)
	}
	_, err = pd.CreateAHFromWC(&emu.WC{}, ipv4Hdr("10.0.0.2", "10.0.0.1"), 1)
	wantErrno(t, "create AH from WC without GRH", err, unix.EPROTOTYPE)
}

// rcPair is a device, PD, CQ and an RC QP in RTS.
func rcInRTS(t *testing.T, d *emu.Device, pd *emu.PD, scq, rcq *emu.CQ) *emu.QP {
	t.Helper()
	qp := must[*emu.QP](t)(pd.CreateQP(&emu.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	for _, s := range []struct {
		a qpstate.Attr
		m qpstate.AttrMask
	}{
		{qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1}, 0x39},
		{qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, AHAttr: roceAV("10.0.0.2"), DestQPNum: 9}, 0x129181},
		{qpstate.Attr{QPState: qpstate.StateRTS, Timeout: 14}, 0x12E01},
	} {
		a := s.a
		if err := qp.Modify(&a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return qp
}

// TestCQ covers ib_alloc_cq_any, ib_poll_cq, ib_req_notify_cq (SOLICITED,
// NEXT_COMP, REPORT_MISSED_EVENTS), overflow (IB_EVENT_CQ_ERR),
// rdma_set_cq_moderation, ib_destroy_cq and ib_destroy_cq_user.
func TestCQ(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	_, err := d.AllocCQAny(4, emu.PollWorkqueue)
	wantErrno(t, "workqueue poll context", err, unix.EOPNOTSUPP)
	var fired int
	var cqEvents []emu.EventType
	scq := must[*emu.CQ](t)(d.CreateCQ(emu.CQInitAttr{CQE: 2, CompHandler: func(*emu.CQ) { fired++ },
		EventHandler: func(ev emu.Event) { cqEvents = append(cqEvents, ev.Type) }}))
	rcq := must[*emu.CQ](t)(d.AllocCQAny(8, emu.PollDirect))
	if scq.CQE != 3 || rcq.CQE != 15 {
		t.Fatalf("cqe %d %d", scq.CQE, rcq.CQE)
	}
	wantErrno(t, "moderation", scq.SetModeration(16, 10), unix.EOPNOTSUPP)
	if n := scq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents); n != 0 {
		t.Fatalf("report missed events on an empty CQ = %d", n)
	}
	qp := rcInRTS(t, d.Device, pd, scq, rcq)
	addr, _ := d.Memory().Alloc(64)
	mr := must[*emu.MR](t)(pd.RegUserMR(addr, 64, addr, ib.AccessLocalWrite))
	sge := emu.SGE{Addr: addr, Length: 8, LKey: mr.LKey()}
	var wrs []emu.SendWR
	for i := range 5 {
		wrs = append(wrs, emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend, SGList: []emu.SGE{sge}})
	}
	if _, err := qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	err = qp.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
	wantErrno(t, "to ERR", err, 0)
	if fired != 1 {
		t.Fatalf("completion handler fired %d times, want 1 (NEXT_COMP disarms)", fired)
	}
	if len(cqEvents) == 0 || cqEvents[0] != emu.EventCQErr {
		t.Fatalf("CQ events %v, want IB_EVENT_CQ_ERR on overflow", cqEvents)
	}
	if n := scq.ReqNotify(emu.CQSolicited | emu.CQReportMissedEvents); n != 1 {
		t.Fatalf("report missed events with completions waiting = %d", n)
	}
	wc := make([]emu.WC, 8)
	if n := scq.Poll(wc[:2]); n != 2 || wc[0].WRID != 0 || wc[1].WRID != 1 || wc[0].Status != emu.WCWRFlushErr {
		t.Fatalf("poll 2: %d %+v", n, wc[:2])
	}
	if n := scq.Poll(wc); n != 1 || wc[0].WRID != 2 {
		t.Fatalf("poll rest: %d %+v (overflowed completions must be gone)", n, wc[0])
	}
	if n := scq.Poll(wc); n != 0 {
		t.Fatalf("poll empty = %d", n)
	}
	wantErrno(t, "destroy CQ in use", scq.Destroy(), unix.EBUSY)
	wantErrno(t, "destroy QP", qp.Destroy(), 0)
	wantErrno(t, "destroy CQ", scq.DestroyUser(&emu.UData{}), 0)
	wantErrno(t, "destroy CQ", rcq.Destroy(), 0)
}

// TestSRQVerbs covers ib_modify_srq, ib_query_srq, ib_post_srq_recv,
// ib_destroy_srq and ib_destroy_srq_user through the core.
func TestSRQVerbs(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	attr := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 3, MaxSGE: 2}}
	srq := must[*emu.SRQ](t)(pd.CreateSRQ(attr))
	if attr.Attr.MaxWR != 3 {
		t.Fatalf("max_wr %d", attr.Attr.MaxWR)
	}
	addr, _ := d.Memory().Alloc(64)
	sge := emu.SGE{Addr: addr, Length: 8}
	wrs := []emu.RecvWR{{WRID: 1, SGList: []emu.SGE{sge}}, {WRID: 2, SGList: []emu.SGE{sge, sge}},
		{WRID: 3}, {WRID: 4}}
	bad, err := srq.PostRecv(wrs)
	wantErrno(t, "post 4 into 3", err, unix.ENOMEM)
	if bad != 3 {
		t.Fatalf("bad %d", bad)
	}
	huge := emu.SGE{Addr: addr, Length: 1 << 31}
	wantErrno(t, "resize below contents", srq.Modify(&emu.SRQAttr{MaxWR: 1}, emu.SRQMaxWR), unix.EINVAL)
	wantErrno(t, "resize", srq.Modify(&emu.SRQAttr{MaxWR: 8}, emu.SRQMaxWR|emu.SRQLimit), 0)
	_, err = srq.PostRecv([]emu.RecvWR{{SGList: []emu.SGE{huge, huge}}})
	wantErrno(t, "more than 2^31 bytes", err, unix.EINVAL)
	q := must[emu.SRQAttr](t)(srq.Query())
	if q.MaxWR != 15 || q.MaxSGE != 2 || q.SRQLimit != 0 {
		t.Fatalf("query %+v", q)
	}
	wantErrno(t, "dealloc PD with SRQ", pd.DeallocUser(&emu.UData{}), unix.EBUSY)
	wantErrno(t, "destroy", srq.DestroyUser(&emu.UData{}), 0)
	srq2 := must[*emu.SRQ](t)(pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 1}}))
	wantErrno(t, "destroy", srq2.Destroy(), 0)
	wantErrno(t, "dealloc PD", pd.Dealloc(), 0)
}

// TestOpenQP covers ib_open_qp and ib_close_qp: rxe has no XRC, so no XRC
// domain can be allocated (EOPNOTSUPP) and opening or closing fails as
// the core says.
func TestOpenQP(t *testing.T) {
	d := newDevice(t)
	_, err := d.AllocXRCD()
	wantErrno(t, "alloc XRCD on rxe", err, unix.EOPNOTSUPP)
	_, err = emu.OpenQP(nil, emu.QPOpenAttr{QPNum: 17, QPType: qpstate.TypeXRCTgt})
	wantErrno(t, "open without a domain", err, unix.EINVAL)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	cq := must[*emu.CQ](t)(d.AllocCQAny(4, emu.PollDirect))
	qp := must[*emu.QP](t)(pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeRC}))
	wantErrno(t, "close a real QP", qp.Close(), unix.EINVAL)
	_, err = pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeXRCTgt})
	wantErrno(t, "create XRC_TGT on rxe", err, unix.EOPNOTSUPP)
}

// TestPostVerbs covers ib_post_send and ib_post_recv through the core:
// bad_wr indexes, per-state rules, the flush in ERR.
func TestPostVerbs(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	cq := must[*emu.CQ](t)(d.AllocCQAny(32, emu.PollDirect))
	qp := rcInRTS(t, d.Device, pd, cq, cq)
	addr, _ := d.Memory().Alloc(64)
	sge := emu.SGE{Addr: addr, Length: 8}
	bad, err := qp.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRSend, SGList: []emu.SGE{sge}},
		{WRID: 2, Opcode: emu.WRSend, SGList: []emu.SGE{sge, sge}}})
	wantErrno(t, "second WR with 2 SGEs", err, unix.EINVAL)
	if bad != 1 {
		t.Fatalf("bad %d", bad)
	}
	bad, err = qp.PostRecv([]emu.RecvWR{{WRID: 3, SGList: []emu.SGE{sge}}, {WRID: 4, SGList: []emu.SGE{sge, sge}}})
	wantErrno(t, "second recv with 2 SGEs", err, unix.EINVAL)
	if bad != 1 {
		t.Fatalf("bad %d", bad)
	}
	if err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState); err != nil {
		t.Fatal(err)
	}
	wc := make([]emu.WC, 8)
	n := cq.Poll(wc)
	if n != 2 || wc[0].WRID != 1 || wc[1].WRID != 3 || wc[1].Opcode != emu.WCRecv {
		t.Fatalf("flushed %d: %+v", n, wc[:n])
	}
}

// FuzzRDMAHeader feeds arbitrary 40-byte header areas to the header
// decoders: they never panic, the version is 0, 4 or 6, and a version-4
// area yields IPv4-mapped GIDs.
func FuzzRDMAHeader(f *testing.F) {
	f.Add(ipv4Hdr("10.0.0.2", "10.0.0.1")[:])
	f.Add(ipv6Hdr("fd00::2", "fd00::1", 7, 1)[:])
	f.Add(make([]byte, emu.GRHSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h [emu.GRHSize]byte
		copy(h[:], b)
		v := emu.GetRDMAHeaderVersion(&h)
		if v != 0 && v != 4 && v != 6 {
			t.Fatalf("version %d", v)
		}
		for _, nt := range []emu.NetworkType{emu.NetworkIB, emu.NetworkRoCEv1, emu.NetworkIPv4, emu.NetworkIPv6} {
			s, d, err := emu.GetGIDsFromRDMAHdr(&h, nt)
			if err != nil {
				t.Fatalf("%v: %v", nt, err)
			}
			if nt == emu.NetworkIPv4 && (!s.IsV4Mapped() || !d.IsV4Mapped()) {
				t.Fatalf("IPv4 GIDs %v %v not mapped", s, d)
			}
		}
	})
}
