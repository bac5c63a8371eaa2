package wire

import (
	"hash/crc32"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUpdateIEEEGuardPages runs updateIEEE on inputs that start at the
// beginning of a page and end at the end of it, between pages that fault
// when touched: the vectorised pass reads whole 64-byte blocks below the
// start and around the end, with the bytes outside the input masked, and
// must not touch them.
func TestUpdateIEEEGuardPages(t *testing.T) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[:ps], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(mem[2*ps:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	page := mem[ps : 2*ps]
	for i := range page {
		page[i] = byte(i*31 + 7)
	}
	for n := 0; n <= 600; n++ {
		for _, p := range [][]byte{page[:n], page[len(page)-n:]} {
			if got, want := updateIEEE(0x5a5a5a5a, p), crc32.Update(0x5a5a5a5a, crc32.IEEETable, p); got != want {
				t.Fatalf("updateIEEE over %d bytes at a page edge = %#x, crc32.Update %#x", n, got, want)
			}
		}
	}
}
