package oob

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"golang.org/x/sys/unix"
)

// capturedRC is the client's message of rc_pingpong.pcap:
// "0000:000011:7d1801:00000000000000000000ffff0a4d000c" and a NUL.
var capturedRC = []byte("0000:000011:7d1801:00000000000000000000ffff0a4d000c\x00")

func TestPingpongDestGolden(t *testing.T) {
	d, err := ParsePingpongDest(capturedRC)
	if err != nil {
		t.Fatal(err)
	}
	want := PingpongDest{LID: 0, QPN: 0x11, PSN: 0x7d1801, GID: netip.MustParseAddr("::ffff:10.77.0.12").As16()}
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	b, err := want.Marshal()
	if err != nil || !bytes.Equal(b, capturedRC) {
		t.Fatalf("marshal %q, %v", b, err)
	}
}

func TestPingpongDestRoundTrip(t *testing.T) {
	r := testenv.Rand(t)
	for i := 0; i < 1000; i++ {
		d := PingpongDest{LID: uint16(r.Uint32()), QPN: r.Uint32() & 0xffffff, PSN: r.Uint32() & 0xffffff}
		for j := range d.GID {
			d.GID[j] = byte(r.Uint32())
		}
		b, err := d.Marshal()
		if err != nil || len(b) != PingpongDestSize {
			t.Fatalf("marshal %+v: %d bytes, %v", d, len(b), err)
		}
		got, err := ParsePingpongDest(b)
		if err != nil || got != d {
			t.Fatalf("round trip %+v: %+v, %v", d, got, err)
		}
	}
}

func TestPingpongDestErrors(t *testing.T) {
	mut := func(i int, c byte) []byte {
		b := bytes.Clone(capturedRC)
		b[i] = c
		return b
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"short", capturedRC[:51]},
		{"long", append(bytes.Clone(capturedRC), 0)},
		{"no NUL", mut(51, 'x')},
		{"colon 1", mut(4, '-')},
		{"colon 2", mut(11, '-')},
		{"colon 3", mut(18, '-')},
		{"bad LID", mut(0, 'g')},
		{"bad QPN", mut(6, ' ')},
		{"bad PSN", mut(17, 'z')},
		{"bad GID", mut(30, ':')},
		{"NUL inside", mut(2, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParsePingpongDest(tc.in); !errors.Is(err, unix.EPROTO) {
				t.Fatalf("err %v, want EPROTO", err)
			}
		})
	}
	if _, err := (PingpongDest{QPN: 1 << 24}).Marshal(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("25-bit QPN: %v", err)
	}
	if _, err := (PingpongDest{PSN: 1 << 24}).Marshal(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("25-bit PSN: %v", err)
	}
}

func TestGIDWire(t *testing.T) {
	tests := []struct {
		addr, wire string
	}{
		{"::ffff:10.77.0.12", "00000000000000000000ffff0a4d000c"},
		{"fd77::12", "fd770000000000000000000000000012"},
		{"fe80::5054:ff:fe4d:b", "fe80000000000000505400fffe4d000b"},
		{"::", "00000000000000000000000000000000"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			g := netip.MustParseAddr(tc.addr).As16()
			if w := GIDToWire(g); w != tc.wire {
				t.Fatalf("GIDToWire = %s, want %s", w, tc.wire)
			}
			back, err := WireToGID(tc.wire)
			if err != nil || back != g {
				t.Fatalf("WireToGID = %x, %v", back, err)
			}
			up, err := WireToGID(strings.ToUpper(tc.wire))
			if err != nil || up != g {
				t.Fatalf("upper case: %x, %v", up, err)
			}
		})
	}
	for _, bad := range []string{"", "0000", strings.Repeat("g", 32), strings.Repeat("0", 33)} {
		if _, err := WireToGID(bad); !errors.Is(err, unix.EINVAL) {
			t.Errorf("WireToGID(%q) = %v, want EINVAL", bad, err)
		}
	}
}

