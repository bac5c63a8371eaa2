package node

import (
	"context"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// modifyLog is an emu.Recorder that keeps the modifies it sees.
type modifyLog struct{ errnos []unix.Errno }

func (l *modifyLog) Modify(t qpstate.Type, cur, next qpstate.State, mask qpstate.AttrMask, errno unix.Errno) {
	l.errnos = append(l.errnos, errno)
}
func (l *modifyLog) Completion(emu.WCOpcode, emu.WCStatus) {}
func (l *modifyLog) Event(emu.EventType)                   {}
func (l *modifyLog) VerbFailed(string, unix.Errno)         {}

// A recorder set through Config.Rxe is the device's: the node keeps it when
// it fills in the device's configuration.
func TestRecorderSetThroughRxeReachesTheDevice(t *testing.T) {
	ea, _ := link.NewPipe(&link.PipeConfig{MTU: 1500})
	rec := &modifyLog{}
	n, err := New(context.Background(), Config{Link: ea, NoDAD: true, MAC: macA, Seed: 1,
		Rxe: func(c *rxe.Config) { c.Device.Recorder = rec }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Device().Recorder() != rec {
		t.Fatal("the device has not the recorder set through Rxe")
	}
	pd, err := n.Device().AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := n.Device().CreateCQ(emu.CQInitAttr{CQE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState)
	if len(rec.errnos) != 1 || rec.errnos[0] != unix.EINVAL {
		t.Errorf("recorded %v, want one EINVAL", rec.errnos)
	}
}
