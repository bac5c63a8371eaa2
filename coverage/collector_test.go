package coverage_test

import (
	"testing"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// A collector's profile is one run of all its devices, their cells summed.
func TestCollectorProfileIsOneRunOfAllDevices(t *testing.T) {
	c := coverage.NewCollector()
	if c.Recorder("rxe0") != c.Recorder("rxe0") {
		t.Fatal("Recorder made two recorders for one device")
	}
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1,
		Recorders: [2]emu.Recorder{c.Recorder("rxe0"), c.Recorder("rxe1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, d := range []*emu.Device{lb.A.Dev, lb.B.Dev} {
		pd, err := d.AllocPD(0)
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(emu.CQInitAttr{CQE: 4})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeUC,
			Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateSQE}, qpstate.AttrState); err == nil {
			t.Fatal("RESET->SQE accepted")
		}
		if err := c.ReadCounters(d); err != nil {
			t.Fatal(err)
		}
	}
	p := c.Profile()
	if p.Runs != 1 || len(p.Devices) != 2 {
		t.Errorf("runs %d devices %v, want 1 run of 2 devices", p.Runs, p.Devices)
	}
	k := coverage.ModifyKey{Type: qpstate.TypeUC, Cur: qpstate.StateReset, Next: qpstate.StateSQE,
		Mask: qpstate.AttrState, Errno: unix.EINVAL}
	if p.Modify[k] != 2 || len(p.Modify) != 1 {
		t.Errorf("modify cells %v, want %+v twice", p.Modify, k)
	}
	other, err := workload.NewLoopback(workload.LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := coverage.NewCollector().ReadCounters(other.A.Dev); err == nil {
		t.Error("ReadCounters of a device without a recorder succeeded")
	}
}
