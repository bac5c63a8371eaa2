package rxe

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestVerbsObjects holds the edge cases of verbs objects (CQ, QP, MR, MW,
// SRQ, multicast, AH, destroy order, post_send checks) that need a device.
func TestVerbsObjects(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"CQ_sizes", func(t *testing.T, e *env) {
			for _, c := range []struct {
				cqe, want int
				errno     unix.Errno
			}{{0, 0, unix.EINVAL}, {32768, 0, unix.EINVAL}, {-1, 0, unix.EINVAL}, {100, 127, 0},
				{32767, 32767, 0}, {1, 1, 0}, {2, 3, 0}, {128, 255, 0}} {
				cq, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: c.cqe})
				wantErrno(t, "create CQ", err, c.errno)
				if err == nil && cq.CQE != c.want {
					t.Errorf("cqe %d -> %d, want %d", c.cqe, cq.CQE, c.want)
				}
			}
			_, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: 4, Flags: 1})
			wantErrno(t, "create flags", err, unix.EOPNOTSUPP)
		}},
		{"QP_create_errors", func(t *testing.T, e *env) {
			base := func() *emu.QPInitAttr {
				return &emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC,
					Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
			}
			for _, c := range []struct {
				name  string
				mut   func(*emu.QPInitAttr)
				errno unix.Errno
			}{
				{"max_send_wr", func(a *emu.QPInitAttr) { a.Cap.MaxSendWR = 1048577 }, unix.EINVAL},
				{"max_send_sge", func(a *emu.QPInitAttr) { a.Cap.MaxSendSGE = 33 }, unix.EINVAL},
				{"max_inline", func(a *emu.QPInitAttr) { a.Cap.MaxInlineData = 513 }, unix.EINVAL},
				{"XRC_TGT", func(a *emu.QPInitAttr) { a.QPType = qpstate.TypeXRCTgt }, unix.EOPNOTSUPP},
				{"create_flags", func(a *emu.QPInitAttr) { a.CreateFlags = 2 }, unix.EOPNOTSUPP},
				{"no recv CQ", func(a *emu.QPInitAttr) { a.RecvCQ = nil }, unix.EINVAL},
				{"max_recv_wr", func(a *emu.QPInitAttr) { a.Cap.MaxRecvWR = 1048577 }, unix.EINVAL},
				{"max_recv_sge", func(a *emu.QPInitAttr) { a.Cap.MaxRecvSGE = 33 }, unix.EINVAL},
				{"second GSI", func(a *emu.QPInitAttr) { a.QPType = qpstate.TypeGSI; a.PortNum = 1 }, unix.EINVAL},
				{"ok", func(a *emu.QPInitAttr) {}, 0},
			} {
				a := base()
				c.mut(a)
				_, err := e.pd.CreateQP(a)
				wantErrno(t, c.name, err, c.errno)
			}
		}},
		{"QP_capacity_rounding", func(t *testing.T, e *env) {
			for _, c := range []struct{ in, want qpstate.Cap }{
				{qpstate.Cap{MaxSendWR: 100, MaxSendSGE: 1, MaxRecvWR: 100, MaxRecvSGE: 3},
					qpstate.Cap{MaxSendWR: 127, MaxSendSGE: 1, MaxInlineData: 16, MaxRecvWR: 127, MaxRecvSGE: 3}},
				{qpstate.Cap{MaxSendWR: 1, MaxInlineData: 512, MaxRecvWR: 1},
					qpstate.Cap{MaxSendWR: 1, MaxSendSGE: 32, MaxInlineData: 512, MaxRecvWR: 1}},
			} {
				a := &emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC, Cap: c.in}
				if _, err := e.pd.CreateQP(a); err != nil {
					t.Fatal(err)
				}
				if a.Cap != c.want {
					t.Errorf("caps %+v -> %+v, want %+v", c.in, a.Cap, c.want)
				}
			}
		}},
		{"reg_mr_access", func(t *testing.T, e *env) {
			addr, _ := e.dev.Memory().Alloc(4096)
			for _, c := range []struct {
				access ib.AccessFlags
				errno  unix.Errno
			}{
				{ib.AccessRemoteWrite, unix.EINVAL},
				{ib.AccessRemoteAtomic, unix.EINVAL},
				{ib.AccessLocalWrite | ib.AccessZeroBased, unix.EOPNOTSUPP},
				{ib.AccessLocalWrite | ib.AccessOnDemand, 0}, // rxe 6.15 on; NoODP: TestODPRegister
				{ib.AccessLocalWrite | ib.AccessHugeTLB, unix.EOPNOTSUPP},
				{1 << 12, unix.EINVAL},
				{ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessFlushGlobal, 0},
			} {
				_, err := e.pd.RegUserMR(addr, 4096, addr, c.access)
				wantErrno(t, "reg_mr "+c.access.String(), err, c.errno)
			}
			_, err := e.pd.RegUserMR(addr, 8192, addr, ib.AccessLocalWrite)
			wantErrno(t, "reg_mr beyond memory", err, unix.EFAULT)
		}},
		{"reg_mr_range", func(t *testing.T, e *env) {
			// ib_umem_get: a range that wraps or rounds up past the top,
			// or that touches no page, is EINVAL before any pinning.
			addr, _ := e.dev.Memory().Alloc(4096)
			for _, c := range []struct {
				start, length uint64
				errno         unix.Errno
			}{
				{addr, 0, unix.EINVAL},
				{addr + 100, 0, 0}, // touches the page holding addr+100
				{addr, 1, 0},
				{^uint64(0) - 4095, 4096, unix.EINVAL},
				{^uint64(0) - 4094, 4095, unix.EINVAL}, // ends at the top byte: rounds up to 0
				{^uint64(0) - 8191, 4096, unix.EFAULT}, // ends at the top page: fits, not there
				{1 << 63, 1 << 63, unix.EINVAL},
				{addr, 1 << 62, unix.EINVAL},      // 2^50 pages: npages > UINT_MAX
				{addr, 1<<44 - 4096, unix.EFAULT}, // 2^32-1 pages: fits, not there
				{4096, 1 << 44, unix.EINVAL},      // 2^32 pages
			} {
				_, err := e.pd.RegUserMR(c.start, c.length, c.start, ib.AccessLocalWrite)
				wantErrno(t, fmt.Sprintf("reg_mr %#x+%#x", c.start, c.length), err, c.errno)
			}
			// FLUSH_PERSISTENT is refused once the pages are pinned: an
			// unpinnable range is EFAULT first.
			_, err := e.pd.RegUserMR(addr, 8192, addr, ib.AccessLocalWrite|ib.AccessFlushPersistent)
			wantErrno(t, "reg_mr persistent beyond memory", err, unix.EFAULT)
		}},
		{"reg_mr_checks_the_space", func(t *testing.T, e *env) {
			// A space that can tell what is mapped (a client process) is
			// asked about whole pages, writable when the access lets the
			// MR be written (ib_access_writable).
			sp := &checkSpace{Space: e.dev.Memory()}
			pd, err := e.dev.AllocUserPD(sp)
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := e.dev.Memory().Alloc(8192)
			for _, c := range []struct {
				start, length uint64
				access        ib.AccessFlags
				want          checkCall
			}{
				{addr + 10, 100, 0, checkCall{addr, 4096, false}},
				{addr + 4000, 200, ib.AccessRemoteRead, checkCall{addr, 8192, false}},
				{addr, 4096, ib.AccessLocalWrite, checkCall{addr, 4096, true}},
				{addr, 4096, ib.AccessRemoteWrite | ib.AccessLocalWrite, checkCall{addr, 4096, true}},
				{addr, 4096, ib.AccessRemoteAtomic | ib.AccessLocalWrite, checkCall{addr, 4096, true}},
				{addr, 4096, ib.AccessMWBind, checkCall{addr, 4096, true}},
				{addr + 4095, 0, 0, checkCall{addr, 4096, false}},
			} {
				sp.calls = nil
				if _, err := pd.RegUserMR(c.start, c.length, c.start, c.access); err != nil {
					t.Errorf("reg_mr %#x+%d %v: %v", c.start, c.length, c.access, err)
				}
				if len(sp.calls) != 1 || sp.calls[0] != c.want {
					t.Errorf("reg_mr %#x+%d %v: checks %+v, want %+v", c.start, c.length, c.access, sp.calls, c.want)
				}
			}
			sp.err = fmt.Errorf("not writable: %w", unix.EFAULT)
			_, err = pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite)
			wantErrno(t, "reg_mr on a refused range", err, unix.EFAULT)
		}},
		{"reg_mr_charges_pinned_pages", func(t *testing.T, e *env) {
			// A space whose owner is charged for pinned pages (a client
			// process's RLIMIT_MEMLOCK, ib_umem_get) is charged the pages
			// the range touches before they are pinned; a refused charge
			// is the MR's errno, a failed pin and a deregistration give
			// the pages back.
			sp := &chargeSpace{checkSpace: checkSpace{Space: e.dev.Memory()}, limit: 3}
			pd, err := e.dev.AllocUserPD(sp)
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := e.dev.Memory().Alloc(4 * 4096)
			mr, err := pd.RegUserMR(addr+100, 8000, addr+100, ib.AccessLocalWrite) // two pages
			if err != nil {
				t.Fatal(err)
			}
			if sp.pinned != 2 {
				t.Fatalf("%d pages charged for an MR on 2", sp.pinned)
			}
			_, err = pd.RegUserMR(addr, 8192, addr, ib.AccessLocalWrite)
			wantErrno(t, "reg_mr past the limit", err, unix.ENOMEM)
			sp.err = fmt.Errorf("not there: %w", unix.EFAULT)
			_, err = pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite)
			wantErrno(t, "reg_mr of a range not there", err, unix.EFAULT)
			sp.err = nil
			if sp.pinned != 2 {
				t.Fatalf("%d pages charged after two refused MRs, want 2", sp.pinned)
			}
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			if sp.pinned != 0 {
				t.Fatalf("%d pages charged after the deregistration", sp.pinned)
			}
			if _, err := pd.RegUserMR(addr, 3*4096, addr, ib.AccessLocalWrite); err != nil {
				t.Fatalf("reg_mr within the limit: %v", err)
			}
		}},
		{"dereg_MR_with_bound_MW", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			bind, mw, mr, _ := e.bindType2(1, emu.SendSignaled, 1024, ib.AccessRemoteWrite)
			if _, err := qp.PostSend([]emu.SendWR{bind}); err != nil {
				t.Fatal(err)
			}
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCSuccess}}) {
				t.Fatalf("bind completions %v", got)
			}
			wantErrno(t, "dereg with bound MW", mr.Dereg(), unix.EINVAL)
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
			wantErrno(t, "dereg after dealloc", mr.Dereg(), 0)
		}},
		{"dereg_after_invalidate", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			bind, _, mr, _ := e.bindType2(1, 0, 64, ib.AccessRemoteRead)
			newKey := bind.Key
			qp.PostSend([]emu.SendWR{bind})
			wantErrno(t, "dereg with bound MW", mr.Dereg(), unix.EINVAL)
			qp.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRLocalInv, SendFlags: emu.SendSignaled, InvalidateRKey: newKey}})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{2, emu.WCSuccess}}) {
				t.Fatalf("completions %v", got)
			}
			wantErrno(t, "dereg after invalidate", mr.Dereg(), 0)
		}},
		{"LOCAL_INV_user_MR", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			sge, mr := e.buf(64)
			qp.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRLocalInv, InvalidateRKey: mr.RKey()}, send(2, sge, 0)})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCLocQPOpErr}, {2, emu.WCWRFlushErr}}) {
				t.Fatalf("completions %v", got)
			}
			if s := e.state(qp); s != qpstate.StateErr {
				t.Fatalf("state %v", s)
			}
		}},
		{"REG_MR_key_changes_index", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			mr, err := e.pd.AllocMR(emu.MRTypeMemReg, 4)
			if err != nil {
				t.Fatal(err)
			}
			qp.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRegMR, MR: mr, Key: mr.RKey() + 0x100, Access: ib.AccessLocalWrite}})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCLocQPOpErr}}) {
				t.Fatalf("completions %v", got)
			}
		}},
		{"REG_MR_on_valid_MR", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			mr, _ := e.pd.AllocMR(emu.MRTypeMemReg, 4)
			addr, _ := e.dev.Memory().Alloc(2 * dma.PageSize)
			sg := []dma.Scatterlist{{Page: dma.PageOf(addr), Length: 2 * dma.PageSize}}
			e.dev.DMA().MapSG(sg, dma.Bidirectional)
			if n, err := mr.MapSG(sg, dma.PageSize); n != 1 || err != nil {
				t.Fatalf("map_mr_sg = %d, %v", n, err)
			}
			kverbs.UpdateFastRegKey(mr, 0x42)
			reg := emu.SendWR{WRID: 1, Opcode: emu.WRRegMR, SendFlags: emu.SendSignaled, MR: mr, Key: mr.RKey(),
				Access: ib.AccessLocalWrite | ib.AccessRemoteWrite}
			qp.PostSend([]emu.SendWR{reg})
			reg.WRID = 2
			qp.PostSend([]emu.SendWR{reg})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCSuccess}, {2, emu.WCLocQPOpErr}}) {
				t.Fatalf("completions %v", got)
			}
			if mr.LKey()&0xFF != 0x42 || mr.Access != ib.AccessLocalWrite|ib.AccessRemoteWrite || mr.IOVA != addr {
				t.Fatalf("MR after REG_MR: %v access %v iova %#x", mr, mr.Access, mr.IOVA)
			}
		}},
		{"bind_type2_twice", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			b, _, _, _ := e.bindType2(1, emu.SendSignaled, 64, ib.AccessRemoteWrite)
			qp.PostSend([]emu.SendWR{b})
			b.WRID = 2
			qp.PostSend([]emu.SendWR{b})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCSuccess}, {2, emu.WCMWBindErr}}) {
				t.Fatalf("completions %v", got)
			}
			if s := e.state(qp); s != qpstate.StateErr {
				t.Fatalf("state %v", s)
			}
		}},
		{"LOCAL_INV_type1_MW", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			mw, _ := e.pd.AllocMW(emu.MWType1)
			qp.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRLocalInv, InvalidateRKey: mw.RKey()}})
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCLocQPOpErr}}) {
				t.Fatalf("completions %v", got)
			}
		}},
		{"type2_MW_bound_by_another_QP", func(t *testing.T, e *env) {
			a, b := e.qp(qpstate.TypeRC, nil), e.qp(qpstate.TypeRC, nil)
			e.toRTS(a)
			e.toRTS(b)
			bind, mw, _, sge := e.bindType2(0, 0, 256, ib.AccessRemoteWrite)
			a.PostSend([]emu.SendWR{bind})
			e.r.lock()
			defer e.r.unlock()
			if _, err := e.r.lookupRKey(qpOf(b), mw.RKey(), ib.AccessRemoteWrite, sge.Addr, 8); err == nil {
				t.Fatal("QP b used a type-2 MW bound by QP a (want an access error: NAK 0x62)")
			}
			got, err := e.r.lookupRKey(qpOf(a), mw.RKey(), ib.AccessRemoteWrite, sge.Addr+8, 8)
			if err != nil || got != sge.Addr+8 {
				t.Fatalf("bound QP: %#x, %v", got, err)
			}
			if _, err := e.r.lookupRKey(qpOf(a), mw.RKey(), ib.AccessRemoteWrite, sge.Addr+250, 8); err == nil {
				t.Fatal("access past the window accepted")
			}
			if _, err := e.r.lookupRKey(qpOf(a), mw.RKey(), ib.AccessRemoteRead, sge.Addr, 8); err == nil {
				t.Fatal("REMOTE_READ through a write-only window accepted")
			}
		}},
		{"SRQ_errors", func(t *testing.T, e *env) {
			for _, c := range []struct {
				attr  emu.SRQAttr
				typ   emu.SRQType
				errno unix.Errno
			}{{emu.SRQAttr{MaxWR: 0, MaxSGE: 1}, emu.SRQBasic, unix.EINVAL},
				{emu.SRQAttr{MaxWR: 4, MaxSGE: 28}, emu.SRQBasic, unix.EINVAL},
				{emu.SRQAttr{MaxWR: 1048577, MaxSGE: 1}, emu.SRQBasic, unix.EINVAL},
				{emu.SRQAttr{MaxWR: 4, MaxSGE: 1}, emu.SRQXRC, unix.EOPNOTSUPP}} {
				_, err := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: c.attr, Type: c.typ})
				wantErrno(t, "create SRQ", err, c.errno)
			}
			attr := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 10, MaxSGE: 0}}
			srq, err := e.pd.CreateSRQ(attr)
			if err != nil || attr.Attr.MaxWR != 15 || attr.Attr.MaxSGE != 1 {
				t.Fatalf("create SRQ 10/0: %v, got %+v", err, attr.Attr)
			}
			wantErrno(t, "limit above capacity", srq.Modify(&emu.SRQAttr{SRQLimit: 16}, emu.SRQLimit), unix.EINVAL)
			wantErrno(t, "arm limit 8", srq.Modify(&emu.SRQAttr{SRQLimit: 8}, emu.SRQLimit), 0)
			wantErrno(t, "max_wr below armed limit", srq.Modify(&emu.SRQAttr{MaxWR: 7}, emu.SRQMaxWR), unix.EINVAL)
			wantErrno(t, "max_wr 0", srq.Modify(&emu.SRQAttr{MaxWR: 0}, emu.SRQMaxWR), unix.EINVAL)
			a := &emu.SRQAttr{MaxWR: 40}
			wantErrno(t, "resize", srq.Modify(a, emu.SRQMaxWR), 0)
			if q, _ := srq.Query(); q.MaxWR != 63 || q.SRQLimit != 8 || q.MaxSGE != 1 {
				t.Fatalf("query %+v", q)
			}
			sge, _ := e.buf(8)
			_, err = srq.PostRecv([]emu.RecvWR{{SGList: []emu.SGE{sge, sge}}})
			wantErrno(t, "post 2 SGEs on max_sge 1", err, unix.EINVAL)
		}},
		{"SRQ_limit_event", func(t *testing.T, e *env) {
			var events []emu.EventType
			srq, _ := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 4},
				EventHandler: func(ev emu.Event) { events = append(events, ev.Type) }})
			sge, _ := e.buf(8)
			for i := range 5 {
				if _, err := srq.PostRecv([]emu.RecvWR{recv(uint64(i), sge)}); err != nil {
					t.Fatal(err)
				}
			}
			take := func() {
				e.r.lock()
				e.r.takeSRQ(srqOf(srq))
				e.r.unlock()
			}
			take()
			if len(events) != 0 {
				t.Fatalf("event after the first receive (4 left, limit 4): %v", events)
			}
			take()
			if !equal(events, []emu.EventType{emu.EventSRQLimitReached}) {
				t.Fatalf("events %v", events)
			}
			if q, _ := srq.Query(); q.SRQLimit != 0 {
				t.Fatalf("srq_limit %d after the event", q.SRQLimit)
			}
			take()
			if len(events) != 1 {
				t.Fatalf("events %v after disarm", events)
			}
		}},
		{"multicast_rules", func(t *testing.T, e *env) {
			mgid := emu.GIDFromAddr(netip.MustParseAddr("ff0e::1"))
			rc := e.qp(qpstate.TypeRC, nil)
			wantErrno(t, "attach RC", rc.AttachMcast(mgid, 0), unix.EINVAL)
			ud := e.qp(qpstate.TypeUD, nil)
			wantErrno(t, "unicast GID", ud.AttachMcast(emu.GIDFromAddr(netip.MustParseAddr("10.0.0.9")), 0), unix.EINVAL)
			wantErrno(t, "IPv4 multicast GID", ud.AttachMcast(emu.GIDFromAddr(netip.MustParseAddr("239.1.1.1")), 0), 0)
			wantErrno(t, "detach non-member", ud.DetachMcast(mgid, 0), unix.EINVAL)
			qps := []*emu.QP{ud}
			for range 55 {
				qps = append(qps, e.qp(qpstate.TypeUD, nil))
			}
			for i, q := range qps {
				wantErrno(t, "attach", q.AttachMcast(mgid, 0), 0)
				if i == 0 {
					wantErrno(t, "attach twice", q.AttachMcast(mgid, 0), 0)
				}
			}
			extra := e.qp(qpstate.TypeUD, nil)
			wantErrno(t, "57th QP", extra.AttachMcast(mgid, 0), unix.ENOMEM)
			wantErrno(t, "detach", ud.DetachMcast(mgid, 0), 0)
			wantErrno(t, "57th QP after a detach", extra.AttachMcast(mgid, 0), 0)
			e.r.lock()
			n := len(e.r.members(mgid))
			e.r.unlock()
			if n != 56 {
				t.Fatalf("%d members", n)
			}
		}},
		{"destroy_busy", func(t *testing.T, e *env) {
			ud := e.qp(qpstate.TypeUD, nil)
			mgid := emu.GIDFromAddr(netip.MustParseAddr("ff0e::2"))
			ud.AttachMcast(mgid, 0)
			wantErrno(t, "destroy attached QP", ud.Destroy(), unix.EBUSY)
			wantErrno(t, "destroy CQ used by a QP", e.scq.Destroy(), unix.EBUSY)
			srq, _ := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 4, MaxSGE: 1}})
			sq := e.qp(qpstate.TypeRC, srq)
			wantErrno(t, "destroy SRQ used by a QP", srq.Destroy(), unix.EBUSY)
			_, mr := e.buf(64)
			wantErrno(t, "dealloc user PD with an MR", e.pd.DeallocUser(&emu.UData{}), unix.EBUSY)
			// Tear down in order: each destroy then succeeds.
			wantErrno(t, "detach", ud.DetachMcast(mgid, 0), 0)
			wantErrno(t, "destroy QP", ud.Destroy(), 0)
			wantErrno(t, "destroy SRQ QP", sq.Destroy(), 0)
			wantErrno(t, "destroy SRQ", srq.Destroy(), 0)
			wantErrno(t, "destroy CQ", e.scq.Destroy(), 0)
			wantErrno(t, "dereg MR", mr.Dereg(), 0)
			wantErrno(t, "dealloc PD", e.pd.DeallocUser(&emu.UData{}), 0)
		}},
		{"AH_without_GRH", func(t *testing.T, e *env) {
			a := av()
			a.AHFlags = 0
			_, err := e.pd.CreateAH(&a)
			wantErrno(t, "create AH without GRH", err, unix.EINVAL)
		}},
		{"post_send_errors", func(t *testing.T, e *env) {
			rc := e.qp(qpstate.TypeRC, nil)
			e.toRTS(rc)
			sge, _ := e.buf(1024)
			four := sge
			four.Length = 4
			eight := sge
			eight.Length = 8
			big := sge
			big.Length = 600
			for _, c := range []struct {
				name string
				wr   emu.SendWR
			}{
				{"atomic 4-byte SGE", emu.SendWR{Opcode: emu.WRAtomicFetchAndAdd, SGList: []emu.SGE{four}, RemoteAddr: 0x1000}},
				{"atomic at 0x1004", emu.SendWR{Opcode: emu.WRAtomicCmpAndSwp, SGList: []emu.SGE{eight}, RemoteAddr: 0x1004}},
				{"inline 600", emu.SendWR{Opcode: emu.WRSend, SendFlags: emu.SendInline, SGList: []emu.SGE{big}}},
				{"inline READ", emu.SendWR{Opcode: emu.WRRDMARead, SendFlags: emu.SendInline, SGList: []emu.SGE{eight}}},
				{"too many SGEs", emu.SendWR{Opcode: emu.WRSend, SGList: make([]emu.SGE, 5)}},
				{"unknown opcode", emu.SendWR{Opcode: emu.WRLSO}},
			} {
				bad, err := rc.PostSend([]emu.SendWR{send(1, eight, 0), c.wr})
				wantErrno(t, c.name, err, unix.EINVAL)
				if bad != 1 {
					t.Errorf("%s: bad %d, want 1", c.name, bad)
				}
			}
			ud := e.qp(qpstate.TypeUD, nil)
			e.toRTS(ud)
			_, err := ud.PostSend([]emu.SendWR{{Opcode: emu.WRSendWithInv, SGList: []emu.SGE{eight}}})
			wantErrno(t, "UD SEND_WITH_INV", err, unix.EINVAL)
			_, err = ud.PostSend([]emu.SendWR{{Opcode: emu.WRRDMAWrite, SGList: []emu.SGE{eight}}})
			wantErrno(t, "UD RDMA_WRITE", err, unix.EINVAL)
			// 6 earlier WRs are posted (one per case above); fill to 31.
			wrs := make([]emu.SendWR, 30)
			for i := range wrs {
				wrs[i] = send(uint64(100+i), eight, 0)
			}
			bad, err := rc.PostSend(wrs)
			wantErrno(t, "SQ full", err, unix.ENOMEM)
			if bad != 25 || len(qpOf(rc).sq) != 31 {
				t.Fatalf("bad %d, %d queued; want 25 and a full queue of 31", bad, len(qpOf(rc).sq))
			}
		}},
		{"rxe_active_mtu", func(t *testing.T, e *env) {
			for _, c := range []struct {
				mtu  int
				want ib.MTU
			}{{1500, ib.MTU1024}, {2100, ib.MTU1024}, {2200, ib.MTU2048},
				{4176, ib.MTU4096}, {9000, ib.MTU4096}, {300, ib.MTU256}} {
				cfg := testConfig()
				cfg.Device.NetDev.MTU = c.mtu
				d, _ := New(cfg)
				pa, _ := d.QueryPort(1)
				if pa.ActiveMTU != c.want {
					t.Errorf("netdev MTU %d: active_mtu %v, want %v", c.mtu, pa.ActiveMTU, c.want)
				}
			}
		}},
		{"query_pkey", func(t *testing.T, e *env) {
			p, err := e.dev.QueryPKey(1, 0)
			if err != nil || p != 0xFFFF {
				t.Fatalf("pkey[0] = %#x, %v", p, err)
			}
			_, err = e.dev.QueryPKey(1, 1)
			wantErrno(t, "pkey[1]", err, unix.EINVAL)
			_, err = e.dev.QueryPKey(2, 0)
			wantErrno(t, "port 2", err, unix.EINVAL)
		}},
		{"check_mr_status", func(t *testing.T, e *env) {
			_, mr := e.buf(64)
			_, err := mr.CheckStatus(emu.MRCheckSigStatus)
			wantErrno(t, "ib_check_mr_status", err, unix.EOPNOTSUPP)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t)) })
	}
}

