package oob

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/softroce/softroce/ib"
)

// perftestCapture is one perftest run: ib_write_bw, ib_read_bw or
// ib_atomic_bw with -x 1 -F -n 100 (captures/README.md).
type perftestCapture struct {
	file  string
	size  uint64 // -s (atomic: always 8)
	iters uint64 // -n
}

var perftestCaptures = []perftestCapture{
	{"write_bw.pcap", 4096, 100},
	{"read_bw.pcap", 4096, 100},
	{"atomic_bw.pcap", 8, 100},
}

// perftestSizes is the expected message sequence of a unidirectional BW
// test with one QP: versions, sys data (page size, cache line), MTU, the
// address, two syncs after connect, the end sync, five report fields, the
// close hand shake; each a client write followed by the server's.
var perftestSizes = []int{16, 4, 4, 2, 108, 108, 108, 108, 8, 8, 8, 8, 8, 108}

func TestPerftestCaptures(t *testing.T) {
	for _, pc := range perftestCaptures {
		t.Run(pc.file, func(t *testing.T) {
			c := loadCapture(t, pc.file)
			segs := c.segments
			if len(segs) != 2*len(perftestSizes)+2 {
				t.Fatalf("%d TCP payloads, want %d", len(segs), 2*len(perftestSizes)+2)
			}
			for i, n := range perftestSizes {
				cs, ss := segs[2*i], segs[2*i+1]
				if !cs.fromClient || ss.fromClient || len(cs.payload) != n || len(ss.payload) != n {
					t.Fatalf("exchange %d: client=%v %d bytes, client=%v %d bytes; want client then server, %d each",
						i, cs.fromClient, len(cs.payload), ss.fromClient, len(ss.payload), n)
				}
			}
			// The closing "done" goes both ways, in either order.
			tail := segs[len(segs)-2:]
			if tail[0].fromClient == tail[1].fromClient || !bytes.Equal(tail[0].payload, doneMsg) || !bytes.Equal(tail[1].payload, doneMsg) {
				t.Fatalf("closing messages %+v", tail)
			}
			// Versions, sys data and MTU as sent.
			for _, s := range segs[0:2] {
				if printable(s.payload) != PerftestVersion {
					t.Fatalf("version %q", s.payload)
				}
			}
			if binary.BigEndian.Uint32(segs[2].payload) != 4096 || binary.BigEndian.Uint32(segs[4].payload) != 64 ||
				!bytes.Equal(segs[6].payload, []byte("3\x00")) || !bytes.Equal(segs[7].payload, []byte("3\x00")) {
				t.Fatalf("sys data / MTU %x %x %q", segs[2].payload, segs[4].payload, segs[6].payload)
			}
			// Every address message parses and re-marshals to its bytes,
			// and each side always sends the same address.
			var cli, srv PerftestDest
			for i := 4; i < len(perftestSizes); i++ {
				if perftestSizes[i] != PerftestDestGIDSize {
					continue
				}
				for j, s := range segs[2*i : 2*i+2] {
					d, gid, err := ParsePerftestDest(s.payload)
					if err != nil || !gid {
						t.Fatalf("exchange %d: %v (GID form %v)", i, err, gid)
					}
					b, err := d.Marshal(true)
					if err != nil || !bytes.Equal(b, s.payload) {
						t.Fatalf("re-marshal: %q, %v; capture %q", b, err, s.payload)
					}
					p := &cli
					if j == 1 {
						p = &srv
					}
					if i == 4 {
						*p = d
					} else if *p != d {
						t.Fatalf("exchange %d: address changed: %+v, first %+v", i, d, *p)
					}
				}
			}
			if ipOfGID(cli.GID) != c.client || ipOfGID(srv.GID) != c.server {
				t.Errorf("GIDs %v %v, hosts %v %v", ipOfGID(cli.GID), ipOfGID(srv.GID), c.client, c.server)
			}
			// The reports: the client's is its measurement, the server's
			// is its uninitialised struct (not checked).
			rep := func(side int) BWReport {
				f := func(i int) uint64 { return binary.BigEndian.Uint64(segs[2*i+side].payload) }
				return BWReport{Size: f(8), Iters: f(9), BWPeak: math.Float64frombits(f(10)),
					BWAvg: math.Float64frombits(f(11)), MsgRateAvg: math.Float64frombits(f(12))}
			}
			cliRep, srvRep := rep(0), rep(1)
			if cliRep.Size != pc.size || cliRep.Iters != pc.iters {
				t.Errorf("client report size %d iters %d, want %d %d", cliRep.Size, cliRep.Iters, pc.size, pc.iters)
			}
			// BW average [MB/sec, MB = 2^20 bytes] = MsgRate [Mpps] * size.
			if got := cliRep.MsgRateAvg * 1e6 * float64(cliRep.Size) / (1 << 20); math.Abs(got-cliRep.BWAvg) > 1e-6*cliRep.BWAvg {
				t.Errorf("report: msg rate %g * size %d = %g MB/s, BW average %g", cliRep.MsgRateAvg, cliRep.Size, got, cliRep.BWAvg)
			}

			// Play both sides with the same inputs over net.Pipe.
			ce, se, log := recordedPipe()
			params := PerftestParams{MTU: ib.MTU1024, WithGID: true}
			type result struct {
				s   *PerftestSetup
				rep BWReport
				err error
			}
			side := func(conn recConn, role PerftestRole, local PerftestDest, my BWReport) result {
				pc, err := NewPerftestConn(conn, role)
				if err != nil {
					return result{err: err}
				}
				s, err := PerftestConnect(pc, params, []PerftestDest{local}, nil)
				if err != nil {
					return result{err: err}
				}
				r, err := PerftestFinish(pc, params, local, my)
				return result{s, r, err}
			}
			resc := make(chan result, 1)
			go func() { resc <- side(ce, PerftestClient, cli, cliRep) }()
			sr := side(se, PerftestServer, srv, srvRep)
			cr := <-resc
			if cr.err != nil || sr.err != nil {
				t.Fatalf("client %v, server %v", cr.err, sr.err)
			}
			if cr.s.Remote[0] != srv || sr.s.Remote[0] != cli || cr.s.MTU != ib.MTU1024 ||
				cr.s.CycleBuffer != 4096 || cr.s.CacheLineSize != 64 || cr.s.RemoteVersion != PerftestVersion {
				t.Errorf("setup client %+v server %+v", cr.s, sr.s)
			}
			if !sameReport(sr.rep, cliRep) || !sameReport(cr.rep, srvRep) {
				t.Errorf("reports: server got %+v, client got %+v", sr.rep, cr.rep)
			}
			got := log()
			if len(got) == len(segs) && got[len(got)-2].fromClient != segs[len(segs)-2].fromClient {
				got[len(got)-2], got[len(got)-1] = got[len(got)-1], got[len(got)-2]
			}
			sameSegments(t, got, segs)

			checkPerftestRoCE(t, c, pc, cli, srv, cr.s)
		})
	}
}

