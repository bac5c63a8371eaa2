package nldev

import (
	"reflect"
	"testing"
)

// FuzzServe: any packet a client sends gets well-formed replies (every
// message's length within its packet, each carrying the client's port
// id), never a panic, and leaves the Source's objects as they were (a
// request changes the device list only through NewLink and DelLink).
func FuzzServe(f *testing.F) {
	for op := uint16(0); op <= NumOps; op++ {
		f.Add(request(op, flagRequest|flagDump, 1), false)
		f.Add(request(op, flagRequest|flagAck, 2, AttrDevIndex, uint32(0), AttrPortIndex, uint32(1)), true)
	}
	f.Add(request(CmdResQPGet, flagRequest, 3, AttrDevIndex, uint32(0), AttrResLQPN, uint32(17)), false)
	f.Add(request(CmdGetChardev, flagRequest, 4, AttrChardevType, "uverbs", AttrDevIndex, uint32(0)), false)
	f.Add(request(CmdGet, flagRequest, 5, AttrDevIndex, []byte{1}), false)
	f.Add(append(request(CmdSysGet, flagRequest, 6), 1, 2, 3), false)
	f.Fuzz(func(t *testing.T, pkt []byte, admin bool) {
		src := newSource()
		before := newSource()
		cl := Client{PortID: 77, Admin: admin}
		for _, m := range messages(t, Serve(src, cl, pkt)) {
			if m.h.PID != 77 {
				t.Fatalf("reply with port id %d", m.h.PID)
			}
		}
		if !reflect.DeepEqual(src.res, before.res) {
			t.Fatalf("the source changed")
		}
	})
}
