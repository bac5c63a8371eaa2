package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestTunedLimitsEnforced: the object limits Config.Tune sets are what
// Query reports and what creation obeys, as rxe's pools obey max_elem
// (__rxe_add_to_pool): the object past the limit fails with EINVAL, and
// destroying one makes room for one.
func TestTunedLimitsEnforced(t *testing.T) {
	const limit = 10
	cfg := testConfig()
	cfg.Tune = func(a *emu.DeviceAttr) {
		a.MaxQP, a.MaxMR, a.MaxCQ, a.MaxPD, a.MaxSRQ, a.MaxAH, a.MaxMW = limit, limit, limit, limit, limit, limit, limit
	}
	e := newEnvWith(t, cfg)
	if a := e.dev.Query(); a.MaxQP != limit || a.MaxMR != limit || a.MaxCQ != limit || a.MaxPD != limit ||
		a.MaxSRQ != limit || a.MaxAH != limit || a.MaxMW != limit {
		t.Fatalf("Query: %+v", a)
	}
	// The environment holds one PD (and its internal DMA MR), two CQs and
	// the MAD layer's QP already.
	kinds := []struct {
		name     string
		existing int
		create   func() (destroy func() error, err error)
	}{
		{"PD", 1, func() (func() error, error) {
			pd, err := e.dev.AllocPD(0)
			if err != nil {
				return nil, err
			}
			return pd.Dealloc, nil
		}},
		{"CQ", 2, func() (func() error, error) {
			cq, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: 1})
			if err != nil {
				return nil, err
			}
			return cq.Destroy, nil
		}},
		{"SRQ", 0, func() (func() error, error) {
			s, err := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 1, MaxSGE: 1}})
			if err != nil {
				return nil, err
			}
			return s.Destroy, nil
		}},
		{"QP", 1, func() (func() error, error) {
			qp, err := e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC,
				Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return nil, err
			}
			return qp.Destroy, nil
		}},
		{"MR", 1, func() (func() error, error) {
			mr, err := e.pd.AllocMR(emu.MRTypeMemReg, 1)
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		}},
		{"MW", 0, func() (func() error, error) {
			mw, err := e.pd.AllocMW(emu.MWType2)
			if err != nil {
				return nil, err
			}
			return mw.Dealloc, nil
		}},
		{"AH", 0, func() (func() error, error) {
			a := av()
			ah, err := e.pd.CreateAH(&a)
			if err != nil {
				return nil, err
			}
			return ah.Destroy, nil
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var destroy []func() error
			var err error
			for len(destroy) < 5*limit {
				var d func() error
				if d, err = k.create(); err != nil {
					break
				}
				destroy = append(destroy, d)
			}
			if got, want := len(destroy), limit-k.existing; got != want {
				t.Fatalf("created %d %ss next to %d, want %d (limit %d)", got, k.name, k.existing, want, limit)
			}
			wantErrno(t, k.name+" past the limit", err, unix.EINVAL)
			if err := destroy[0](); err != nil {
				t.Fatal(err)
			}
			d, err := k.create()
			if err != nil {
				t.Fatalf("%s after destroying one: %v", k.name, err)
			}
			destroy[0] = d
			for _, d := range destroy {
				if err := d(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
