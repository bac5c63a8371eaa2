package oob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"testing"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"golang.org/x/sys/unix"
)

// capturedWriteBW is the client's address message of write_bw.pcap.
var capturedWriteBW = []byte("0000:0001:000011:3dbc49:000002f4:000055d69ea81000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\x00")

func TestPerftestDestGolden(t *testing.T) {
	d, gid, err := ParsePerftestDest(capturedWriteBW)
	if err != nil || !gid || d != writeBWClient {
		t.Fatalf("parsed %+v gid=%v, %v; want %+v", d, gid, err, writeBWClient)
	}
	b, err := writeBWClient.Marshal(true)
	if err != nil || !bytes.Equal(b, capturedWriteBW) {
		t.Fatalf("marshal %q, %v", b, err)
	}
	// The InfiniBand form: KEY_PRINT_FMT, 59 bytes.
	plain, err := writeBWClient.Marshal(false)
	if want := "0000:0001:000011:3dbc49:000002f4:000055d69ea81000:00000000\x00"; err != nil || string(plain) != want {
		t.Fatalf("plain form %q, %v", plain, err)
	}
}

func TestPerftestDestRoundTrip(t *testing.T) {
	r := testenv.Rand(t)
	for i := 0; i < 1000; i++ {
		d := PerftestDest{LID: uint16(r.Uint32()), OutReads: uint16(r.Uint32()), QPN: r.Uint32() & 0xffffff, PSN: r.Uint32() & 0xffffff,
			RKey: r.Uint32(), VAddr: r.Uint64(), SRQN: r.Uint32()}
		withGID := i%2 == 0
		if withGID {
			for j := range d.GID {
				d.GID[j] = byte(r.Uint32())
			}
		}
		b, err := d.Marshal(withGID)
		if err != nil {
			t.Fatal(err)
		}
		want := PerftestDestSize
		if withGID {
			want = PerftestDestGIDSize
		}
		if len(b) != want {
			t.Fatalf("%d bytes, want %d", len(b), want)
		}
		got, gid, err := ParsePerftestDest(b)
		if err != nil || got != d || gid != withGID {
			t.Fatalf("round trip %+v: %+v gid=%v %v", d, got, gid, err)
		}
	}
}

func TestPerftestDestErrors(t *testing.T) {
	mut := func(i int, c byte) []byte {
		b := bytes.Clone(capturedWriteBW)
		b[i] = c
		return b
	}
	plain, _ := writeBWClient.Marshal(false)
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"pingpong size", capturedRC},
		{"one short", capturedWriteBW[:107]},
		{"no NUL", mut(107, ':')},
		{"head colon", mut(9, '.')},
		{"bad rkey", mut(25, 'x')},
		{"bad vaddr", mut(40, '-')},
		{"gid colon", mut(52, '0')},
		{"bad gid byte", mut(50, 'q')},
		{"srqn colon", mut(106, 0)},
		{"bad srqn", mut(100, 'g')},
		{"plain bad srqn", func() []byte { b := bytes.Clone(plain); b[55] = 'z'; return b }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParsePerftestDest(tc.in); !errors.Is(err, unix.EPROTO) {
				t.Fatalf("err %v, want EPROTO", err)
			}
		})
	}
	if _, err := (PerftestDest{QPN: 1 << 24}).Marshal(true); !errors.Is(err, unix.EINVAL) {
		t.Errorf("wide QPN: %v", err)
	}
}

