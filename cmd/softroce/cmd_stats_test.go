package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/node"
)

// rxeCounters are rxe 6.12's port counters in rxe_hw_counters.c order.
var rxeCounters = []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
	"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs"}

// parseStatsLine parses `rdma statistic show` output into names in order
// and values.
func parseStatsLine(t *testing.T, out, dev string) ([]string, map[string]uint64) {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("want one line, got %q", out)
	}
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "link" || f[1] != dev+"/1" || len(f)%2 != 0 {
		t.Fatalf("want \"link %s/1 name value ...\", got %q", dev, out)
	}
	var names []string
	vals := map[string]uint64{}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			t.Fatalf("counter %s: value %q", f[i], f[i+1])
		}
		if _, dup := vals[f[i]]; dup {
			t.Fatalf("counter %s twice", f[i])
		}
		names = append(names, f[i])
		vals[f[i]] = v
	}
	return names, vals
}

func TestStatsFormat(t *testing.T) {
	code, out, errs := runCmd(t, "stats", "-d", "rxe9")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	names, vals := parseStatsLine(t, out, "rxe9")
	if len(names) < len(rxeCounters) {
		t.Fatalf("%d counters, want at least %d", len(names), len(rxeCounters))
	}
	for i, want := range rxeCounters {
		if names[i] != want {
			t.Errorf("counter %d is %s, want %s (kernel order)", i, names[i], want)
		}
	}
	for _, n := range names[len(rxeCounters):] {
		if n != "sent_bytes" && n != "rcvd_bytes" && !strings.HasPrefix(n, "softroce_") {
			t.Errorf("extra counter %s is not namespaced softroce_", n)
		}
	}
	for n, v := range vals {
		if v != 0 {
			t.Errorf("fresh device: %s = %d", n, v)
		}
	}

	code, js, errs := runCmd(t, "stats", "-d", "rxe9", "--json")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	var objs []map[string]any
	if err := json.Unmarshal([]byte(js), &objs); err != nil || len(objs) != 1 {
		t.Fatalf("JSON %q: %v", js, err)
	}
	o := objs[0]
	if o["ifname"] != "rxe9" || o["port"] != float64(1) {
		t.Errorf("ifname %v port %v", o["ifname"], o["port"])
	}
	for _, n := range names {
		if v, ok := o[n]; !ok || v != float64(vals[n]) {
			t.Errorf("JSON %s = %v, text %d", n, v, vals[n])
		}
	}
	if len(o) != len(names)+2 {
		t.Errorf("JSON has %d keys, want %d", len(o), len(names)+2)
	}
	// Key order follows the text order.
	prev := 0
	for _, n := range names {
		i := strings.Index(js, `"`+n+`":`)
		if i < prev {
			t.Errorf("JSON key %s out of order", n)
		}
		prev = i
	}
}

// udpFrame builds an Ethernet/IPv4/UDP frame.
func udpFrame(t *testing.T, dst net.HardwareAddr, src, to netip.Addr, port uint16, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 9, 9, 9, 9, 9}, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: to.AsSlice()}
	udp := &layers.UDP{SrcPort: 0xc000, DstPort: layers.UDPPort(port)}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestStatsCountDrops(t *testing.T) {
	mine, peer := link.Pipe()
	defer peer.Close()
	ip := netip.MustParseAddr("10.0.0.1")
	n, err := node.New(context.Background(), node.Config{Name: "softroce0", Link: mine, NoDAD: true, Addrs: []netip.Prefix{netip.PrefixFrom(ip, 24)}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	go func() { // drain what the node sends (announcements)
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		for {
			if _, err := peer.ReadPackets(bufs, sizes); err != nil {
				return
			}
		}
	}()
	src := netip.MustParseAddr("10.0.0.2")
	frames := [][]byte{
		udpFrame(t, n.MAC(), src, ip, 4791, bytes.Repeat([]byte{0xA5}, 40)), // garbage BTH: device drops
		udpFrame(t, n.MAC(), src, ip, 4791, []byte{1, 2, 3}),                // truncated: device drops
		udpFrame(t, n.MAC(), src, ip, 9, []byte("discard")),                 // not RoCE: host unhandled
		udpFrame(t, net.HardwareAddr{2, 1, 1, 1, 1, 1}, src, ip, 4791, nil), // another MAC: not for us
		{0xff, 0xff}, // runt
	}
	for _, f := range frames {
		if _, err := peer.WritePackets([][]byte{f}); err != nil && len(f) >= link.EthernetHeaderSize {
			t.Fatal(err)
		}
	}
	want := map[string]uint64{"softroce_dropped_pkts": 2, "softroce_host_unhandled": 1, "softroce_host_not_for_us": 1,
		"rcvd_pkts": 0, "softroce_icrc_err": 0}
	var got map[string]uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, err := nodeStats(n)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		writeStats(&b, n.Name(), 1, st)
		_, got = parseStatsLine(t, b.String(), "softroce0")
		if got["softroce_dropped_pkts"] >= 2 && got["softroce_host_unhandled"] >= 1 && got["softroce_host_not_for_us"] >= 1 {
			break
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}

// TestStatsNegativeFor: a negative --for is a usage error that says why.
func TestStatsNegativeFor(t *testing.T) {
	code, _, errs := runCmd(t, "stats", "--for", "-1s")
	if code != 2 || !strings.Contains(errs, "--for -1s: a duration to stay on the link cannot be negative") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestStatsKernel: stats lists the counters of the --kernel's rxe:
// sent_bytes and rcvd_bytes (Linux 7.2) on 7.3, the default, and not on
// 6.12; rxe's other counters and softroce's extras on both.
func TestStatsKernel(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		bytes bool
	}{{nil, true}, {[]string{"--kernel", "6.12"}, false}} {
		code, out, errs := runCmd(t, append([]string{"stats"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("stats %v: status %d, stderr %q", tc.args, code, errs)
		}
		for _, c := range []string{" rdma_recvs 0 ", " softroce_icrc_err 0 "} {
			if !strings.Contains(out, c) {
				t.Errorf("stats %v: no %q in %q", tc.args, c, out)
			}
		}
		if got := strings.Contains(out, " sent_bytes 0 rcvd_bytes 0 "); got != tc.bytes {
			t.Errorf("stats %v: byte counters %v, want %v: %q", tc.args, got, tc.bytes, out)
		}
	}
}
