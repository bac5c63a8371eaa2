package oob

import (
	"bytes"
	"testing"
)

func FuzzParsePingpongDest(f *testing.F) {
	f.Add(capturedRC)
	f.Add([]byte("0000:000011:aeba70:00000000000000000000ffff0a4d000b\x00"))
	f.Add([]byte("0000:000011:977fbf:fd770000000000000000000000000012\x00"))
	f.Add(bytes.Repeat([]byte{':'}, PingpongDestSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePingpongDest(b)
		if err != nil {
			return
		}
		// Whatever parses re-marshals to the same bytes up to hex case.
		m, err := d.Marshal()
		if err != nil {
			t.Fatalf("parsed %+v does not marshal: %v", d, err)
		}
		if !bytes.Equal(m, bytes.ToLower(b)) {
			t.Fatalf("%q re-marshals to %q", b, m)
		}
	})
}

func FuzzParsePerftestDest(f *testing.F) {
	f.Add(capturedWriteBW)
	plain, _ := writeBWClient.Marshal(false)
	f.Add(plain)
	f.Add(bytes.Repeat([]byte{'0'}, PerftestDestGIDSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, gid, err := ParsePerftestDest(b)
		if err != nil {
			return
		}
		m, err := d.Marshal(gid)
		if err != nil {
			t.Fatalf("parsed %+v does not marshal: %v", d, err)
		}
		if !bytes.Equal(m, bytes.ToLower(b)) {
			t.Fatalf("%q re-marshals to %q", b, m)
		}
	})
}

func FuzzParsePingpongFlags(f *testing.F) {
	f.Add("-g\x001\x00-n\x0020\x0010.77.0.11")
	f.Add("--port=0x10\x00-ec\x00--iters\x005")
	f.Add("-q\x00300\x00--\x00-x")
	f.Add("--odp\x00-c\x00UC\x00-o\x00-O")
	f.Fuzz(func(t *testing.T, s string) {
		args := bytes.Split([]byte(s), []byte{0})
		strs := make([]string, len(args))
		for i, a := range args {
			strs[i] = string(a)
		}
		for m := PingpongRC; m <= PingpongSRQ; m++ {
			c, err := ParsePingpongFlags(m, strs)
			if err == nil && (c.Port > 65535 || c.IBPort < 1 || (m == PingpongSRQ && (c.NumQP >= SRQMaxQP || c.NumQP > c.RxDepth))) {
				t.Fatalf("%v %q accepted out-of-range config %+v", m, strs, c)
			}
		}
		for p := PerftestWriteBW; p <= PerftestAtomicLat; p++ {
			c, err := ParsePerftestFlags(p, strs)
			if err == nil && (c.Iters < 5 || c.Size < 1 || c.Port > 65535 || c.ODP && (p.Verb() == VerbAtomic || c.Connection == "UC")) {
				t.Fatalf("%v %q accepted out-of-range config %+v", p, strs, c)
			}
		}
	})
}
