//go:build linux

package peer

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
)

// The bad-rkey edge case needs a peer MR that grants REMOTE_WRITE, which
// the pingpongs do not have: the peer is ib_write_bw's server (the VM's
// real tool, or a softroce QP set up the same way), and the driver plays
// its client through perftest's exchange (package oob), then posts one
// RDMA WRITE with the right rkey and one with a wrong one
// (rxe_resp.c check_rkey: NAK 0x62, requester IB_WC_REM_ACCESS_ERR,
// both QPs end in ERR).

const rkeyWriteLen = 4096

// rkeyEnd is one RC QP with a 64 KiB MR granting REMOTE_WRITE, as
// perftest's write tests register it.
type rkeyEnd struct {
	dev      *emu.Device
	resolve  resolveFunc
	gidIndex int
	pd       *emu.PD
	cq       *emu.CQ
	qp       *emu.QP
	mr       *emu.MR
	addr     uint64
	local    oob.PerftestDest
	// retryCnt is the QP's retry_cnt; 0 means 7, the tools' value.
	retryCnt uint8
}

func newRKeyEnd(dev *emu.Device, resolve resolveFunc, gidIndex int, psn uint32) (*rkeyEnd, error) {
	e := &rkeyEnd{dev: dev, resolve: resolve, gidIndex: gidIndex}
	var err error
	if e.pd, err = dev.AllocPD(0); err != nil {
		return nil, err
	}
	e.addr, _ = dev.Memory().Alloc(1 << 16)
	access := ib.AccessLocalWrite | ib.AccessRemoteWrite
	if e.mr, err = e.pd.RegUserMR(e.addr, 1<<16, e.addr, access); err != nil {
		e.close()
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: 16}); err != nil {
		e.close()
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: qpstate.TypeRC, SQSigType: emu.SignalReqWR,
		Cap: qpstate.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		e.close()
		return nil, err
	}
	if err := e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: access},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags); err != nil {
		e.close()
		return nil, err
	}
	gid, err := dev.QueryGID(1, gidIndex)
	if err != nil {
		e.close()
		return nil, err
	}
	e.local = oob.PerftestDest{QPN: e.qp.QPNum(), PSN: psn, RKey: e.mr.RKey(), VAddr: e.addr, GID: gid.GID, OutReads: 1}
	return e, nil
}

// connect moves the QP to RTS towards s.Remote[0] (perftest's
// ctx_connect: path MTU 1024, timeout 14, retry 7, rnr_retry 7).
func (e *rkeyEnd) connect(s *oob.PerftestSetup) error {
	r := s.Remote[0]
	dmac, err := e.resolve(emu.GID(r.GID))
	if err != nil {
		return err
	}
	av := ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: dmac,
		GRH: ib.GlobalRoute{DGID: r.GID, SGIDIndex: uint8(e.gidIndex), HopLimit: 64}}
	if err := e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, DestQPNum: r.QPN, RQPSN: r.PSN,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: av},
		qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|
			qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer); err != nil {
		return err
	}
	retry := e.retryCnt
	if retry == 0 {
		retry = 7
	}
	return e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: e.local.PSN, Timeout: 14, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 1},
		qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|qpstate.AttrRNRRetry|qpstate.AttrMaxQPRdAtomic)
}

// write posts one signaled RDMA WRITE of rkeyWriteLen bytes and returns
// its completion status.
func (e *rkeyEnd) write(raddr uint64, rkey uint32) (emu.WCStatus, error) {
	if _, err := e.qp.PostSend([]emu.SendWR{{WRID: 7, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		RemoteAddr: raddr, RKey: rkey, SGList: []emu.SGE{{Addr: e.addr, Length: rkeyWriteLen, LKey: e.mr.LKey()}}}}); err != nil {
		return 0, err
	}
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(edgeHang); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if e.cq.Poll(wc) == 1 {
			return wc[0].Status, nil
		}
	}
	return 0, fmt.Errorf("RDMA WRITE: no completion in %v", edgeHang)
}

func (e *rkeyEnd) state() string {
	a, _, err := e.qp.Query(qpstate.AttrState)
	if err != nil {
		return err.Error()
	}
	return a.QPState.String()
}