// runPerftestPair runs PerftestConnect and PerftestFinish on both sides
// over net.Pipe, with per-side parameters.
func runPerftestPair(t *testing.T, cp, sp PerftestParams, nqp int) (cs, ss *PerftestSetup, log []segment, cerr, serr error) {
	t.Helper()
	ce, se, logf := recordedPipe()
	defer ce.Close()
	defer se.Close()
	mk := func(base uint32) []PerftestDest {
		ds := make([]PerftestDest, nqp)
		for i := range ds {
			ds[i] = PerftestDest{QPN: base + uint32(i), PSN: base * 3, RKey: base, VAddr: uint64(base) << 20}
		}
		return ds
	}
	run := func(conn recConn, role PerftestRole, p PerftestParams, local []PerftestDest) (*PerftestSetup, error) {
		c, err := NewPerftestConn(conn, role)
		if err != nil {
			return nil, err
		}
		s, err := PerftestConnect(c, p, local, nil)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if _, err := PerftestFinish(c, p, local[0], BWReport{Size: 1, Iters: 5}); err != nil {
			conn.Close()
			return nil, err
		}
		return s, nil
	}
	done := make(chan struct{})
	go func() {
		cs, cerr = run(ce, PerftestClient, cp, mk(0x100))
		close(done)
	}()
	ss, serr = run(se, PerftestServer, sp, mk(0x200))
	<-done
	return cs, ss, logf(), cerr, serr
}

func sizesOf(log []segment) []int {
	var s []int
	for i := 0; i < len(log); i += 2 {
		s = append(s, len(log[i].payload))
	}
	return s
}

func TestPerftestVersionDependence(t *testing.T) {
	// check_sys_data from 5.32, the 2-byte MTU from 5.31 (4 bytes from
	// 5.1), 8-byte iterations in the report from 5.33.
	tests := []struct {
		version string
		sizes   []int
	}{
		{"6.06", []int{16, 4, 4, 2, 108, 108, 108, 108, 8, 8, 8, 8, 8, 108}},
		{"5.33", []int{16, 4, 4, 2, 108, 108, 108, 108, 8, 8, 8, 8, 8, 108}},
		{"5.32", []int{16, 4, 4, 2, 108, 108, 108, 108, 8, 4, 8, 8, 8, 108}},
		{"5.31", []int{16, 2, 108, 108, 108, 108, 8, 4, 8, 8, 8, 108}},
		{"5.2", []int{16, 4, 108, 108, 108, 108, 8, 4, 8, 8, 8, 108}},
		{"5.0", []int{16, 108, 108, 108, 108, 8, 4, 8, 8, 8, 108}},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			p := PerftestParams{Version: tc.version, MTU: ib.MTU1024, WithGID: true}
			cs, ss, log, cerr, serr := runPerftestPair(t, p, p, 1)
			if cerr != nil || serr != nil {
				t.Fatalf("client %v server %v", cerr, serr)
			}
			got := sizesOf(log[:len(log)-2])
			if len(got) != len(tc.sizes) {
				t.Fatalf("sizes %v, want %v", got, tc.sizes)
			}
			for i := range got {
				if got[i] != tc.sizes[i] {
					t.Fatalf("sizes %v, want %v", got, tc.sizes)
				}
			}
			if cs.RemoteVersion != tc.version || ss.Remote[0].QPN != 0x100 || cs.Remote[0].QPN != 0x200 {
				t.Fatalf("setup %+v / %+v", cs, ss)
			}
		})
	}
}

func TestPerftestSetupNegotiation(t *testing.T) {
	cp := PerftestParams{MTU: ib.MTU4096, CycleBuffer: 65536, CacheLineSize: 128}
	sp := PerftestParams{MTU: ib.MTU1024}
	cs, ss, log, cerr, serr := runPerftestPair(t, cp, sp, 3)
	if cerr != nil || serr != nil {
		t.Fatalf("client %v server %v", cerr, serr)
	}
	for _, s := range []*PerftestSetup{cs, ss} {
		if s.MTU != ib.MTU1024 || s.CycleBuffer != 65536 || s.CacheLineSize != 128 || len(s.Remote) != 3 {
			t.Fatalf("setup %+v", s)
		}
	}
	// Without GID: 59-byte addresses; 3 QPs: 3 hand shakes, connect, 3
	// more (the loop printing the remote addresses) and the sync.
	sizes := sizesOf(log)
	if sizes[4] != PerftestDestSize || sizes[8] != PerftestDestSize {
		t.Fatalf("sizes %v", sizes)
	}
	if len(sizes) != 4+3+3+1+1+5+1+1 {
		t.Fatalf("%d exchanges: %v", len(sizes), sizes)
	}
	// --dont_xchg_versions: straight to the addresses.
	p := PerftestParams{DontXchgVersions: true, MTU: ib.MTU2048, WithGID: true}
	cs, _, log, cerr, serr = runPerftestPair(t, p, p, 1)
	if cerr != nil || serr != nil || len(log[0].payload) != PerftestDestGIDSize || cs.MTU != ib.MTU2048 || cs.RemoteVersion != "" {
		t.Fatalf("dont_xchg_versions: %v %v %d %+v", cerr, serr, len(log[0].payload), cs)
	}
}

