package node

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestKernelSeesClosedPorts: the kernel's sockets in the namespace learn
// that softroce listens on nothing but RoCEv2, the way they learn it from
// a Linux host: a connected UDP socket's next read fails with
// ECONNREFUSED (ICMP port unreachable, IPv4 and IPv6) and a TCP connect
// is refused (RST).
func TestKernelSeesClosedPorts(t *testing.T) {
	ns := bridgeNS(t)
	a := bridgeNode(t, ns, "softroce0", "srn0", macA, []netip.Addr{brA, brA6}, "")
	for _, ip := range []netip.Addr{brA, brA6} {
		t.Run("UDP "+ip.String(), func(t *testing.T) {
			var c net.Conn
			if err := ns.Do(func() (err error) {
				c, err = net.Dial("udp", netip.AddrPortFrom(ip, 9).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("anyone?")); err != nil {
				t.Fatal(err)
			}
			_, err := c.Read(make([]byte, 100))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("read after a datagram to %v port 9: %v; want ECONNREFUSED (ICMP port unreachable)", ip, err)
			}
		})
		t.Run("TCP "+ip.String(), func(t *testing.T) {
			err := ns.Do(func() error {
				c, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, 22).String(), 5*time.Second)
				if err == nil {
					c.Close()
				}
				return err
			})
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("connect to %v port 22: %v; want ECONNREFUSED (RST)", ip, err)
			}
		})
	}
	if s := a.Stats().Host; s.DestUnreachables != 2 || s.TCPResets != 2 {
		t.Errorf("host stats %+v; want 2 port unreachables and 2 resets", s)
	}
}