func (e *rkeyEnd) close() {
	if e.qp != nil {
		e.qp.Destroy()
	}
	if e.cq != nil {
		e.cq.Destroy()
	}
	if e.mr != nil {
		e.mr.Dereg()
	}
	if e.addr != 0 {
		e.dev.Memory().Free(e.addr)
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
}

// rkeyOutcome is what one run of the scenario showed.
type rkeyOutcome struct {
	good, bad  emu.WCStatus // the driver's two WRITE completions
	driverQP   string       // the driver's QP state afterwards
	peerQP     string       // the peer's QP state afterwards
	peerStatus int          // the peer tool's exit status (VM)
}

// driveRKey runs the driver side on conn: perftest's client exchange,
// then a good and a bad WRITE, then peerState (read while the peer's
// tool still waits on conn).
func driveRKey(e *rkeyEnd, conn net.Conn, peerState func(qpn uint32) string) (rkeyOutcome, error) {
	var o rkeyOutcome
	c, err := oob.NewPerftestConn(conn, oob.PerftestClient)
	if err != nil {
		return o, err
	}
	s, err := oob.PerftestConnect(c, oob.PerftestParams{MTU: ib.MTU1024, WithGID: true}, []oob.PerftestDest{e.local}, e.connect)
	if err != nil {
		return o, fmt.Errorf("perftest exchange: %w", err)
	}
	r := s.Remote[0]
	if o.good, err = e.write(r.VAddr, r.RKey); err != nil {
		return o, err
	}
	if o.bad, err = e.write(r.VAddr, r.RKey^0x8000); err != nil {
		return o, err
	}
	time.Sleep(100 * time.Millisecond)
	o.driverQP, o.peerQP = e.state(), peerState(r.QPN)
	return o, nil
}

// driveRetry runs perftest's client exchange on conn, one good WRITE,
// then stopPeer (the peer's QP goes away: rxe drops requests to an unknown
// QPN silently) and one more WRITE, whose status it returns: with
// retry_cnt 2, IB_WC_RETRY_EXC_ERR after three transmissions 67 ms apart
// (timeout 14): the first transmission plus retry_cnt retries.
func driveRetry(e *rkeyEnd, conn net.Conn, stopPeer func()) (good, lost emu.WCStatus, took time.Duration, err error) {
	c, err := oob.NewPerftestConn(conn, oob.PerftestClient)
	if err != nil {
		return 0, 0, 0, err
	}
	s, err := oob.PerftestConnect(c, oob.PerftestParams{MTU: ib.MTU1024, WithGID: true}, []oob.PerftestDest{e.local}, e.connect)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("perftest exchange: %w", err)
	}
	r := s.Remote[0]
	if good, err = e.write(r.VAddr, r.RKey); err != nil {
		return good, 0, 0, err
	}
	stopPeer()
	start := time.Now()
	lost, err = e.write(r.VAddr, r.RKey)
	return good, lost, time.Since(start), err
}

func (o rkeyOutcome) check() []string {
	var bad []string
	if o.good != emu.WCSuccess || o.bad != emu.WCRemAccessErr {
		bad = append(bad, fmt.Sprintf("WRITE completions %v, %v; want IB_WC_SUCCESS, IB_WC_REM_ACCESS_ERR", o.good, o.bad))
	}
	if o.driverQP != qpstate.StateErr.String() || o.peerQP != qpstate.StateErr.String() {
		bad = append(bad, fmt.Sprintf("QP states: driver %s, peer %s; want both IB_QPS_ERR", o.driverQP, o.peerQP))
	}
	return bad
}

var rdmaResQPState = regexp.MustCompile(`state (\S+)`)

// pipePerftest builds the differential's pair (pipeNodes), a driver end
// with retry_cnt retry (0: 7) and a peer end that answers perftest's
// server side of the exchange on the other end of a net.Pipe; it returns
// the driver end, the peer end and the driver's stream.
func pipePerftest(t *testing.T, retry uint8) (d, p *rkeyEnd, conn net.Conn) {
	t.Helper()
	drv, peer := pipeNodes(t, nil)
	d, err := newRKeyEnd(drv.Device(), nodeResolver(drv), 1, 0x111111)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	d.retryCnt = retry
	if p, err = newRKeyEnd(peer.Device(), nodeResolver(peer), 1, 0x222222); err != nil {
		t.Fatal(err)
	}
	cli, srv := net.Pipe()
	t.Cleanup(func() { cli.Close() })
	go func() {
		defer srv.Close()
		c, err := oob.NewPerftestConn(srv, oob.PerftestServer)
		if err == nil {
			_, err = oob.PerftestConnect(c, oob.PerftestParams{MTU: ib.MTU1024, WithGID: true}, []oob.PerftestDest{p.local}, p.connect)
		}
		if err != nil {
			t.Errorf("peer exchange: %v", err)
		}
	}()
	return d, p, cli
}

// vmPerftest boots the VM, starts ib_write_bw's server on port and a
// capture into pcap under the artifacts, and connects a driver end (retry
// as in pipePerftest) to the server from the lab's namespace.
func vmPerftest(t *testing.T, ctx context.Context, port int, pcap string, retry uint8) (*VM, *Job, *Capture, *rkeyEnd, net.Conn) {
	t.Helper()
	lab, vm, dir := bootEdgeVM(t, ctx)
	job, err := vm.StartListening(ctx, fmt.Sprintf("ib_write_bw -d rxe0 -x 1 -F -n 5 -s %d -m 1024 -p %d", rkeyWriteLen, port), port)
	if err != nil {
		t.Fatal(err)
	}
	capture, err := lab.StartCapture(ctx, filepath.Join(dir, pcap))
	if err != nil {
		job.Kill()
		t.Fatal(err)
	}
	var conn net.Conn
	peer4, _ := lab.PeerAddr(1)
	n := labNode(t, lab, nil, func() (err error) {
		conn, err = net.Dial("tcp", net.JoinHostPort(peer4.Addr().String(), fmt.Sprint(port)))
		return err
	})
	t.Cleanup(func() { conn.Close() })
	d, err := newRKeyEnd(n.Device(), nodeResolver(n), 1, 0x111111)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	d.retryCnt = retry
	return vm, job, capture, d, conn
}

