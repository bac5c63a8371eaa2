package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestReregUserMR: ib_uverbs_rereg_mr's checks (no flags EINVAL, unknown
// flags EOPNOTSUPP, a range whose start and iova differ in the page offset
// EINVAL, ib_check_mr_access), then rxe_rereg_user_mr: a new range is
// EOPNOTSUPP, access beyond rxe's MR set too; the PD and the access
// change in place with the keys kept, the responder's rkey check follows
// them, and the PDs' use counts move with the MR. A refused rereg changes
// nothing.
func TestReregUserMR(t *testing.T) {
	e := newEnv(t)
	pd1, err := e.dev.AllocUserPD(nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := e.dev.Memory().Alloc(8192)
	mr, err := pd1.RegUserMR(addr, 8192, addr, ib.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	lkey, rkey := mr.LKey(), mr.RKey()
	for _, c := range []struct {
		name   string
		flags  emu.MRReregFlags
		pd     *emu.PD
		start  uint64
		iova   uint64
		access ib.AccessFlags
		errno  unix.Errno
	}{
		{"no flags", 0, nil, addr, addr, 0, unix.EINVAL},
		{"unknown flag", 8, nil, addr, addr, 0, unix.EOPNOTSUPP},
		{"page offsets differ", emu.MRReregTrans, nil, addr, addr + 8, 0, unix.EINVAL},
		{"new range", emu.MRReregTrans, nil, addr, addr + 4096, 0, unix.EOPNOTSUPP},
		{"remote write without local write", emu.MRReregAccess, nil, 0, 0, ib.AccessRemoteWrite, unix.EINVAL},
		{"undefined access", emu.MRReregAccess, nil, 0, 0, 1 << 30, unix.EINVAL},
		{"zero based: core yes, rxe no", emu.MRReregPD | emu.MRReregAccess, e.pd, 0, 0,
			ib.AccessLocalWrite | ib.AccessZeroBased, unix.EOPNOTSUPP},
		{"PD flag without a PD", emu.MRReregPD, nil, 0, 0, 0, unix.EINVAL},
	} {
		wantErrno(t, c.name, mr.ReregUser(c.flags, c.pd, c.start, 8192, c.iova, c.access), c.errno)
		if mr.PD != pd1 || mr.Access != ib.AccessLocalWrite || mrOf(mr).pd != pd1 || mrOf(mr).access != ib.AccessLocalWrite {
			t.Fatalf("%s: the refused rereg changed the MR: PD %p access %v", c.name, mr.PD, mr.Access)
		}
	}

	// The access: a remote write through the rkey needs REMOTE_WRITE.
	q1 := qpFor(t, e, pd1)
	if _, err := e.r.lookupRKey(qpOf(q1), rkey, ib.AccessRemoteWrite, addr, 8); err == nil {
		t.Fatal("remote write allowed before the rereg")
	}
	wantErrno(t, "rereg access", mr.ReregUser(emu.MRReregAccess, nil, 0, 0, 0,
		ib.AccessLocalWrite|ib.AccessRemoteWrite), 0)
	if mr.LKey() != lkey || mr.RKey() != rkey || mr.Access != ib.AccessLocalWrite|ib.AccessRemoteWrite {
		t.Fatalf("after rereg: lkey %#x rkey %#x access %v", mr.LKey(), mr.RKey(), mr.Access)
	}
	if a, err := e.r.lookupRKey(qpOf(q1), rkey, ib.AccessRemoteWrite, addr+16, 8); err != nil || a != addr+16 {
		t.Fatalf("remote write after the rereg: %#x %v", a, err)
	}

	// The PD: the MR leaves pd1 for e.pd; a QP of pd1 no longer reaches
	// it, one of e.pd does; pd1 is free to go once its QP is.
	wantErrno(t, "rereg PD", mr.ReregUser(emu.MRReregPD, e.pd, 0, 0, 0, 0), 0)
	if mr.PD != e.pd {
		t.Fatal("MR.PD did not move")
	}
	if _, err := e.r.lookupRKey(qpOf(q1), rkey, ib.AccessRemoteWrite, addr, 8); err == nil {
		t.Fatal("a QP of the old PD still reaches the MR")
	}
	q2 := qpFor(t, e, e.pd)
	if _, err := e.r.lookupRKey(qpOf(q2), rkey, ib.AccessRemoteWrite, addr, 8); err != nil {
		t.Fatalf("a QP of the new PD: %v", err)
	}
	wantErrno(t, "destroy the old PD's QP", q1.Destroy(), 0)
	wantErrno(t, "dealloc the old PD", pd1.DeallocUser(&emu.UData{}), 0)
	wantErrno(t, "dereg", mr.Dereg(), 0)
}

// qpFor creates an RC QP in pd on the env's CQs.
func qpFor(t *testing.T, e *env, pd *emu.PD) *emu.QP {
	t.Helper()
	qp, err := pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestMRReregFlagsString: the kernel's names, unknown bits in hex.
func TestMRReregFlagsString(t *testing.T) {
	for _, c := range []struct {
		f     emu.MRReregFlags
		s     string
		valid bool
	}{
		{0, "0", true},
		{emu.MRReregPD | emu.MRReregAccess, "IB_MR_REREG_PD|IB_MR_REREG_ACCESS", true},
		{emu.MRReregSupported | 0x10, "IB_MR_REREG_TRANS|IB_MR_REREG_PD|IB_MR_REREG_ACCESS|0x10", false},
	} {
		if c.f.String() != c.s || c.f.IsValid() != c.valid {
			t.Errorf("%#x: %q valid %v, want %q %v", uint32(c.f), c.f.String(), c.f.IsValid(), c.s, c.valid)
		}
	}
}

// TestReregAccessKeepsThePinnedProtection: the pages stay pinned as
// registered (ib_umem_check_rereg), so an access that lets the MR be
// written is EACCES on an MR registered without one, before the access is
// looked at further and with nothing changed; an MR pinned for writing
// may drop write access and take it back.
func TestReregAccessKeepsThePinnedProtection(t *testing.T) {
	e := newEnv(t)
	addr, _ := e.dev.Memory().Alloc(4096)
	ro, err := e.pd.RegUserMR(addr, 4096, addr, ib.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		access ib.AccessFlags
		errno  unix.Errno
	}{
		{"local write", ib.AccessLocalWrite, unix.EACCES},
		{"remote write", ib.AccessLocalWrite | ib.AccessRemoteWrite, unix.EACCES},
		{"remote atomic", ib.AccessLocalWrite | ib.AccessRemoteAtomic, unix.EACCES},
		{"MW bind", ib.AccessMWBind, unix.EACCES},
		{"writable and unsupported", ib.AccessLocalWrite | ib.AccessZeroBased, unix.EACCES},
	} {
		wantErrno(t, c.name, ro.ReregUser(emu.MRReregAccess, nil, 0, 0, 0, c.access), c.errno)
		if ro.Access != ib.AccessRemoteRead || mrOf(ro).access != ib.AccessRemoteRead {
			t.Fatalf("%s: the refused rereg changed the access to %v", c.name, mrOf(ro).access)
		}
	}
	wantErrno(t, "read-only to none", ro.ReregUser(emu.MRReregAccess, nil, 0, 0, 0, 0), 0)
	wantErrno(t, "PD only", ro.ReregUser(emu.MRReregPD, e.pd, 0, 0, 0, ib.AccessLocalWrite), 0)

	rw, err := e.pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "writable to none", rw.ReregUser(emu.MRReregAccess, nil, 0, 0, 0, 0), 0)
	wantErrno(t, "back to writable", rw.ReregUser(emu.MRReregAccess, nil, 0, 0, 0, ib.AccessLocalWrite|ib.AccessRemoteWrite), 0)
	if mrOf(rw).access != ib.AccessLocalWrite|ib.AccessRemoteWrite {
		t.Fatalf("access %v", mrOf(rw).access)
	}
}
