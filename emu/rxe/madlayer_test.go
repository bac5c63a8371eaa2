package rxe

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestTakeMADLayer: the MAD layer's reserved slot goes to the first GSI
// QP after TakeMADLayer (QPN 1 on index 16), once; other QPs still start
// at 17; without a MAD layer there is nothing to take.
func TestTakeMADLayer(t *testing.T) {
	cases := []struct {
		name     string
		noMAD    bool
		takes    int
		takeErr  unix.Errno // of the last take
		gsiErr   unix.Errno
		firstRC  uint32
		gsiIndex uint32
	}{
		{"default device, no take", false, 0, 0, unix.EINVAL, 0x11, 0},
		{"take once", false, 1, 0, 0, 0x11, 16},
		{"take twice", false, 2, unix.EBUSY, 0, 0x11, 16},
		{"NoMADLayer", true, 1, unix.EINVAL, 0, 0x11, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.NoMADLayer = c.noMAD
			e := newEnvWith(t, cfg)
			var err error
			for range c.takes {
				err = e.r.TakeMADLayer()
			}
			if c.takes > 0 && !errnoIs(err, c.takeErr) {
				t.Fatalf("take: %v, want %v", err, c.takeErr)
			}
			gsi, err := e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeGSI, PortNum: 1,
				Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if !errnoIs(err, c.gsiErr) {
				t.Fatalf("create GSI: %v, want %v", err, c.gsiErr)
			}
			if err == nil {
				if gsi.QPNum() != 1 {
					t.Errorf("GSI QPN %d", gsi.QPNum())
				}
				e.r.lock()
				q := e.r.qps[1]
				e.r.unlock()
				if c.gsiIndex != 0 && (q == nil || q.idx != c.gsiIndex) {
					t.Errorf("GSI index %v, want %d", q, c.gsiIndex)
				}
				if _, err := e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeGSI, PortNum: 1,
					Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); !errors.Is(err, unix.EINVAL) {
					t.Errorf("second GSI: %v", err)
				}
			}
			rc, err := e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: qpstate.TypeRC,
				Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			// With NoMADLayer the GSI QP took index 16 the ordinary way.
			if rc.QPNum() != c.firstRC {
				t.Errorf("first RC QPN %#x, want %#x", rc.QPNum(), c.firstRC)
			}
		})
	}
}

func errnoIs(err error, e unix.Errno) bool {
	if e == 0 {
		return err == nil
	}
	return errors.Is(err, e)
}