// sameReport compares reports bit for bit (the captured server report is
// garbage and may hold NaNs).
func sameReport(a, b BWReport) bool {
	return a.Size == b.Size && a.Iters == b.Iters && math.Float64bits(a.BWPeak) == math.Float64bits(b.BWPeak) &&
		math.Float64bits(a.BWAvg) == math.Float64bits(b.BWAvg) && math.Float64bits(a.MsgRateAvg) == math.Float64bits(b.MsgRateAvg)
}

// checkPerftestRoCE checks the RoCE traffic against the exchanged
// addresses: destination QPs, the client's first PSN, the R_Key and
// virtual address in every RETH / AtomicETH, the path MTU in the
// multi-packet writes, and the number of operations.
func checkPerftestRoCE(t *testing.T, c *capture, pc perftestCapture, cli, srv PerftestDest, s *PerftestSetup) {
	t.Helper()
	var requests int
	first := true
	for _, f := range c.roce {
		p := f.payload
		toServer := f.src == c.client && f.dst == c.server
		if !toServer && !(f.src == c.server && f.dst == c.client) {
			t.Fatalf("RoCE frame %v -> %v between unknown hosts", f.src, f.dst)
		}
		wantQP := cli.QPN
		if toServer {
			wantQP = srv.QPN
		}
		if bthDestQP(p) != wantQP {
			t.Fatalf("frame to server=%v: DestQP %#x, want %#x", toServer, bthDestQP(p), wantQP)
		}
		if toServer && first {
			first = false
			if bthPSN(p) != cli.PSN {
				t.Errorf("client's first PSN %#x, advertised %#x", bthPSN(p), cli.PSN)
			}
		}
		op := bthOpcode(p)
		switch op {
		case 0x06, 0x0a, 0x0c, 0x13, 0x14: // WRITE First/Only, READ Request, CMP_SWAP, FETCH_ADD
			if !toServer {
				t.Fatalf("request opcode %#x from the server", op)
			}
			requests++
			va, rkey := rethOf(p) // the AtomicETH starts with VA and R_Key too
			if rkey != srv.RKey {
				t.Fatalf("opcode %#x: R_Key %#x, server advertised %#x", op, rkey, srv.RKey)
			}
			if va < srv.VAddr || va >= srv.VAddr+uint64(s.CycleBuffer) {
				t.Fatalf("opcode %#x: VA %#x outside the server's buffer %#x+%d", op, va, srv.VAddr, s.CycleBuffer)
			}
			if op >= 0x13 && (va-srv.VAddr)%uint64(s.CacheLineSize) != 0 {
				t.Fatalf("atomic VA %#x not on a %d-byte line of %#x", va, s.CacheLineSize, srv.VAddr)
			}
			if op == 0x06 && len(p)-12-16-4 != s.MTU.Bytes() {
				t.Fatalf("WRITE First payload %d bytes, path MTU %d", len(p)-12-16-4, s.MTU.Bytes())
			}
		}
	}
	if uint64(requests) != pc.iters {
		t.Errorf("%d requests, -n %d", requests, pc.iters)
	}
}