// checkEdgeCapture stops capture and checks its frames; it returns the
// report.
func checkEdgeCapture(t *testing.T, capture *Capture) *CaptureReport {
	t.Helper()
	if err := capture.Stop(); err != nil {
		t.Error(err)
	}
	rep, err := CheckCapture(capture.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.BadICRC) > 0 {
		t.Errorf("bad frames: %v", rep.BadICRC)
	}
	t.Logf("wire: %s", rep.OpcodeSummary())
	return rep
}

// TestInteropEdgeRKey runs the bad-rkey case against the VM's ib_write_bw
// server and, mirrored, against a softroce QP on a link.Pipe.
func TestInteropEdgeRKey(t *testing.T) {
	t.Run("softroce", func(t *testing.T) {
		d, p, conn := pipePerftest(t, 0)
		defer p.close()
		o, err := driveRKey(d, conn, func(uint32) string { return p.state() })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("softroce peer: WRITEs %v, %v; QPs driver %s, peer %s", o.good, o.bad, o.driverQP, o.peerQP)
		for _, p := range o.check() {
			t.Error(p)
		}
	})
	t.Run("rxe", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		vm, job, capture, d, conn := vmPerftest(t, ctx, 19600, "write-bad-rkey.pcap", 0)
		o, err := driveRKey(d, conn, func(qpn uint32) string {
			r, err := vm.Run(ctx, fmt.Sprintf("rdma resource show qp lqpn %d", qpn))
			if err != nil {
				return err.Error()
			}
			if m := rdmaResQPState.FindStringSubmatch(r.Output); m != nil {
				return "IB_QPS_" + m[1]
			}
			return r.Output
		})
		conn.Close()
		res, werr := job.Wait(ctx)
		checkEdgeCapture(t, capture)
		if err != nil {
			t.Fatal(err)
		}
		o.peerStatus = res.Status
		t.Logf("rxe peer: WRITEs %v, %v; QPs driver %s, peer %s; ib_write_bw server exit %d (%v)", o.good, o.bad, o.driverQP, o.peerQP, res.Status, werr)
		for _, p := range o.check() {
			t.Error(p)
		}
	})
}

// TestInteropEdgeRetry: retry exhaustion of a softroce requester (retry_cnt 2)
// whose peer went silent, the peer being the VM's ib_write_bw server killed
// after one WRITE, or a softroce QP destroyed after one WRITE. Expected
// (rxe_completer's retry): IB_WC_RETRY_EXC_ERR after the first transmission and
// two retries, timeout 14 (67 ms) apart.
func TestInteropEdgeRetry(t *testing.T) {
	check := func(t *testing.T, good, lost emu.WCStatus, took time.Duration) {
		t.Helper()
		t.Logf("WRITEs %v, %v after %v", good, lost, took.Round(time.Millisecond))
		if good != emu.WCSuccess || lost != emu.WCRetryExcErr {
			t.Errorf("WRITE completions %v, %v; want IB_WC_SUCCESS, IB_WC_RETRY_EXC_ERR", good, lost)
		}
		// Three waits of 4.096 µs << 14 = 67 ms.
		if took < 150*time.Millisecond || took > 2*time.Second {
			t.Errorf("RETRY_EXC_ERR after %v, want about 3 × 67 ms", took)
		}
	}
	t.Run("softroce", func(t *testing.T) {
		d, p, conn := pipePerftest(t, 2)
		good, lost, took, err := driveRetry(d, conn, p.close)
		if err != nil {
			t.Fatal(err)
		}
		check(t, good, lost, took)
	})
	t.Run("rxe", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, job, capture, d, conn := vmPerftest(t, ctx, 19601, "retry-exhausted.pcap", 2)
		good, lost, took, err := driveRetry(d, conn, func() {
			// The tool's exit destroys its QP.
			job.Kill()
			job.Wait(ctx)
		})
		rep := checkEdgeCapture(t, capture)
		if err != nil {
			t.Fatal(err)
		}
		check(t, good, lost, took)
		// One WRITE_FIRST for the good WRITE, three for the lost one.
		if got := rep.Opcodes[opRCWriteFirst]; got != 4 {
			t.Errorf("%d WRITE_FIRST frames, want 4 (1 + 3 transmissions): %s", got, rep.OpcodeSummary())
		}
	})
}
