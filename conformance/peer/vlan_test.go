//go:build linux

package peer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softroce/softroce/internal/testenv"
)

// vlanGID matches the VM's listing of rxe0's GIDs, one "INDEX GID NDEV"
// line each, for the VLAN address.
var vlanGID = regexp.MustCompile(`(?m)^(\d+) 0000:0000:0000:0000:0000:ffff:0a4d:640b (\S+)$`)

// TestInteropVLAN: softroce on VLAN 100 of its TAP (--vlan 100) against
// Debian 13's kernel 6.12 rxe on a VLAN interface (eth0.100 above rxe0's
// eth0, whose address the core puts in rxe0's GID table), with
// ibv_rc_pingpong both ways (softroce server and client, path MTU 1024,
// the VLAN's IPv4 GIDs). Each run must end with both sides' result line,
// the kernel's GID of the VLAN address must name eth0.100, and every
// RoCEv2 frame on the bridge, softroce's and the kernel's, must carry the
// 802.1Q tag of VLAN 100 with priority 0 (the kernel's rxe leaves
// skb->priority at 0, which the VLAN device's default egress map sends as
// PCP 0) and parse with a good ICRC.
func TestInteropVLAN(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, Trixie)
	bin := buildSoftroce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lab := newTestLab(t)
	dir := artifactDir(t)
	if err := lab.AddTAP(ctx, softroceTAP); err != nil {
		t.Fatal(err)
	}
	vm := startTestVM(t, ctx, lab, img, dir, 1, "")
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	// rxe refuses a VLAN device (rxe_newlink: "rxe creation allowed on
	// top of a real device only"); the core gives rxe0 a GID for each
	// address of a VLAN above eth0 instead, its netdev the VLAN device,
	// and rxe sends through that device.
	setup := "/usr/bin/ip link add link eth0 name eth0.100 type vlan id 100 && " +
		"/usr/bin/ip addr add 10.77.100.11/24 dev eth0.100 && /usr/bin/ip link set eth0.100 up && sleep 1 && " +
		"for i in 0 1 2 3 4 5 6 7; do g=/sys/class/infiniband/rxe0/ports/1/gids/$i; " +
		"[ -r $g ] && echo \"$i $(cat $g) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/$i 2>/dev/null)\"; done; exit 0"
	res, err := vm.Run(ctx, setup)
	if err != nil || res.Status != 0 {
		t.Fatalf("VLAN setup in the VM: %d %v\n%s", res.Status, err, res.Output)
	}
	m := vlanGID.FindStringSubmatch(res.Output)
	if m == nil {
		t.Fatalf("rxe0 has no GID for 10.77.100.11:\n%s", res.Output)
	}
	gidx, ndev := m[1], m[2]
	t.Logf("rxe0's GID %s is 10.77.100.11 on %s", gidx, ndev)
	if ndev != "eth0.100" {
		t.Errorf("the kernel's VLAN GID names netdev %q, want eth0.100", ndev)
	}
	soft := []string{"pingpong", "--mode", "rc", "-n", "20", "-c", "-m", "1024", "-g", "1",
		"--tap", softroceTAP, "--bridge", "br0", "--vlan", "100", "--ip", "10.77.100.2/24", "--nodad"}
	vmCmd := "ibv_rc_pingpong -d rxe0 -g " + gidx + " -n 20 -c -m 1024"
	for i, server := range []bool{true, false} {
		name := map[bool]string{true: "softroce-server", false: "softroce-client"}[server]
		t.Run(name, func(t *testing.T) {
			port := 19801 + i
			pcap := filepath.Join(dir, name+".pcap")
			capture, err := lab.StartCapture(ctx, pcap)
			if err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{}, soft...), "-p", fmt.Sprint(port))
			var vmRes Result
			var softStatus int
			var softOut string
			if server {
				sp, err := startSoftroce(ctx, lab, bin, args...)
				if err != nil {
					t.Fatal(err)
				}
				if err := waitListening(ctx, lab, sp, port); err != nil {
					t.Fatal(err)
				}
				vmRes, err = vm.Run(ctx, fmt.Sprintf("%s -p %d %s", vmCmd, port, lab.Addr().Addr()))
				if err != nil {
					t.Fatal(err)
				}
				softStatus, softOut = sp.wait(ctx)
			} else {
				job, err := vm.StartListening(ctx, fmt.Sprintf("%s -p %d", vmCmd, port), port)
				if err != nil {
					t.Fatal(err)
				}
				peer4, _ := lab.PeerAddr(1)
				sp, err := startSoftroce(ctx, lab, bin, append(args, peer4.Addr().String())...)
				if err != nil {
					t.Fatal(err)
				}
				softStatus, softOut = sp.wait(ctx)
				if vmRes, err = job.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := capture.Stop(); err != nil {
				t.Error(err)
			}
			os.WriteFile(filepath.Join(dir, name+".softroce.log"), []byte(softOut), 0o644)
			if vmRes.Status != 0 || !pingpongOK.MatchString(vmRes.Output) {
				t.Errorf("rxe 6.12 (%s) exited %d:\n%s", vmCmd, vmRes.Status, vmRes.Output)
			}
			if softStatus != 0 || !pingpongOK.MatchString(softOut) {
				t.Errorf("softroce (%s) exited %d:\n%s", strings.Join(args, " "), softStatus, softOut)
			}
			rep, err := CheckCapture(pcap)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.BadICRC) > 0 {
				t.Errorf("bad ICRCs: %v", rep.BadICRC)
			}
			checkVLANTags(t, pcap, lab)
		})
	}
}

// checkVLANTags reads pcap and checks that every RoCEv2 frame (UDP port
// 4791) carries VLAN 100 with priority 0, and that both softroce's and
// the VM's MAC sent some.
func checkVLANTags(t *testing.T, pcap string, lab *Lab) {
	t.Helper()
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	senders := map[string]int{}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || udp.DstPort != 4791 {
			continue
		}
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		senders[eth.SrcMAC.String()]++
		q, _ := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if q == nil || q.VLANIdentifier != 100 || q.Priority != 0 {
			t.Errorf("RoCEv2 frame from %v: 802.1Q %+v, want VLAN 100 priority 0", eth.SrcMAC, q)
			return
		}
	}
	if len(senders) != 2 {
		t.Errorf("RoCEv2 frames from %v, want softroce's and the VM's", senders)
	}
}
