package rxe

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestLocalKeys checks the local key lookup rules (rxe lookup_mr with
// RXE_LOOKUP_LOCAL) that the
// transport relies on.
func TestLocalKeys(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	sge, mr := e.buf(64)
	ro := func() emu.SGE {
		addr, _ := e.dev.Memory().Alloc(64)
		m, err := e.pd.RegUserMR(addr, 64, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		return emu.SGE{Addr: addr, Length: 64, LKey: m.LKey()}
	}()
	otherPD, _ := e.dev.AllocPD(0)
	addr, _ := e.dev.Memory().Alloc(64)
	foreign, _ := otherPD.RegUserMR(addr, 64, addr, ib.AccessLocalWrite)
	fr, _ := e.pd.AllocMR(emu.MRTypeMemReg, 1)
	for _, c := range []struct {
		name   string
		sge    emu.SGE
		access ib.AccessFlags
		want   unix.Errno
	}{
		{"good", sge, ib.AccessLocalWrite, 0},
		{"inside", emu.SGE{Addr: sge.Addr + 60, Length: 4, LKey: mr.LKey()}, 0, 0},
		{"past the end", emu.SGE{Addr: sge.Addr + 60, Length: 5, LKey: mr.LKey()}, 0, unix.EACCES},
		{"wrong key byte", emu.SGE{Addr: sge.Addr, Length: 4, LKey: mr.LKey() ^ 1}, 0, unix.EINVAL},
		{"no LOCAL_WRITE", ro, ib.AccessLocalWrite, unix.EACCES},
		{"read-only source", ro, 0, 0},
		{"other PD", emu.SGE{Addr: addr, Length: 4, LKey: foreign.LKey()}, 0, unix.EINVAL},
		{"fast-reg MR not registered", emu.SGE{Addr: 0, Length: 0, LKey: fr.LKey()}, 0, unix.EINVAL},
		{"DMA lkey accepts any address", emu.SGE{Addr: 0x7777, Length: 4, LKey: e.pd.LocalDMALKey}, ib.AccessLocalWrite, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.r.lock()
			_, err := e.r.lookupLKey(qpOf(qp), c.sge, c.access)
			e.r.unlock()
			wantErrno(t, "lookup", err, c.want)
		})
	}
}

// TestGatherScatter moves data through SGE lists: user MRs directly, the
// PD's DMA lkey through the DMA mapper.
func TestGatherScatter(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	q := qpOf(qp)
	a, _ := e.buf(4)
	b, _ := e.buf(8)
	copy(mustSlice(t, e, a), "abcd")
	copy(mustSlice(t, e, b), "efghijkl")
	dst := make([]byte, 10)
	e.r.lock()
	n, err := e.r.gather(q, []emu.SGE{a, b}, dst)
	e.r.unlock()
	if err != nil || n != 10 || string(dst) != "abcdefghij" {
		t.Fatalf("gather %d %q %v", n, dst, err)
	}
	e.r.lock()
	n, err = e.r.scatter(q, []emu.SGE{b, a}, []byte("0123456789AB"))
	e.r.unlock()
	if err != nil || n != 12 || string(mustSlice(t, e, b)) != "01234567" || string(mustSlice(t, e, a)) != "89AB" {
		t.Fatalf("scatter %d %v", n, err)
	}
	e.r.lock()
	_, err = e.r.scatter(q, []emu.SGE{a}, []byte("too long"))
	e.r.unlock()
	wantErrno(t, "overflow", err, unix.ENOSPC)
}

func mustSlice(t *testing.T, e *env, s emu.SGE) []byte {
	b, err := e.dev.Memory().Slice(s.Addr, int(s.Length))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStrictDMAThroughDevice runs a kernel consumer's DMA-lkey buffers
// through a strict-mode device: the device's reads and writes are checked
// against the consumer's ib_dma_map_* and sync calls.
func TestStrictDMAThroughDevice(t *testing.T) {
	var seen []dma.Violation
	cfg := testConfig()
	cfg.Device.DMA = &dma.Config{Strict: true, OnViolation: func(v dma.Violation) { seen = append(seen, v) }}
	e := newEnvWith(t, cfg)
	q := qpOf(e.qp(qpstate.TypeRC, nil))
	m := e.dev.DMA()
	addr, buf := e.dev.Memory().Alloc(64)
	copy(buf, "payload!")
	sge := emu.SGE{Addr: addr, Length: 8, LKey: e.pd.LocalDMALKey}
	dst := make([]byte, 8)

	e.r.lock()
	_, err := e.r.gather(q, []emu.SGE{sge}, dst)
	e.r.unlock()
	if !errors.Is(err, unix.EFAULT) || len(seen) != 1 {
		t.Fatalf("unmapped send buffer: err %v, violations %v", err, seen)
	}
	d := m.MapSingle(addr, 64, dma.ToDevice)
	sge.Addr = d
	e.r.lock()
	_, err = e.r.gather(q, []emu.SGE{sge}, dst)
	e.r.unlock()
	if err != nil || !bytes.Equal(dst, []byte("payload!")) {
		t.Fatalf("mapped send buffer: %q %v", dst, err)
	}
	e.r.lock()
	_, err = e.r.scatter(q, []emu.SGE{sge}, []byte("x"))
	e.r.unlock()
	if !errors.Is(err, unix.EFAULT) {
		t.Fatalf("device write into a TO_DEVICE buffer: %v", err)
	}
	m.UnmapSingle(d, 64, dma.ToDevice)
	e.r.lock()
	_, err = e.r.gather(q, []emu.SGE{sge}, dst)
	e.r.unlock()
	if !errors.Is(err, unix.EFAULT) || seen[len(seen)-1].Reason != "use after unmap" {
		t.Fatalf("use after unmap: %v %v", err, seen)
	}
}
