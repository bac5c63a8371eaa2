package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// TestLinkFlagsOnATAP: devinfo and stats build their device on a TAP
// attached to a bridge (--tap, --bridge, --ip, --mac, --mtu), which the
// kernel on the bridge can ping while stats keeps it up (--for).
func TestLinkFlagsOnATAP(t *testing.T) {
	ns := testenv.NewNetNS(t)
	_, err := exec.LookPath("ping")
	testenv.Require(t, err == nil, "ping is not installed (apt-get install iputils-ping)")
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "addr", "add", "10.80.0.1/24", "dev", "br0")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	link := []string{"--tap", "srcli0", "--bridge", "br0", "--ip", "10.80.0.5/24", "--mac", "02:80:00:00:00:05", "--mtu", "2200"}

	var code int
	var out, errs string
	ns.Do(func() error {
		code, out, errs = runCmd(t, append([]string{"devinfo", "-v", "-d", "rxe_tap"}, link...)...)
		return nil
	})
	if code != 0 {
		t.Fatalf("devinfo: status %d: %s", code, errs)
	}
	for _, want := range []string{"hca_id:\trxe_tap\n", "\tnode_guid:\t\t\t0080:00ff:fe00:0005\n",
		"\t\t\tactive_mtu:\t\t2048 (4)\n", "\t\t\tGID[  1]:\t\t::ffff:10.80.0.5, RoCE v2\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo on a TAP: %q missing in\n%s", want, out)
		}
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		ns.Do(func() error {
			code, out, errs = runCmd(t, append([]string{"stats", "--for", "3s"}, link...)...)
			return nil
		})
	}()
	time.Sleep(500 * time.Millisecond) // the TAP exists
	var ping []byte
	ping, err = ns.Command("ping", "-c", "3", "-i", "0.2", "-W", "2", "10.80.0.5").CombinedOutput()
	<-done
	if err != nil || !strings.Contains(string(ping), "3 received") {
		t.Errorf("ping the stats command's node: %v\n%s", err, ping)
	}
	if code != 0 {
		t.Fatalf("stats: status %d: %s", code, errs)
	}
	_, vals := parseStatsLine(t, out, "softroce0")
	if vals["softroce_host_rx_frames"] < 3 {
		t.Errorf("stats after 3 pings: host received %d frames\n%s", vals["softroce_host_rx_frames"], out)
	}
}

// TestGIDNetdevIsTheInterfaceTheKernelHas: the sysfs tree names a GID's
// netdev (gid_attrs/ndevs/N, which libibverbs turns into the entry's
// ndev_ifindex) where the kernel has that interface: the TAP softroce
// runs on. An in-memory link's GIDs have none (TestSysfsTree).
func TestGIDNetdevIsTheInterfaceTheKernelHas(t *testing.T) {
	needCC(t)
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.Run(t, "ip", "link", "set", "br0", "up")
	var code int
	var out, errs string
	ns.Do(func() error {
		code, out, errs = runCmd(t, "run", "-d", "rxe_ndev", "--tap", "srndev0", "--bridge", "br0", "--ip", "10.81.0.5/24",
			"--", "sh", "-c", `cat "$SYSFS_PATH/class/infiniband/rxe_ndev/ports/1/gid_attrs/ndevs/1"`)
		return nil
	})
	if code != 0 || out != "srndev0\n" {
		t.Fatalf("ndevs/1 of a device on the TAP srndev0: status %d, %q; stderr: %s", code, out, errs)
	}
}
