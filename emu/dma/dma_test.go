package dma

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMemory(t *testing.T) {
	m := NewMemory(0)
	a, buf := m.Alloc(100)
	b, _ := m.Alloc(10)
	if a%PageSize != 0 || b%PageSize != 0 || b <= a+100 {
		t.Fatalf("addresses %#x %#x not page aligned and separated", a, b)
	}
	copy(buf, "hello")
	s, err := m.Slice(a, 5)
	if err != nil || string(s) != "hello" {
		t.Fatalf("Slice = %q, %v", s, err)
	}
	for _, tc := range []struct {
		name string
		addr uint64
		n    int
		want error
	}{
		{"inside", a + 10, 90, nil},
		{"past end", a + 10, 91, unix.EFAULT},
		{"guard page", a + 100, 1, unix.EFAULT},
		{"below all", 1, 1, unix.EFAULT},
		{"negative", a, -1, unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Slice(tc.addr, tc.n)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("Slice(%#x, %d) = %v, want %v", tc.addr, tc.n, err, tc.want)
			}
		})
	}
	if err := m.Free(a + 1); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Free(middle) = %v", err)
	}
	if err := m.Free(a); err != nil {
		t.Fatal(err)
	}
	if m.Contains(a, 1) {
		t.Fatal("freed memory still present")
	}
}

// TestVirtualDMA checks the kernel's virtual-DMA behaviour (ib_dma_map_*
// when ib_uses_virt_dma):
// every map returns the CPU address, nothing fails, nothing is tracked.
func TestVirtualDMA(t *testing.T) {
	mem := NewMemory(0)
	d := NewMapper(mem, nil)
	a, buf := mem.Alloc(3 * PageSize)
	copy(buf, "abc")
	sg := []Scatterlist{{Page: PageOf(a), Offset: 1, Length: 2}, {Page: PageOf(a + PageSize), Length: 10}}
	tbl := &SGTable{SGL: []Scatterlist{{Page: PageOf(a), Length: 5}}}
	for _, tc := range []struct {
		name string
		got  uint64
		want uint64
	}{
		{"MapSingle", d.MapSingle(a, 10, ToDevice), a},
		{"MapSingle outside memory", d.MapSingle(7, 10, ToDevice), 7},
		{"MapPage", d.MapPage(PageOf(a+PageSize), 16, 8, FromDevice), a + PageSize + 16},
		{"MapBvec", d.MapBvec(BioVec{Page: PageOf(a), Offset: 3, Len: 4}, Bidirectional), a + 3},
		{"MapSG count", uint64(d.MapSG(sg, ToDevice)), 2},
		{"MapSG entry 0", sg[0].DMAAddress, a + 1},
		{"MapSG entry 1", sg[1].DMAAddress, a + PageSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %#x, want %#x", tc.got, tc.want)
			}
		})
	}
	if err := d.MapSGTableAttrs(tbl, ToDevice, AttrSkipCPUSync); err != nil || tbl.Nents != 1 || tbl.SGL[0].DMAAddress != a {
		t.Fatalf("MapSGTableAttrs: %v, %+v", err, tbl)
	}
	d.UnmapSingle(a, 10, ToDevice)
	d.UnmapSingle(a, 10, ToDevice) // double unmap: a no-op on a virt-DMA device
	d.UnmapPage(a+PageSize+16, 8, FromDevice)
	d.UnmapBvec(a+3, 4, Bidirectional)
	d.UnmapSG(sg, ToDevice)
	d.UnmapSGTableAttrs(tbl, ToDevice, 0)
	d.SyncSingleForCPU(a, 1, FromDevice)
	d.SyncSingleForDevice(a, 1, ToDevice)
	if d.MappingError(a) || d.MappingError(MappingErrorAddr) {
		t.Fatal("a virtual-DMA device reported a mapping error")
	}
	if got := d.MaxSegSize(); got != math.MaxUint32 {
		t.Fatalf("MaxSegSize = %d", got)
	}
	if v := d.Violations(); len(v) != 0 {
		t.Fatalf("violations outside strict mode: %v", v)
	}
	p := make([]byte, 3)
	if err := d.DeviceRead(a, p); err != nil || string(p) != "abc" {
		t.Fatalf("DeviceRead after unmap (allowed outside strict) = %q, %v", p, err)
	}
}

