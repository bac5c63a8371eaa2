//go:build linux

package peer

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/qpstate"
)

// ATOMIC_WRITE and FLUSH against Debian 13's kernel 6.12 rxe. perftest
// 25.01 has neither, so the VM runs testdata/extops.c, built here against
// Debian 13's libibverbs (the first with ibv_wr_flush), and softroce's
// side is an in-process device on the lab's TAP driven through the emu
// verbs API with the same one-line exchange.

// extAtomicValue is what extops' ATOMIC_WRITE stores (and what the
// softroce requester stores too).
const extAtomicValue = 0x0123456789abcdef

// extopsDev is Debian 13's RDMA userspace with libibverbs' headers.
func extopsDev() debroot.Config {
	c := debroot.TrixiePeer()
	c.Packages = append(c.Packages, "libibverbs-dev")
	return c
}

// buildExtops compiles testdata/extops.c with the host's gcc against the
// Debian 13 tree's headers and libibverbs.
func buildExtops(t *testing.T) []byte {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	testenv.Require(t, err == nil, "gcc is not installed")
	tr := debroot.ForTest(t, extopsDev())
	lib := filepath.Join(tr.Dir, "usr/lib/x86_64-linux-gnu")
	out := filepath.Join(t.TempDir(), "extops")
	// --allow-shlib-undefined: Debian 13's libibverbs needs symbols of
	// its own glibc (2.41), which the host's (2.36) linker cannot see;
	// the VM has that glibc.
	cmd := exec.Command(cc, "-O1", "-Wall", "-Werror", "-I", filepath.Join(tr.Dir, "usr/include"), "-o", out, "testdata/extops.c",
		"-L"+lib, "-Wl,-rpath-link,"+lib, "-Wl,--allow-shlib-undefined", "-libverbs")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build extops: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// extDest is one side's line of the exchange.
type extDest struct {
	qpn, psn, rkey uint32
	vaddr          uint64
	gid            [16]byte
}

func (d extDest) line() string {
	return fmt.Sprintf("%06x %06x %016x %08x %s\n", d.qpn, d.psn, d.vaddr, d.rkey, hex.EncodeToString(d.gid[:]))
}

func parseExtDest(s string) (extDest, error) {
	var d extDest
	var g string
	if _, err := fmt.Sscanf(s, "%x %x %x %x %s", &d.qpn, &d.psn, &d.vaddr, &d.rkey, &g); err != nil {
		return d, fmt.Errorf("extops address %q: %w", s, err)
	}
	b, err := hex.DecodeString(g)
	if err != nil || len(b) != 16 {
		return d, fmt.Errorf("extops address %q: bad GID", s)
	}
	copy(d.gid[:], b)
	return d, nil
}

// extEnd is softroce's side: a 4 KiB MR granting REMOTE_WRITE and
// FLUSH_GLOBAL, an RC QP whose access adds FLUSH_GLOBAL and
// FLUSH_PERSISTENT (as extops' QPs).
type extEnd struct {
	dev     *emu.Device
	resolve resolveFunc
	pd      *emu.PD
	cq      *emu.CQ
	qp      *emu.QP
	mr      *emu.MR
	addr    uint64
	mem     []byte
	local   extDest
}

func newExtEnd(t *testing.T, dev *emu.Device, resolve resolveFunc) *extEnd {
	t.Helper()
	e := &extEnd{dev: dev, resolve: resolve}
	var err error
	if e.pd, err = dev.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	e.addr, e.mem = dev.Memory().Alloc(4096)
	if e.mr, err = e.pd.RegUserMR(e.addr, 4096, e.addr, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessFlushGlobal); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: 16}); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: qpstate.TypeRC, SQSigType: emu.SignalAllWR,
		Cap: qpstate.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	access := ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessFlushGlobal | ib.AccessFlushPersistent
	if err := e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: access},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.local = extDest{qpn: e.qp.QPNum(), psn: 0x333333, rkey: e.mr.RKey(), vaddr: e.addr, gid: gid.GID}
	t.Cleanup(func() {
		e.qp.Destroy()
		e.mr.Dereg()
		e.cq.Destroy()
		e.pd.Dealloc()
	})
	return e
}

// connect moves the QP to RTS towards r with extops' attributes.
func (e *extEnd) connect(r extDest) error {
	dmac, err := e.resolve(emu.GID(r.gid))
	if err != nil {
		return err
	}
	av := ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: dmac,
		GRH: ib.GlobalRoute{DGID: r.gid, SGIDIndex: 1, HopLimit: 64}}
	if err := e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTR, PathMTU: ib.MTU1024, DestQPNum: r.qpn, RQPSN: r.psn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: av},
		qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|
			qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer); err != nil {
		return err
	}
	return e.qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: e.local.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|qpstate.AttrRNRRetry|qpstate.AttrMaxQPRdAtomic)
}

