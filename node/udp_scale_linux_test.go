package node

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
)

// TestEightUDPHostsAllToAllWrite: eight nodes, each in its own namespace
// with a veth to one bridge, each bound to its own address on a UDP link.
// Every node RDMA-WRITEs to every other at once, round after round, and
// the data is checked at every target. The test logs the aggregate
// bandwidth and each node's counters.
func TestEightUDPHostsAllToAllWrite(t *testing.T) {
	const hosts, rounds, half = 8, 16, bufSize / 2
	br := testenv.NewNetNS(t)
	br.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	br.Run(t, "ip", "link", "set", "br0", "up")
	nodes := make([]*Node, hosts)
	ips := make([]netip.Addr, hosts)
	for i := range hosts {
		ns := testenv.NewNetNS(t)
		ips[i] = netip.AddrFrom4([4]byte{10, 80, 0, byte(i + 1)})
		port := fmt.Sprintf("p%d", i)
		br.Run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
		br.Run(t, "ip", "link", "set", port, "master", "br0", "up")
		ns.Run(t, "ip", "addr", "add", ips[i].String()+"/24", "dev", "eth0")
		ns.Run(t, "ip", "link", "set", "eth0", "up")
		nodes[i] = udpNodeIn(t, ns, fmt.Sprintf("softroce%d", i), []netip.Addr{ips[i]})
	}
	// ends[i][j] is node i's end of its connection with node j. Each
	// buffer's first half is what i writes, its second half what j
	// writes into it.
	ends := make([][]*end, hosts)
	for i := range ends {
		ends[i] = make([]*end, hosts)
	}
	for i := range hosts {
		for j := i + 1; j < hosts; j++ {
			ends[i][j], ends[j][i] = connectRC(t, nodes[i], nodes[j], ips[i], ips[j])
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, hosts*hosts)
	for i := range hosts {
		for j := range hosts {
			if i == j {
				continue
			}
			wg.Add(1)
			go func(a, b *end, seed byte) {
				defer wg.Done()
				for r := range rounds {
					fill(a.buf[:half], seed+byte(r))
					if _, err := a.qp.PostSend([]emu.SendWR{{WRID: uint64(r), Opcode: emu.WRRDMAWrite,
						SGList:     []emu.SGE{{Addr: a.addr, Length: half, LKey: a.mr.LKey}},
						RemoteAddr: b.addr + half, RKey: b.mr.RKey}}); err != nil {
						errs <- err
						return
					}
					if err := pollOne(a.cq); err != nil {
						errs <- fmt.Errorf("%s -> %s round %d: %w", a.n.Name(), b.n.Name(), r, err)
						return
					}
					if !bytes.Equal(b.buf[half:], a.buf[:half]) {
						errs <- fmt.Errorf("%s -> %s round %d: data differs", a.n.Name(), b.n.Name(), r)
						return
					}
				}
			}(ends[i][j], ends[j][i], byte(16*i+j))
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := float64(hosts*(hosts-1)*rounds*half) * 8
	t.Logf("%d hosts all-to-all RC WRITE over UDP: %d MiB in %v, aggregate %.1f Mbit/s",
		hosts, hosts*(hosts-1)*rounds*half>>20, elapsed.Round(time.Millisecond), total/elapsed.Seconds()/1e6)
	for _, n := range nodes {
		c := counters(t, n)
		s := n.Stats().UDP
		t.Logf("%s: udp rx %d tx %d unverifiable %d rx_dropped %d tx_errors %d; sent_pkts %d rcvd_pkts %d rcvd_seq_err %d duplicate_request %d",
			n.Name(), s.RxFrames, s.TxFrames, s.Unverifiable, s.RxDropped, s.TxErrors,
			c["sent_pkts"], c["rcvd_pkts"], c["rcvd_seq_err"], c["duplicate_request"])
		if s.Unverifiable != 0 || s.TxErrors != 0 {
			t.Errorf("%s: UDP stats %+v", n.Name(), s)
		}
	}
}

// pollOne waits up to 10 s for one successful completion on cq.
func pollOne(cq *emu.CQ) error {
	wc := make([]emu.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for cq.Poll(wc) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no completion after 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if wc[0].Status != emu.WCSuccess {
		return fmt.Errorf("completion: %v", wc[0].Status)
	}
	return nil
}
