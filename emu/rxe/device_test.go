package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu/kverbs"
)

// TestDeviceHandle: what New returns holds both halves the kernel links
// with container_of (rdma_device_to_ibdev, rdma_device_to_drv_device): the
// core device, embedded, and the driver's state behind it; Close removes
// the device from the core.
func TestDeviceHandle(t *testing.T) {
	d, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if d.Device == nil || d.r == nil || d.r.dev != d.Device || d.Name() != "rxe0" {
		t.Fatalf("device %v, driver %v", d.Device, d.r)
	}
	if d.Device.TakeMADLayer() != nil {
		t.Fatal("the core does not reach the driver's MAD layer")
	}
	if kverbs.IBDevToNode(d.Device) != kverbs.NUMANoNode {
		t.Fatal("ibdev_to_node")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d.TryGet() {
		t.Fatal("TryGet succeeded after Close")
	}
}
