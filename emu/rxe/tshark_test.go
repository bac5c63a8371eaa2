package rxe

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestFramesDecodeInTshark captures a session of every RC operation plus
// UD and checks that Wireshark's InfiniBand dissector decodes each frame as
// RoCEv2 without a malformed packet or an error-level expert item.
func TestFramesDecodeInTshark(t *testing.T) {
	tshark := testutil.Tshark(t)
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	p.sendN(c, 3000, 4096, emu.SendSolicited)
	src, _, mra := p.a.buf(5000, 1)
	rem, rb, mrb := p.b.buf(5000, 2)
	binary.LittleEndian.PutUint64(rb, 1)
	p.a.postSend(c.qa,
		emu.SendWR{Opcode: emu.WRRDMAWriteWithImm, ImmData: 0x01020304, SGList: []emu.SGE{{Addr: src, Length: 2000, LKey: mra.LKey()}},
			RemoteAddr: rem, RKey: mrb.RKey()},
		emu.SendWR{Opcode: emu.WRRDMARead, SGList: []emu.SGE{{Addr: src, Length: 5000, LKey: mra.LKey()}}, RemoteAddr: rem, RKey: mrb.RKey()},
		emu.SendWR{Opcode: emu.WRAtomicFetchAndAdd, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}},
			RemoteAddr: rem, RKey: mrb.RKey(), CompareAdd: 3})
	dst, _, mrr := p.b.buf(64, 0)
	p.b.postRecv(c.qb, emu.RecvWR{SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrr.LKey()}}})
	p.settle()
	ua, ub := p.a.udQP(qpstate.TypeUD, nil), p.b.udQP(qpstate.TypeUD, nil)
	p.b.postRecv(ub, emu.RecvWR{SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrr.LKey()}}})
	p.a.postSend(ua, emu.SendWR{Opcode: emu.WRSendWithImm, AH: p.a.ah(p.b.ip, p.b.mac), RemoteQPN: ub.QPNum(),
		RemoteQKey: 0x11111111, SGList: []emu.SGE{{Addr: src, Length: 20, LKey: mra.LKey()}}})
	p.settle()
	frames := append(p.a.rec.take(t), p.b.rec.take(t)...)
	path := filepath.Join(t.TempDir(), "rxe.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65536, layers.LinkTypeEthernet)
	seen := map[wire.Opcode]bool{}
	for i := range frames {
		b := frames[i].Frame()
		seen[frames[i].Opcode()] = true
		w.WritePacket(gopacketCI(len(b)), b)
	}
	f.Close()
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.protocols", "-e", "_ws.malformed",
		"-e", "_ws.expert.severity", "-e", "infiniband.bth.opcode").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark decoded %d frames, want %d:\n%s", len(lines), len(frames), out)
	}
	for i, l := range lines {
		fs := strings.Split(l, "\t")
		if !strings.Contains(fs[0], "infiniband") || (len(fs) > 1 && fs[1] != "") ||
			(len(fs) > 2 && strings.Contains(fs[2], "8388608")) {
			t.Errorf("frame %d (%v): %q", i, frames[i].Opcode(), l)
		}
	}
	t.Logf("%d frames of %d opcodes decoded", len(frames), len(seen))
}

func gopacketCI(n int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Unix(1000, 0), CaptureLength: n, Length: n}
}