func TestInetNtop6(t *testing.T) {
	// Expected strings are glibc's inet_ntop output.
	tests := []struct {
		in, want string
	}{
		{"::ffff:10.77.0.12", "::ffff:10.77.0.12"},
		{"::", "::"},
		{"::1", "::1"},
		{"::10.0.0.1", "::10.0.0.1"},
		{"fd77::12", "fd77::12"},
		{"fe80::5054:ff:fe4d:b", "fe80::5054:ff:fe4d:b"},
		{"1:0:0:2:0:0:0:3", "1:0:0:2::3"},
		{"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"},
		{"1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"},
		{"1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"},
		{"1::", "1::"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := InetNtop6(netip.MustParseAddr(tc.in).As16()); got != tc.want {
				t.Fatalf("InetNtop6 = %q, want %q", got, tc.want)
			}
		})
	}
	// Differential: outside the IPv4 forms glibc and net/netip agree.
	r := testenv.Rand(t)
	for i := 0; i < 2000; i++ {
		var a [16]byte
		for j := range a {
			if r.IntN(3) > 0 {
				a[j] = byte(r.Uint32())
			}
		}
		if a == [16]byte{} || netip.AddrFrom16(a).Is4In6() || (a[0]|a[1]|a[2]|a[3]|a[4]|a[5]|a[6]|a[7]|a[8]|a[9]|a[10]|a[11]) == 0 {
			continue
		}
		if got, want := InetNtop6(a), netip.AddrFrom16(a).String(); got != want {
			t.Fatalf("%x: InetNtop6 %q, netip %q", a, got, want)
		}
	}
}

// exchangePair runs client and server of mode m against each other over
// net.Pipe.
func exchangePair(t *testing.T, m PingpongMode, cli, srv []PingpongDest) (gotSrv, gotCli []PingpongDest, log []segment) {
	t.Helper()
	ce, se, logf := recordedPipe()
	defer ce.Close()
	defer se.Close()
	errc := make(chan error, 1)
	go func() {
		var err error
		gotSrv, err = PingpongClientExchange(ce, m, cli)
		errc <- err
	}()
	gotCli, err := PingpongServerExchange(se, m, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return gotSrv, gotCli, logf()
}

func TestPingpongExchangeModes(t *testing.T) {
	r := testenv.Rand(t)
	mk := func(n int) []PingpongDest {
		ds := make([]PingpongDest, n)
		for i := range ds {
			ds[i] = PingpongDest{QPN: r.Uint32() & 0xffffff, PSN: r.Uint32() & 0xffffff, GID: netip.MustParseAddr("::ffff:10.0.0.1").As16()}
		}
		return ds
	}
	tests := []struct {
		mode PingpongMode
		n    int
	}{{PingpongRC, 1}, {PingpongUC, 1}, {PingpongUD, 1}, {PingpongSRQ, 1}, {PingpongSRQ, 16}, {PingpongSRQ, 255}}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			cli, srv := mk(tc.n), mk(tc.n)
			gotSrv, gotCli, log := exchangePair(t, tc.mode, cli, srv)
			for i := range cli {
				if gotCli[i] != cli[i] || gotSrv[i] != srv[i] {
					t.Fatalf("QP %d: got %+v / %+v", i, gotCli[i], gotSrv[i])
				}
			}
			// Who sends what, srq_pingpong.c: MAX_QP messages each way.
			n := PingpongMessages(tc.mode)
			if len(log) != 2*n+1 {
				t.Fatalf("%d writes, want %d", len(log), 2*n+1)
			}
			for i, s := range log {
				wantClient := i < n || i == 2*n
				size := PingpongDestSize
				if i == 2*n {
					size = DoneSize
				}
				if s.fromClient != wantClient || len(s.payload) != size {
					t.Fatalf("write %d: client=%v %d bytes", i, s.fromClient, len(s.payload))
				}
			}
			if tc.mode == PingpongSRQ {
				zero, _ := PingpongDest{}.Marshal()
				if !bytes.Equal(log[n-1].payload, zero) {
					t.Fatalf("last srq slot %q, want zero address", log[n-1].payload)
				}
			}
		})
	}
}

