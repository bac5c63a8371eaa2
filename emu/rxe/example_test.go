package rxe_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// hca is one emulated device with what a connection needs.
type hca struct {
	dev  *rxe.Device
	pd   *emu.PD
	cq   *emu.CQ
	qp   *emu.QP
	ip   netip.Addr
	mac  [6]byte
	addr uint64
	buf  []byte
	mr   *emu.MR
}

func newHCA(name string, l link.Link, i byte) *hca {
	h := &hca{ip: netip.AddrFrom4([4]byte{10, 0, 0, i}), mac: [6]byte{2, 0, 0, 0, 0, i}}
	h.dev, _ = rxe.New(rxe.Config{Link: l, Device: emu.Config{Name: name,
		NetDev: emu.NetDev{Name: "eth0", MAC: net.HardwareAddr(h.mac[:]), Addrs: []netip.Addr{h.ip}}}})
	h.pd, _ = h.dev.AllocPD(0)
	h.cq, _ = h.dev.CreateCQ(emu.CQInitAttr{CQE: 64})
	h.qp, _ = h.pd.CreateQP(&emu.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	h.addr, h.buf = h.dev.Memory().Alloc(4096)
	h.mr, _ = h.pd.RegUserMR(h.addr, 4096, h.addr, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	return h
}

// connect walks h's QP to RTS towards peer (INIT, RTR, RTS as
// ibv_modify_qp would).
func (h *hca) connect(peer *hca) {
	h.qp.Modify(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1,
		QPAccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags)
	h.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, DestQPNum: peer.qp.QPNum(),
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: ib.AHAttr{PortNum: 1, AHFlags: ib.AHGRH, DMAC: peer.mac,
			GRH: ib.GlobalRoute{DGID: emu.GIDFromAddr(peer.ip), SGIDIndex: 1, HopLimit: 64}}},
		qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|
			qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer)
	h.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|qpstate.AttrRNRRetry|
			qpstate.AttrMaxQPRdAtomic)
}

// wait polls cq until one completion arrives.
func wait(cq *emu.CQ) emu.WC {
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
	}
	return emu.WC{Status: emu.WCGeneralErr}
}

// Example builds two emulated rxe devices on an in-memory link (each
// processing frames in its own goroutine on the real clock), connects an
// RC QP pair and moves data with SEND, RDMA WRITE and RDMA READ.
func Example() {
	ea, eb := link.Pipe()
	a, b := newHCA("rxe0", ea, 1), newHCA("rxe1", eb, 2)
	defer a.dev.Close()
	defer b.dev.Close()
	a.connect(b)
	b.connect(a)

	copy(a.buf, "hello, RoCE")
	b.qp.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: b.addr, Length: 64, LKey: b.mr.LKey()}}}})
	a.qp.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: a.addr, Length: 11, LKey: a.mr.LKey()}}}})
	fmt.Println(wait(b.cq).Status, wait(a.cq).Status, string(b.buf[:11]))

	a.qp.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: a.addr, Length: 4096, LKey: a.mr.LKey()}}, RemoteAddr: b.addr + 0, RKey: b.mr.RKey()}})
	fmt.Println(wait(a.cq).Status, bytes.Equal(a.buf, b.buf))

	copy(b.buf, "read me back")
	a.qp.PostSend([]emu.SendWR{{WRID: 4, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: a.addr, Length: 12, LKey: a.mr.LKey()}}, RemoteAddr: b.addr, RKey: b.mr.RKey()}})
	fmt.Println(wait(a.cq).Status, string(a.buf[:12]))
	// Output:
	// IB_WC_SUCCESS IB_WC_SUCCESS hello, RoCE
	// IB_WC_SUCCESS true
	// IB_WC_SUCCESS read me back
}