// BenchmarkPostSendAckPoll measures the send-side verbs path without a
// transport: post a signaled SEND, acknowledge it, poll its completion.
func BenchmarkPostSendAckPoll(b *testing.B) {
	e := newEnv(b)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toRTS(qp)
	sge, _ := e.buf(64)
	wrs := []emu.SendWR{send(1, sge, emu.SendSignaled)}
	wc := make([]emu.WC, 1)
	q := qpOf(qp)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		e.r.Ack(qp.QPNum(), q.reqPSN-1)
		if e.scq.Poll(wc) != 1 || wc[0].Status != emu.WCSuccess {
			b.Fatal("no completion")
		}
	}
}

// TestTunedAttributes checks Config.Tune: an older kernel's limits (before
// about 5.15: max_qp_wr 0x4000, max_ah 100) change what the device reports and
// what it accepts.
func TestTunedAttributes(t *testing.T) {
	cfg := testConfig()
	cfg.Tune = func(a *emu.DeviceAttr) { a.MaxQPWR, a.MaxSRQWR, a.MaxAH, a.VendorID = 0x4000, 0x4000, 2, 0 }
	e := newEnvWith(t, cfg)
	if a := e.dev.Query(); a.MaxQPWR != 0x4000 || a.VendorID != 0 || a.NodeGUID != 0x505400fffe123456 {
		t.Fatalf("attrs %+v", a)
	}
	_, err := e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 0x4001}})
	wantErrno(t, "max_send_wr above the tuned limit", err, unix.EINVAL)
	_, err = e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 0x4001}})
	wantErrno(t, "SRQ above the tuned limit", err, unix.EINVAL)
	for i, want := range []unix.Errno{0, 0, unix.EINVAL} {
		a := av()
		_, err := e.pd.CreateAH(&a)
		wantErrno(t, fmt.Sprintf("AH %d of max 2", i+1), err, want)
	}
}

// checkCall is one CheckRange call.
type checkCall struct {
	addr, length uint64
	write        bool
}

// checkSpace is a dma.Space that records the ranges asked of it and
// answers err.
type checkSpace struct {
	dma.Space
	calls []checkCall
	err   error
}

func (s *checkSpace) CheckRange(addr, length uint64, write bool) error {
	s.calls = append(s.calls, checkCall{addr, length, write})
	return s.err
}

// chargeSpace is a checkSpace whose owner may pin limit pages
// (dma.Charger), ENOMEM beyond.
type chargeSpace struct {
	checkSpace
	limit, pinned uint64
}

func (s *chargeSpace) ChargePinned(npages uint64) (func(), error) {
	if s.pinned+npages > s.limit {
		return nil, fmt.Errorf("%d pinned, %d more: %w", s.pinned, npages, unix.ENOMEM)
	}
	s.pinned += npages
	return func() { s.pinned -= npages }, nil
}