func TestPerftestErrors(t *testing.T) {
	if _, err := NewPerftestConn(nil, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("role 0: %v", err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c, _ := NewPerftestConn(a, PerftestClient)
	if c.Role() != PerftestClient || c.Role().String() != "client" || PerftestRole(9).String() != "PerftestRole(9)" {
		t.Error("role names")
	}
	if _, err := c.ExchangeVersions("0123456789abcdef"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("long version: %v", err)
	}
	if _, err := PerftestConnect(c, PerftestParams{}, nil, nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no QP: %v", err)
	}
	t.Run("garbage address", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			io.ReadFull(b, make([]byte, PerftestDestGIDSize))
			b.Write(bytes.Repeat([]byte{'z'}, PerftestDestGIDSize))
		}()
		c, _ := NewPerftestConn(a, PerftestClient)
		if _, err := c.HandShake(writeBWClient, true); !errors.Is(err, unix.EPROTO) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("peer hangs up", func(t *testing.T) {
		a, b := net.Pipe()
		go func() { io.ReadFull(b, make([]byte, 16)); b.Close() }()
		c, _ := NewPerftestConn(a, PerftestClient)
		if _, err := c.ExchangeVersions(PerftestVersion); !errors.Is(err, io.EOF) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("connect callback fails", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		p := PerftestParams{DontXchgVersions: true}
		go func() {
			s, _ := NewPerftestConn(b, PerftestServer)
			s.HandShake(PerftestDest{}, false)
		}()
		c, _ := NewPerftestConn(a, PerftestClient)
		_, err := PerftestConnect(c, p, []PerftestDest{{}}, func(*PerftestSetup) error { return unix.ENODEV })
		if !errors.Is(err, unix.ENODEV) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("bad done", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			s, _ := NewPerftestConn(b, PerftestServer)
			s.HandShake(PerftestDest{}, false)
			io.ReadFull(b, make([]byte, DoneSize))
			b.Write([]byte("DONE\x00"))
		}()
		c, _ := NewPerftestConn(a, PerftestClient)
		if err := c.Close(PerftestDest{}, false); !errors.Is(err, unix.EPROTO) {
			t.Fatalf("err %v", err)
		}
	})
	if cAtof("6.06") != 6.06 || cAtof("5.33abc") != 5.33 || cAtof("") != 0 || cAtof("x") != 0 {
		t.Error("cAtof")
	}
	if cAtoi("3") != 3 || cAtoi(" -12x") != -12 || cAtoi("") != 0 {
		t.Error("cAtoi")
	}
}

// TestPerftestFlows plays both sides of every tool's exchange over
// net.Pipe and checks the writes, in order, against perftest 4.5's mains
// and the exchanges observed between two kernel-rxe hosts: the count of
// 108-byte hand shakes before ctx_connect and before the traffic, and
// what follows the traffic, unidirectional and with -b, in iterations and
// duration mode.
func TestPerftestFlows(t *testing.T) {
	const shake = PerftestDestGIDSize
	reports := []int{8, 4, 8, 8, 8}                             // size, iters (4 bytes: no version exchanged), peak, average, msg rate
	bwTail := append(append([]int{shake}, reports...), shake)   // end sync, reports, close
	duplexTail := append(append([]int(nil), reports...), shake) // reports, close: no end sync
	for _, tc := range []struct {
		test          PerftestTest
		nqp           int
		duplex        bool  // -b
		duration      bool  // -D
		beforeConnect int   // hand shakes before ctx_connect
		beforeRun     int   // hand shakes before the traffic
		tail          []int // exchanges after the traffic (each both ways), before the "done"s
		done          bool  // ctx_close_connection's "done" both ways
	}{
		{PerftestWriteBW, 1, false, false, 1, 3, bwTail, true},
		{PerftestWriteBW, 2, false, false, 2, 5, bwTail, true},
		{PerftestReadBW, 1, false, false, 1, 3, bwTail, true},
		{PerftestAtomicBW, 1, false, false, 1, 3, bwTail, true},
		{PerftestSendBW, 1, false, false, 1, 4, []int{shake}, true},
		{PerftestSendBW, 2, false, false, 2, 6, []int{shake}, true},
		{PerftestWriteLat, 1, false, false, 2, 4, nil, false},
		{PerftestReadLat, 1, false, false, 2, 4, []int{shake}, true},
		{PerftestAtomicLat, 1, false, false, 2, 4, []int{shake}, true},
		{PerftestSendLat, 1, false, false, 1, 4, []int{shake}, true},
		// -D alone: the iterations flows.
		{PerftestWriteBW, 1, false, true, 1, 3, bwTail, true},
		{PerftestWriteBW, 2, false, true, 2, 5, bwTail, true},
		{PerftestReadBW, 1, false, true, 1, 3, bwTail, true},
		{PerftestAtomicBW, 1, false, true, 1, 3, bwTail, true},
		{PerftestSendBW, 1, false, true, 1, 4, []int{shake}, true},
		{PerftestWriteLat, 1, false, true, 2, 4, nil, false},
		{PerftestReadLat, 1, false, true, 2, 4, []int{shake}, true},
		{PerftestAtomicLat, 1, false, true, 2, 4, []int{shake}, true},
		{PerftestSendLat, 1, false, true, 1, 4, []int{shake}, true},
		// -b: one more sync before run_iter_bw, no end sync, the reports.
		{PerftestWriteBW, 1, true, false, 1, 4, duplexTail, true},
		{PerftestWriteBW, 2, true, false, 2, 6, duplexTail, true},
		{PerftestReadBW, 1, true, false, 1, 4, duplexTail, true},
		{PerftestAtomicBW, 1, true, false, 1, 4, duplexTail, true},
		{PerftestWriteBW, 1, true, true, 1, 4, duplexTail, true},
		{PerftestReadBW, 1, true, true, 1, 4, duplexTail, true},
		{PerftestAtomicBW, 1, true, true, 1, 4, duplexTail, true},
		// send_bw -b: its own syncs; reports in iterations mode only.
		{PerftestSendBW, 1, true, false, 1, 4, duplexTail, true},
		{PerftestSendBW, 2, true, false, 2, 6, duplexTail, true},
		{PerftestSendBW, 1, true, true, 1, 4, []int{shake}, true},
	} {
		name := fmt.Sprintf("%v_q%d", tc.test, tc.nqp)
		if tc.duplex {
			name += "_b"
		}
		if tc.duration {
			name += "_D"
		}
		t.Run(name, func(t *testing.T) {
			ce, se, logf := recordedPipe()
			p := PerftestParams{Test: tc.test, DontXchgVersions: true, WithGID: true, Duplex: tc.duplex, Duration: tc.duration}
			mk := func(base uint32) []PerftestDest {
				ds := make([]PerftestDest, tc.nqp)
				for i := range ds {
					ds[i] = PerftestDest{QPN: base + uint32(i), PSN: base * 3, RKey: base, VAddr: uint64(base) << 20}
				}
				return ds
			}
			var atConnect, atRun int
			myReport := map[PerftestRole]BWReport{
				PerftestClient: {Size: 1, Iters: 5, BWAvg: 1.5, MsgRateAvg: 0.25},
				PerftestServer: {Size: 2, Iters: 7, BWAvg: 2.5, MsgRateAvg: 0.75},
			}
			var gotReport [PerftestServer + 1]BWReport // one element per side's goroutine
			side := func(conn recConn, role PerftestRole, local []PerftestDest) ([]PerftestDest, error) {
				defer conn.Close()
				c, err := NewPerftestConn(conn, role)
				if err != nil {
					return nil, err
				}
				s, err := PerftestConnect(c, p, local, func(*PerftestSetup) error {
					if role == PerftestClient {
						atConnect = len(logf())
					}
					return nil
				})
				if err != nil {
					return nil, err
				}
				if role == PerftestClient {
					atRun = len(logf())
				}
				rem, err := PerftestFinish(c, p, local[0], myReport[role])
				if err != nil {
					return nil, err
				}
				gotReport[role] = rem
				return s.Remote, nil
			}
			type res struct {
				rem []PerftestDest
				err error
			}
			cc := make(chan res, 1)
			go func() {
				r, err := side(ce, PerftestClient, mk(0x100))
				cc <- res{r, err}
			}()
			srem, serr := side(se, PerftestServer, mk(0x200))
			cr := <-cc
			if cr.err != nil || serr != nil {
				t.Fatalf("client %v, server %v", cr.err, serr)
			}
			withReports := len(tc.tail) > 2
			for role, other := range map[PerftestRole]PerftestRole{PerftestClient: PerftestServer, PerftestServer: PerftestClient} {
				want := BWReport{}
				if withReports {
					want = myReport[other]
				}
				if gotReport[role] != want {
					t.Errorf("%v got report %+v, want %+v", role, gotReport[role], want)
				}
			}
			for i := range tc.nqp {
				if cr.rem[i].QPN != 0x200+uint32(i) || srem[i].QPN != 0x100+uint32(i) {
					t.Errorf("QP %d: client got %+v, server got %+v", i, cr.rem[i], srem[i])
				}
			}
			if atConnect != 2*tc.beforeConnect || atRun != 2*tc.beforeRun {
				t.Errorf("client connected after %d writes and ran after %d; want %d and %d",
					atConnect, atRun, 2*tc.beforeConnect, 2*tc.beforeRun)
			}
			segs := logf()
			var want []segment
			for range tc.beforeRun {
				want = append(want, segment{true, make([]byte, shake)}, segment{false, make([]byte, shake)})
			}
			for _, n := range tc.tail {
				want = append(want, segment{true, make([]byte, n)}, segment{false, make([]byte, n)})
			}
			if tc.done {
				want = append(want, segment{true, doneMsg}, segment{false, doneMsg})
			}
			if len(segs) != len(want) {
				t.Fatalf("%d writes, want %d: %v", len(segs), len(want), segSizes(segs))
			}
			dones := 0
			for i, s := range segs {
				if bytes.Equal(s.payload, doneMsg) && tc.done && i >= len(want)-2 {
					dones++ // the two "done"s may come in either order
					continue
				}
				if s.fromClient != want[i].fromClient || len(s.payload) != len(want[i].payload) {
					t.Errorf("write %d: client=%v %d bytes, want client=%v %d bytes", i, s.fromClient, len(s.payload),
						want[i].fromClient, len(want[i].payload))
				}
				if len(s.payload) == shake {
					if _, _, err := ParsePerftestDest(s.payload); err != nil {
						t.Errorf("write %d: %v", i, err)
					}
				}
			}
			if tc.done && dones != 2 {
				t.Errorf("%d done messages at the end, want 2: %v", dones, segSizes(segs))
			}
		})
	}
}

// segSizes lists the writes of a log as "c108" / "s5" for messages.
func segSizes(segs []segment) []string {
	var out []string
	for _, s := range segs {
		d := "s"
		if s.fromClient {
			d = "c"
		}
		out = append(out, fmt.Sprintf("%s%d", d, len(s.payload)))
	}
	return out
}

// TestPerftestFlowFor checks the flow values: -D alone and duplex on a
// latency test change nothing, -b drops the end sync, adds the sync
// before run_iter_bw for write/read/atomic, and keeps the reports except
// for send_bw -b -D; PerftestFlowOf stays the unidirectional flow.
func TestPerftestFlowFor(t *testing.T) {
	for test := PerftestWriteBW; test <= PerftestAtomicLat; test++ {
		uni := PerftestFlowOf(test)
		for _, duration := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v_D%v", test, duration), func(t *testing.T) {
				if got := PerftestFlowFor(PerftestParams{Test: test, Duration: duration}); !reflect.DeepEqual(got, uni) {
					t.Errorf("unidirectional: %+v, want %+v", got, uni)
				}
				d := PerftestFlowFor(PerftestParams{Test: test, Duration: duration, Duplex: true})
				if !test.IsBW() {
					if !reflect.DeepEqual(d, uni) {
						t.Errorf("duplex latency: %+v, want %+v", d, uni)
					}
					return
				}
				extra := 1
				if test == PerftestSendBW {
					extra = 0
				}
				wantReports := !(test == PerftestSendBW && duration)
				if d.EndSync || d.Reports != wantReports || !d.Close || len(d.AfterConnect) != len(uni.AfterConnect)+extra ||
					!reflect.DeepEqual(d.BeforeConnect, uni.BeforeConnect) || d.AfterConnect[len(d.AfterConnect)-1] != ShakeFirst {
					t.Errorf("duplex: %+v (unidirectional %+v)", d, uni)
				}
			})
		}
	}
	// PerftestFlowFor must not write into the shared tables.
	before := len(PerftestFlowOf(PerftestWriteBW).AfterConnect)
	PerftestFlowFor(PerftestParams{Test: PerftestWriteBW, Duplex: true})
	if after := len(PerftestFlowOf(PerftestWriteBW).AfterConnect); after != before {
		t.Errorf("write_bw's flow changed: %d hand shakes after connect, was %d", after, before)
	}
}