func TestVirtDMAToPtrAndPage(t *testing.T) {
	mem := NewMemory(0)
	d := NewMapper(mem, nil)
	a, buf := mem.Alloc(2 * PageSize)
	dma := d.MapSingle(a+PageSize+5, 3, Bidirectional)
	p, err := d.VirtDMAToPtr(dma, 3)
	if err != nil {
		t.Fatal(err)
	}
	copy(p, "xyz")
	if !bytes.Equal(buf[PageSize+5:PageSize+8], []byte("xyz")) {
		t.Fatal("VirtDMAToPtr does not alias the memory")
	}
	if pg := d.VirtDMAToPage(dma); pg != PageOf(a+PageSize) || pg.Addr() != a+PageSize {
		t.Fatalf("VirtDMAToPage = %+v", pg)
	}
	if _, err := d.VirtDMAToPtr(a+2*PageSize, 1); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("VirtDMAToPtr(guard) = %v, want EFAULT", err)
	}
}

// TestStrict runs each misuse strict mode must find, and each correct use
// it must accept, as one scenario on a fresh mapper.
func TestStrict(t *testing.T) {
	type env struct {
		d   *Mapper
		a   uint64 // a 2-page buffer
		buf []byte
	}
	tests := []struct {
		name   string
		run    func(e env) error // returns the error of the checked access
		reason string            // "" = no violation expected
	}{
		{"device reads mapped TO_DEVICE", func(e env) error {
			x := e.d.MapSingle(e.a, 64, ToDevice)
			return e.d.DeviceRead(x, make([]byte, 64))
		}, ""},
		{"device writes mapped FROM_DEVICE then CPU reads after sync", func(e env) error {
			x := e.d.MapSingle(e.a, 64, FromDevice)
			if err := e.d.DeviceWrite(x, []byte("data")); err != nil {
				return err
			}
			e.d.SyncSingleForCPU(x, 64, FromDevice)
			return e.d.CPURead(e.a, make([]byte, 4))
		}, ""},
		{"device reads after unmap", func(e env) error {
			x := e.d.MapSingle(e.a, 64, ToDevice)
			e.d.UnmapSingle(x, 64, ToDevice)
			return e.d.DeviceRead(x, make([]byte, 8))
		}, "use after unmap"},
		{"device reads never-mapped buffer", func(e env) error {
			return e.d.DeviceRead(e.a, make([]byte, 8))
		}, "never mapped"},
		{"device reads past the mapping", func(e env) error {
			x := e.d.MapSingle(e.a, 16, ToDevice)
			return e.d.DeviceRead(x+8, make([]byte, 16))
		}, "outside the mapping"},
		{"device writes TO_DEVICE mapping", func(e env) error {
			x := e.d.MapSingle(e.a, 16, ToDevice)
			return e.d.DeviceWrite(x, []byte{1})
		}, "device writes a DMA_TO_DEVICE mapping"},
		{"device reads FROM_DEVICE mapping", func(e env) error {
			x := e.d.MapPage(PageOf(e.a), 0, 16, FromDevice)
			return e.d.DeviceRead(x, []byte{1})
		}, "device reads a DMA_FROM_DEVICE mapping"},
		{"device access after sync_for_cpu without sync_for_device", func(e env) error {
			x := e.d.MapSingle(e.a, 64, Bidirectional)
			e.d.SyncSingleForCPU(x, 64, Bidirectional)
			return e.d.DeviceRead(x, make([]byte, 8))
		}, "missing ib_dma_sync_single_for_device"},
		{"sync_for_device restores device ownership", func(e env) error {
			x := e.d.MapSingle(e.a, 64, Bidirectional)
			e.d.SyncSingleForCPU(x, 64, Bidirectional)
			if err := e.d.CPUWrite(e.a, []byte("new")); err != nil {
				return err
			}
			e.d.SyncSingleForDevice(x, 64, Bidirectional)
			return e.d.DeviceRead(x, make([]byte, 8))
		}, ""},
		{"sgtable mapped with SKIP_CPU_SYNC needs sync_for_device", func(e env) error {
			tbl := &SGTable{SGL: []Scatterlist{{Page: PageOf(e.a), Length: 32}}}
			if err := e.d.MapSGTableAttrs(tbl, ToDevice, AttrSkipCPUSync); err != nil {
				return err
			}
			return e.d.DeviceRead(tbl.SGL[0].DMAAddress, make([]byte, 8))
		}, "missing ib_dma_sync_single_for_device"},
		{"CPU reads FROM_DEVICE buffer without sync_for_cpu", func(e env) error {
			e.d.MapBvec(BioVec{Page: PageOf(e.a), Len: 32}, FromDevice)
			return e.d.CPURead(e.a+4, make([]byte, 4))
		}, "missing ib_dma_sync_single_for_cpu"},
		{"CPU writes a buffer the device owns", func(e env) error {
			e.d.MapSingle(e.a, 32, ToDevice)
			return e.d.CPUWrite(e.a, []byte{1})
		}, "device owns the buffer"},
		{"CPU reads TO_DEVICE buffer (allowed)", func(e env) error {
			e.d.MapSingle(e.a, 32, ToDevice)
			return e.d.CPURead(e.a, make([]byte, 4))
		}, ""},
		{"double unmap", func(e env) error {
			x := e.d.MapPage(PageOf(e.a), 0, 32, ToDevice)
			e.d.UnmapPage(x, 32, ToDevice)
			e.d.UnmapPage(x, 32, ToDevice)
			return nil
		}, "use after unmap"},
		{"unmap with another direction", func(e env) error {
			x := e.d.MapSingle(e.a, 32, ToDevice)
			e.d.UnmapSingle(x, 32, FromDevice)
			return nil
		}, "unmapped as DMA_FROM_DEVICE but mapped as DMA_TO_DEVICE"},
		{"sync of unmapped buffer", func(e env) error {
			e.d.SyncSingleForCPU(e.a, 8, FromDevice)
			return nil
		}, "never mapped"},
		{"sg unmap then device access", func(e env) error {
			sg := []Scatterlist{{Page: PageOf(e.a), Length: 8}, {Page: PageOf(e.a + PageSize), Length: 8}}
			if n := e.d.MapSG(sg, ToDevice); n != 2 {
				return errors.New("MapSG failed")
			}
			if err := e.d.DeviceRead(sg[1].DMAAddress, make([]byte, 8)); err != nil {
				return err
			}
			e.d.UnmapSG(sg, ToDevice)
			return e.d.DeviceRead(sg[1].DMAAddress, make([]byte, 8))
		}, "use after unmap"},
		{"bvec unmap then device write", func(e env) error {
			x := e.d.MapBvec(BioVec{Page: PageOf(e.a), Offset: 8, Len: 8}, FromDevice)
			e.d.UnmapBvec(x, 8, FromDevice)
			return e.d.DeviceWrite(x, []byte{1})
		}, "use after unmap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemory(0)
			var seen []Violation
			d := NewMapper(mem, &Config{Strict: true, OnViolation: func(v Violation) { seen = append(seen, v) }})
			a, buf := mem.Alloc(2 * PageSize)
			err := tc.run(env{d, a, buf})
			vs := d.Violations()
			if tc.reason == "" {
				if err != nil || len(vs) != 0 {
					t.Fatalf("unexpected violation: err %v, recorded %v", err, vs)
				}
				return
			}
			if len(vs) == 0 || !strings.Contains(vs[len(vs)-1].Reason, tc.reason) {
				t.Fatalf("violations %v, want one containing %q", vs, tc.reason)
			}
			if len(seen) != len(vs) {
				t.Fatalf("OnViolation saw %d, recorded %d", len(seen), len(vs))
			}
			if err != nil && !errors.Is(err, unix.EFAULT) {
				t.Fatalf("error %v does not wrap EFAULT", err)
			}
		})
	}
}