// extOp is one operation of the requester's sequence and the completion
// both peers must give it.
type extOp struct {
	name   string
	wr     func(r extDest, src uint64, lkey uint32) emu.SendWR
	status emu.WCStatus
	opcode emu.WCOpcode
}

// extOps is extops' sequence: ATOMIC_WRITE, FLUSH global of 8 bytes and of
// the whole MR, then a persistent FLUSH, which the responder refuses (NAK
// 0x62: no MR can grant FLUSH_PERSISTENT without persistent memory).
var extOps = []extOp{
	{"ATOMIC_WRITE", func(r extDest, src uint64, lkey uint32) emu.SendWR {
		return emu.SendWR{Opcode: emu.WRAtomicWrite, RemoteAddr: r.vaddr, RKey: r.rkey, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: lkey}}}
	}, emu.WCSuccess, emu.WCAtomicWrite},
	{"FLUSH_GLOBAL_RANGE", func(r extDest, _ uint64, _ uint32) emu.SendWR {
		return emu.SendWR{Opcode: emu.WRFlush, RemoteAddr: r.vaddr, RKey: r.rkey, FlushLen: 8, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushRange}
	}, emu.WCSuccess, emu.WCFlush},
	{"FLUSH_GLOBAL_MR", func(r extDest, _ uint64, _ uint32) emu.SendWR {
		return emu.SendWR{Opcode: emu.WRFlush, RemoteAddr: r.vaddr, RKey: r.rkey, FlushLen: 8, FlushType: emu.FlushGlobal, FlushLevel: emu.FlushMR}
	}, emu.WCSuccess, emu.WCFlush},
	{"FLUSH_PERSISTENT_RANGE", func(r extDest, _ uint64, _ uint32) emu.SendWR {
		return emu.SendWR{Opcode: emu.WRFlush, RemoteAddr: r.vaddr, RKey: r.rkey, FlushLen: 8, FlushType: emu.FlushPersistent, FlushLevel: emu.FlushRange}
	}, emu.WCRemAccessErr, 0},
}

// wcLine matches extops' line for one operation.
var wcLine = regexp.MustCompile(`(?m)^(\S+) status=.*\((\d+)\) opcode=(-?\d+)`)

