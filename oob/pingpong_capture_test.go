package oob

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// recConn records every Write on one side of a stream.
type recConn struct {
	net.Conn
	fromClient bool
	mu         *sync.Mutex
	log        *[]segment
}

func (c recConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	*c.log = append(*c.log, segment{fromClient: c.fromClient, payload: append([]byte(nil), b...)})
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// recordedPipe returns the two ends of a net.Pipe whose writes are logged
// in order.
func recordedPipe() (client, server recConn, log func() []segment) {
	a, b := net.Pipe()
	var mu sync.Mutex
	var l []segment
	client = recConn{Conn: a, fromClient: true, mu: &mu, log: &l}
	server = recConn{Conn: b, fromClient: false, mu: &mu, log: &l}
	return client, server, func() []segment {
		mu.Lock()
		defer mu.Unlock()
		return append([]segment(nil), l...)
	}
}

// sameSegments compares two exchanges: direction and bytes of each write.
func sameSegments(t *testing.T, got, want []segment) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d writes, capture has %d", len(got), len(want))
	}
	for i := range want {
		if got[i].fromClient != want[i].fromClient || !bytes.Equal(got[i].payload, want[i].payload) {
			t.Errorf("write %d: client=%v %q, capture client=%v %q", i, got[i].fromClient, got[i].payload, want[i].fromClient, want[i].payload)
		}
	}
}

func TestPingpongCaptures(t *testing.T) {
	for _, name := range []string{"rc_pingpong.pcap", "rc_pingpong_ipv6.pcap"} {
		t.Run(name, func(t *testing.T) {
			c := loadCapture(t, name)
			// Who sends what: client address, server address, client "done".
			if len(c.segments) != 3 || !c.segments[0].fromClient || c.segments[1].fromClient || !c.segments[2].fromClient {
				t.Fatalf("segments %+v: want client dest, server dest, client done", c.segments)
			}
			if len(c.segments[0].payload) != PingpongDestSize || len(c.segments[1].payload) != PingpongDestSize {
				t.Fatalf("dest sizes %d, %d", len(c.segments[0].payload), len(c.segments[1].payload))
			}
			if !bytes.Equal(c.segments[2].payload, doneMsg) {
				t.Fatalf("closing message %q", c.segments[2].payload)
			}
			cli, err := ParsePingpongDest(c.segments[0].payload)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := ParsePingpongDest(c.segments[1].payload)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range []PingpongDest{cli, srv} {
				b, err := d.Marshal()
				if err != nil || !bytes.Equal(b, c.segments[i].payload) {
					t.Errorf("re-marshal %d: %q, %v; capture %q", i, b, err, c.segments[i].payload)
				}
			}
			// The GIDs are the RoCE addresses of the hosts: the TCP
			// addresses for the IPv4 GIDs (index 1); the IPv6 run
			// (GID index 2) exchanges over IPv4 and sends RoCE over IPv6.
			cliIP, srvIP := ipOfGID(cli.GID), ipOfGID(srv.GID)
			if cliIP.Is4() && (cliIP != c.client || srvIP != c.server) {
				t.Errorf("GIDs %v %v, hosts %v %v", cliIP, srvIP, c.client, c.server)
			}
			// Play both sides against each other with the same inputs.
			ce, se, log := recordedPipe()
			var gotSrv []PingpongDest
			var connected []PingpongDest
			done := make(chan error, 1)
			go func() {
				var err error
				gotSrv, err = PingpongClientExchange(ce, PingpongRC, []PingpongDest{cli})
				done <- err
			}()
			gotCli, err := PingpongServerExchange(se, PingpongRC, []PingpongDest{srv}, func(r []PingpongDest) error {
				connected = r
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if gotCli[0] != cli || gotSrv[0] != srv || connected[0] != cli {
				t.Errorf("exchange returned %+v / %+v", gotCli, gotSrv)
			}
			sameSegments(t, log(), c.segments)
			// The RoCE traffic uses what was advertised: frames to the
			// server carry its QPN, the first one the client's PSN (its
			// sq_psn), and the other way round.
			var firstToSrv, firstToCli *roceFrame
			for i := range c.roce {
				f := &c.roce[i]
				switch {
				case f.src == cliIP && f.dst == srvIP:
					if bthDestQP(f.payload) != srv.QPN {
						t.Fatalf("frame to server: DestQP %#x, server QPN %#x", bthDestQP(f.payload), srv.QPN)
					}
					if firstToSrv == nil {
						firstToSrv = f
					}
				case f.src == srvIP && f.dst == cliIP:
					if bthDestQP(f.payload) != cli.QPN {
						t.Fatalf("frame to client: DestQP %#x, client QPN %#x", bthDestQP(f.payload), cli.QPN)
					}
					if firstToCli == nil && bthOpcode(f.payload) != 0x11 { // not an ACK
						firstToCli = f
					}
				default:
					t.Fatalf("RoCE frame %v -> %v between unknown hosts", f.src, f.dst)
				}
			}
			if firstToSrv == nil || firstToCli == nil {
				t.Fatal("no RoCE traffic both ways")
			}
			// Without -c the SEND payloads are the tools' fill, 0x7b
			// (BTH 12 bytes before, ICRC 4 after).
			for _, f := range []*roceFrame{firstToSrv, firstToCli} {
				for _, b := range f.payload[12 : len(f.payload)-4] {
					if b != PingpongFill {
						t.Fatalf("SEND payload byte %#x, want the fill %#x", b, PingpongFill)
					}
				}
			}
			if bthPSN(firstToSrv.payload) != cli.PSN {
				t.Errorf("client's first PSN %#x, advertised %#x", bthPSN(firstToSrv.payload), cli.PSN)
			}
			if bthPSN(firstToCli.payload) != srv.PSN {
				t.Errorf("server's first PSN %#x, advertised %#x", bthPSN(firstToCli.payload), srv.PSN)
			}
		})
	}
}