func TestStrictMappingError(t *testing.T) {
	mem := NewMemory(0)
	d := NewMapper(mem, &Config{Strict: true})
	a, _ := mem.Alloc(64)
	for _, tc := range []struct {
		name string
		addr uint64
		want bool
	}{
		{"inside memory", d.MapSingle(a, 64, ToDevice), false},
		{"past the end", d.MapSingle(a, 65, ToDevice), true},
		{"no memory", d.MapSingle(8, 1, ToDevice), true},
		{"DMA_NONE", d.MapSingle(a, 1, None), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.MappingError(tc.addr); got != tc.want {
				t.Fatalf("MappingError(%#x) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
	// A failing entry unmaps the ones before it.
	sg := []Scatterlist{{Page: PageOf(a), Length: 8}, {Page: PageOf(a), Length: PageSize}}
	if n := d.MapSG(sg, ToDevice); n != 0 {
		t.Fatalf("MapSG with a bad entry = %d, want 0", n)
	}
	tbl := &SGTable{SGL: sg}
	if err := d.MapSGTableAttrs(tbl, ToDevice, 0); !errors.Is(err, unix.EIO) {
		t.Fatalf("MapSGTableAttrs = %v, want EIO", err)
	}
	// Only the first MapSingle's mapping remains: once it is unmapped the
	// device may not touch the buffer.
	d.UnmapSingle(a, 64, ToDevice)
	if err := d.DeviceRead(a, make([]byte, 8)); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("entry 0 of the failed MapSG is still mapped: %v", err)
	}
}

func TestDirectionString(t *testing.T) {
	for d, want := range map[Direction]string{Bidirectional: "DMA_BIDIRECTIONAL", ToDevice: "DMA_TO_DEVICE",
		FromDevice: "DMA_FROM_DEVICE", None: "DMA_NONE", 9: "dma_data_direction(9)"} {
		if d.String() != want || d.IsValid() != (d <= FromDevice && d >= 0) {
			t.Errorf("%d: %q valid %v", int(d), d.String(), d.IsValid())
		}
	}
}

func BenchmarkDeviceReadStrict(b *testing.B) {
	mem := NewMemory(0)
	d := NewMapper(mem, &Config{Strict: true})
	a, _ := mem.Alloc(4096)
	x := d.MapSingle(a, 4096, ToDevice)
	p := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if err := d.DeviceRead(x, p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMemoryMap: Map places a buffer at a free page-aligned address (a
// freed buffer's included) and refuses one that is not aligned or meets a
// buffer.
func TestMemoryMap(t *testing.T) {
	m := NewMemory(0)
	a, _ := m.Alloc(2 * PageSize)
	b, _ := m.Alloc(PageSize)
	if err := m.Map(a+PageSize, make([]byte, 8)); !errors.Is(err, unix.EEXIST) {
		t.Errorf("map inside a buffer: %v, want EEXIST", err)
	}
	if err := m.Map(a+1, make([]byte, 8)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("map unaligned: %v, want EINVAL", err)
	}
	if err := m.Map(b-PageSize, make([]byte, 2*PageSize)); !errors.Is(err, unix.EEXIST) {
		t.Errorf("map over the next buffer: %v, want EEXIST", err)
	}
	if err := m.Free(a); err != nil {
		t.Fatal(err)
	}
	nb := []byte("fresh")
	if err := m.Map(a, nb); err != nil {
		t.Fatalf("map where a buffer was freed: %v", err)
	}
	got := make([]byte, 5)
	if _, err := m.ReadAt(got, a); err != nil || string(got) != "fresh" {
		t.Errorf("read %q %v", got, err)
	}
	if c, _ := m.Alloc(1); c <= b {
		t.Errorf("alloc after map at %#x, not past the buffers", c)
	}
}