// TestInteropExtOps runs ATOMIC_WRITE and FLUSH both ways between
// softroce and Debian 13's kernel 6.12 rxe: the VM's extops as the
// requester into a softroce MR, then softroce as the requester into the
// VM's. Each operation must complete as extOps says on either requester,
// the target memory must hold the ATOMIC_WRITE's value, the responder of
// either kind must refuse a FLUSH_PERSISTENT MR registration (rxe: EINVAL,
// the memory is not persistent memory), and every frame must parse with a
// good ICRC.
func TestInteropExtOps(t *testing.T) {
	testenv.RequireRoot(t)
	prog := buildExtops(t)
	img := buildTestImageFor(t, Trixie)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lab := newTestLab(t)
	dir := artifactDir(t)
	if err := lab.AddTAP(ctx, softroceTAP); err != nil {
		t.Fatal(err)
	}
	ip4, ip6 := lab.PeerAddr(1)
	con, err := os.Create(filepath.Join(dir, "vm1.console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	vm, err := lab.StartVM(ctx, VMConfig{Image: img, Name: "vm1", IP: ip4, IP6: ip6, Console: con, Timeout: 10 * time.Minute,
		Programs: map[string][]byte{"extops": prog}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Kill(); <-vm.Done() })
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	n := labNode(t, lab, nil, func() error { return nil })

	// The responder refuses a persistent-flush MR on either side.
	pd, err := n.Device().AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	addr, _ := n.Device().Memory().Alloc(4096)
	if _, err := pd.RegUserMR(addr, 4096, addr, ib.AccessLocalWrite|ib.AccessFlushPersistent); !errors.Is(err, unix.EINVAL) {
		t.Errorf("softroce registering an MR with IB_ACCESS_FLUSH_PERSISTENT: %v, want EINVAL as rxe", err)
	}

	t.Run("rxe-requester", func(t *testing.T) {
		const port = 19701
		e := newExtEnd(t, n.Device(), nodeResolver(n))
		var ln net.Listener
		if err := lab.Do(func() (err error) {
			ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		capture, err := lab.StartCapture(ctx, filepath.Join(dir, "rxe-requester.pcap"))
		if err != nil {
			t.Fatal(err)
		}
		job, err := vm.StartJob(ctx, fmt.Sprintf("extops -p %d send %s", port, lab.Addr().Addr()))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		rem, err := parseExtDest(line)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.connect(rem); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(e.local.line())); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Minute))
		done, err := br.ReadString('\n')
		res, werr := job.Wait(ctx)
		t.Logf("extops (rxe 6.12 requester):\n%s", res.Output)
		if err != nil || done != "done\n" || werr != nil || res.Status != 0 {
			t.Fatalf("extops: %q %v; exit %d %v", done, err, res.Status, werr)
		}
		checkExtLines(t, res.Output)
		if got := binary.LittleEndian.Uint64(e.mem); got != extAtomicValue {
			t.Errorf("softroce's MR holds %#x after rxe's ATOMIC_WRITE, want %#x", got, uint64(extAtomicValue))
		}
		checkExtCapture(t, capture)
	})

	t.Run("softroce-requester", func(t *testing.T) {
		const port = 19702
		e := newExtEnd(t, n.Device(), nodeResolver(n))
		capture, err := lab.StartCapture(ctx, filepath.Join(dir, "softroce-requester.pcap"))
		if err != nil {
			t.Fatal(err)
		}
		job, err := vm.StartListening(ctx, fmt.Sprintf("extops -p %d target", port), port)
		if err != nil {
			t.Fatal(err)
		}
		var c net.Conn
		if err := lab.Do(func() (err error) {
			c, err = net.Dial("tcp", net.JoinHostPort(ip4.Addr().String(), fmt.Sprint(port)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(e.local.line())); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Minute))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		rem, err := parseExtDest(line)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.connect(rem); err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(e.mem, extAtomicValue)
		var got []string
		for i, op := range extOps {
			wr := op.wr(rem, e.addr, e.mr.LKey())
			wr.WRID = uint64(i + 1)
			if _, err := e.qp.PostSend([]emu.SendWR{wr}); err != nil {
				t.Fatalf("%s: post: %v", op.name, err)
			}
			wc, err := pollOne(e.cq, 5*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			got = append(got, fmt.Sprintf("%s %v %v", op.name, wc.Status, wc.Opcode))
			if wc.Status != op.status || op.status == emu.WCSuccess && wc.Opcode != op.opcode {
				t.Errorf("%s against rxe 6.12: %v %v, want %v %v", op.name, wc.Status, wc.Opcode, op.status, op.opcode)
			}
		}
		t.Logf("softroce requester: %s", strings.Join(got, "; "))
		if _, err := c.Write([]byte("done\n")); err != nil {
			t.Fatal(err)
		}
		res, err := job.Wait(ctx)
		t.Logf("extops (rxe 6.12 target):\n%s", res.Output)
		if err != nil || res.Status != 0 {
			t.Fatalf("extops target: exit %d %v", res.Status, err)
		}
		if want := fmt.Sprintf("TARGET %#016x", uint64(extAtomicValue)); !strings.Contains(res.Output, want) {
			t.Errorf("rxe's MR after softroce's ATOMIC_WRITE: want %q", want)
		}
		if !strings.Contains(res.Output, "REG_PERSISTENT failed errno=22") {
			t.Error("rxe 6.12 registered an MR with IB_ACCESS_FLUSH_PERSISTENT on ordinary memory (softroce refuses it with EINVAL)")
		}
		if !strings.Contains(res.Output, "CAPS flush_global=1 flush_persistent=1 atomic_write=1") {
			t.Error("rxe 6.12 does not advertise FLUSH and ATOMIC_WRITE as softroce does")
		}
		checkExtCapture(t, capture)
	})
}

// checkExtLines checks extops' requester lines against extOps.
func checkExtLines(t *testing.T, out string) {
	t.Helper()
	got := make(map[string][2]string)
	for _, m := range wcLine.FindAllStringSubmatch(out, -1) {
		got[m[1]] = [2]string{m[2], m[3]}
	}
	for _, op := range extOps {
		g, ok := got[op.name]
		want := [2]string{fmt.Sprint(int(op.status)), "-1"}
		if op.status == emu.WCSuccess {
			want[1] = fmt.Sprint(int(op.opcode))
		}
		if !ok || g != want {
			t.Errorf("%s from rxe 6.12 into softroce: status %s opcode %s, want %s %s", op.name, g[0], g[1], want[0], want[1])
		}
	}
}

// checkExtCapture stops capture and checks that every frame parses with
// a good ICRC and that ATOMIC_WRITE, FLUSH, their empty read responses
// and the NAK are on the wire.
func checkExtCapture(t *testing.T, capture *Capture) {
	t.Helper()
	rep := checkEdgeCapture(t, capture)
	for _, op := range []uint8{0x1d, 0x1c, opRCReadRespOnly, opRCAck} {
		if rep.Opcodes[op] == 0 {
			t.Errorf("no opcode %#x on the wire: %s", op, rep.OpcodeSummary())
		}
	}
}

// pollOne waits up to d for one completion on cq.
func pollOne(cq *emu.CQ, d time.Duration) (emu.WC, error) {
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if cq.Poll(wc) == 1 {
			return wc[0], nil
		}
	}
	return emu.WC{}, fmt.Errorf("no completion in %v", d)
}