func TestPingpongExchangeErrors(t *testing.T) {
	one := []PingpongDest{{QPN: 1}}
	if _, err := PingpongClientExchange(nil, 0, one); !errors.Is(err, unix.EINVAL) {
		t.Errorf("invalid mode: %v", err)
	}
	if _, err := PingpongClientExchange(nil, PingpongRC, nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no address: %v", err)
	}
	if _, err := PingpongServerExchange(nil, PingpongSRQ, make([]PingpongDest, SRQMaxQP), nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("256 srq QPs: %v", err)
	}
	if _, err := PingpongClientExchange(nil, PingpongRC, []PingpongDest{{PSN: 1 << 24}}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("wide PSN: %v", err)
	}
	t.Run("server reply truncated", func(t *testing.T) {
		a, b := net.Pipe()
		go func() {
			buf := make([]byte, PingpongDestSize)
			io.ReadFull(b, buf)
			b.Write(capturedRC[:20])
			b.Close()
		}()
		_, err := PingpongClientExchange(a, PingpongRC, one)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("garbage from client", func(t *testing.T) {
		a, b := net.Pipe()
		go func() { a.Write(bytes.Repeat([]byte{'x'}, PingpongDestSize)); a.Close() }()
		_, err := PingpongServerExchange(b, PingpongRC, one, nil)
		if !errors.Is(err, unix.EPROTO) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("connect fails: nothing sent", func(t *testing.T) {
		a, b := net.Pipe()
		go func() { a.Write(capturedRC) }()
		_, err := PingpongServerExchange(b, PingpongRC, one, func([]PingpongDest) error { return unix.EINVAL })
		if !errors.Is(err, unix.EINVAL) {
			t.Fatalf("err %v", err)
		}
		b.Close()
		a.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := a.Read(make([]byte, 64)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("client read %d, %v after failed connect", n, err)
		}
	})
	t.Run("bad done", func(t *testing.T) {
		a, b := net.Pipe()
		go func() {
			a.Write(capturedRC)
			io.ReadFull(a, make([]byte, PingpongDestSize))
			a.Write([]byte("nope\x00"))
		}()
		_, err := PingpongServerExchange(b, PingpongRC, one, nil)
		if !errors.Is(err, unix.EPROTO) {
			t.Fatalf("err %v", err)
		}
	})
}

func TestPingpongModeNames(t *testing.T) {
	for m := PingpongRC; m <= PingpongSRQ; m++ {
		got, err := ParsePingpongMode(m.String())
		if err != nil || got != m {
			t.Errorf("%v: %v, %v", m, got, err)
		}
	}
	if _, err := ParsePingpongMode("xrc"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("xrc: %v", err)
	}
	if PingpongMode(0).IsValid() || PingpongMode(0).String() != "PingpongMode(0)" {
		t.Errorf("zero mode: %v", PingpongMode(0))
	}
	if PingpongSRQ.Tool() != "ibv_srq_pingpong" {
		t.Errorf("tool %s", PingpongSRQ.Tool())
	}
}

func TestPingpongOverTCP(t *testing.T) {
	// Over a real socket, as the CLI will run it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback TCP: %v", err)
	}
	defer ln.Close()
	srv := []PingpongDest{{QPN: 0x12, PSN: 0x345678}}
	cli := []PingpongDest{{QPN: 0x13, PSN: 0x9abcde}}
	errc := make(chan error, 1)
	var gotCli []PingpongDest
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		gotCli, err = PingpongServerExchange(c, PingpongUC, srv, nil)
		errc <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gotSrv, err := PingpongClientExchange(c, PingpongUC, cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if gotSrv[0] != srv[0] || gotCli[0] != cli[0] {
		t.Fatalf("got %+v / %+v", gotSrv, gotCli)
	}
}
