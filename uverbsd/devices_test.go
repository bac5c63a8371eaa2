package uverbsd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

// TestAddAndRemoveADeviceWhileServing: AddDevice serves a second device
// beside the first, as `rdma link add` registers one: it takes uverbs1
// (minor 193) in the same tree, its node opens it (the File is of that
// device), a name served already is EEXIST. RemoveDevice takes its
// entries out, waits for its open file no longer than the grace, and the
// node no longer opens; the first device serves on throughout, cannot be
// removed that way, and a device added again takes the free number.
func TestAddAndRemoveADeviceWhileServing(t *testing.T) {
	opened := make(chan *emu.Device, 4)
	h := newHarness(t, func(cfg *uverbsd.Config) {
		open := cfg.Open
		cfg.Open = func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File {
			opened <- dev
			return open(dev, mem)
		}
	})
	mk := func(name string, mac byte) *node.Node {
		n, err := node.New(context.Background(), node.Config{Name: name, Seed: uint64(mac), MAC: []byte{2, 0, 0, 0, 0, mac}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	n1 := mk("rxe1", 0x11)
	if err := h.srv.AddDevice(n1.Device(), nil); err != nil {
		t.Fatal(err)
	}
	if got := h.srv.Devices(); !slices.Equal(got, []string{"rxe0", "rxe1"}) {
		t.Fatalf("Devices() = %v", got)
	}
	root := h.srv.SysfsPath()
	for p, want := range map[string]string{
		"class/infiniband_verbs/uverbs0/ibdev": "rxe0\n",
		"class/infiniband_verbs/uverbs1/ibdev": "rxe1\n",
		"class/infiniband_verbs/uverbs1/dev":   "231:193\n",
		"class/infiniband/rxe1/node_guid":      "0000:00ff:fe00:0011\n",
		"class/infiniband/rxe1/ports/1/gids/0": "fe80:0000:0000:0000:0000:00ff:fe00:0011\n",
		// The counters are there from the start, as the kernel's.
		"class/infiniband/rxe1/ports/1/hw_counters/sent_pkts": "0\n",
		// Its port's MAD nodes: umad1 and issm1.
		"class/infiniband_mad/umad1/ibdev": "rxe1\n",
		"class/infiniband_mad/umad1/dev":   "231:1\n",
		"class/infiniband_mad/issm1/dev":   "231:65\n",
	} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", p, b, err, want)
		}
	}
	if err := h.srv.AddDevice(mk("rxe1", 0x12).Device(), nil); !errors.Is(err, unix.EEXIST) {
		t.Errorf("AddDevice of a name served: %v, want EEXIST", err)
	}
	c, rh, err := openNode(h.srv.SocketPath(), "uverbs1")
	if err != nil || rh.Ret != 0 {
		t.Fatalf("open uverbs1: %v, Ret %d", err, rh.Ret)
	}
	defer c.Close()
	if dev := <-opened; dev != n1.Device() {
		t.Fatalf("uverbs1 opened %s, want rxe1", dev.Name())
	}
	for name, want := range map[string]unix.Errno{"uverbs2": unix.ENODEV, "uverbs": unix.ENODEV} {
		if c, rh, err := openNode(h.srv.SocketPath(), name); err != nil || rh.Ret != -int32(want) {
			t.Errorf("open %s: %v, Ret %d, want %d", name, err, rh.Ret, -int32(want))
		} else {
			c.Close()
		}
	}
	if _, err := h.srv.RemoveDevice("rxe0", 0, nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RemoveDevice of the first device: %v, want EINVAL", err)
	}
	if _, err := h.srv.RemoveDevice("rxe7", 0, nil); !errors.Is(err, unix.ENODEV) {
		t.Errorf("RemoveDevice of a name not served: %v, want ENODEV", err)
	}
	start := time.Now()
	inTime, err := h.srv.RemoveDevice("rxe1", 200*time.Millisecond, nil)
	if err != nil || inTime {
		t.Fatalf("RemoveDevice with its file open: in time %v, %v; want false, nil", inTime, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("RemoveDevice returned after %v, before its grace", d)
	}
	for _, p := range []string{"class/infiniband_verbs/uverbs1", "class/infiniband/rxe1", "class/infiniband_mad/umad1", "class/infiniband_mad/issm1"} {
		if _, err := os.Stat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after RemoveDevice: %v, want it gone", p, err)
		}
	}
	if got := h.srv.Devices(); !slices.Equal(got, []string{"rxe0"}) {
		t.Fatalf("Devices() after RemoveDevice = %v", got)
	}
	if c, rh, err := openNode(h.srv.SocketPath(), "uverbs1"); err != nil || rh.Ret != -int32(unix.ENODEV) {
		t.Errorf("open uverbs1 after RemoveDevice: %v, Ret %d, want ENODEV", err, rh.Ret)
	} else {
		c.Close()
	}
	c0, rh, err := openNode(h.srv.SocketPath(), "uverbs0")
	if err != nil || rh.Ret != 0 {
		t.Fatalf("open uverbs0 after rxe1's removal: %v, Ret %d", err, rh.Ret)
	}
	c0.Close()
	if dev := <-opened; dev != h.node.Device() {
		t.Fatalf("uverbs0 opened %s, want rxe0", dev.Name())
	}
	n2 := mk("rxe2", 0x13)
	if err := h.srv.AddDevice(n2.Device(), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "class/infiniband_verbs/uverbs1/ibdev")); err != nil || string(b) != "rxe2\n" {
		t.Errorf("the device added after the removal: uverbs1/ibdev %q (%v), want rxe2", b, err)
	}
}