// TestPerftestCloseWithoutDone: perftest 25.01's close is the hand shake
// and close(2), no "done": Close takes the peer's end of the stream (over
// net.Pipe and over TCP, where our "done" reaching the closed socket may
// reset the connection) as the end of the exchange, while a peer that
// sends something other than "done" is still an error.
func TestPerftestCloseWithoutDone(t *testing.T) {
	peer := func(rw io.ReadWriter, closeIt func(), reply []byte) {
		b := make([]byte, PerftestDestGIDSize)
		if _, err := io.ReadFull(rw, b); err != nil {
			return
		}
		rw.Write(b) // the hand shake answered with the same message
		if reply != nil {
			rw.Write(reply)
		}
		closeIt()
	}
	t.Run("pipe", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go peer(b, func() { b.Close() }, nil)
		c, _ := NewPerftestConn(a, PerftestClient)
		if err := c.Close(writeBWClient, true); err != nil {
			t.Errorf("Close against a peer that closes after the hand shake: %v", err)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Skip(err)
		}
		defer ln.Close()
		go func() {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			peer(s, func() { s.Close() }, nil)
		}()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		c, _ := NewPerftestConn(a, PerftestClient)
		if err := c.Close(writeBWClient, true); err != nil {
			t.Errorf("Close against a TCP peer that closes after the hand shake: %v", err)
		}
	})
	t.Run("garbage instead of done", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go peer(b, func() { io.Copy(io.Discard, b); b.Close() }, []byte("nope!"))
		c, _ := NewPerftestConn(a, PerftestClient)
		if err := c.Close(writeBWClient, true); !errors.Is(err, unix.EPROTO) {
			t.Errorf("Close with %q for done: %v, want EPROTO", "nope!", err)
		}
	})
}
