//go:build linux

package peer

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LabConfig describes the network a Lab creates. The zero value of each
// field is documented with it.
type LabConfig struct {
	// Name is the network namespace's name (under /var/run/netns); ""
	// means "softroce-peer-<pid>".
	Name string
	// Bridge is the bridge's name; "" means "br0".
	Bridge string
	// MTU is the MTU of the bridge and every TAP; 0 means 9000.
	MTU int
	// Addr is the kernel's IPv4 address on the bridge (the out-of-band
	// TCP side of interop tests); the zero Prefix means 10.77.0.1/24.
	Addr netip.Prefix
	// Addr6 is the kernel's IPv6 address on the bridge; the zero Prefix
	// means fd77::1/64.
	Addr6 netip.Prefix
}

// Lab is a network namespace holding a bridge with a kernel address on it,
// where rxe peer VMs and softroce attach through TAPs. Close deletes the
// namespace with everything in it.
//
// Addressing (the default 10.77.0.0/24, fd77::/64): the bridge is .1/::1,
// softroce's own RoCE address is conventionally .2/::2, and VM i
// (1, 2, ...) is .10+i/::10+i (PeerAddr).
type Lab struct {
	cfg LabConfig

	mu     sync.Mutex
	caps   []*Capture
	closed bool
}

// NewLab creates the namespace, the bridge (up, MTU cfg.MTU, the kernel
// addresses on it, no DAD) and brings lo up. Equivalent to:
//
//	ip netns add NAME
//	ip -n NAME link add br0 type bridge; ip -n NAME link set br0 mtu 9000 up
//	ip -n NAME addr add 10.77.0.1/24 dev br0; ip -n NAME addr add fd77::1/64 dev br0 nodad
func NewLab(ctx context.Context, cfg LabConfig) (*Lab, error) {
	if cfg.Name == "" {
		cfg.Name = "softroce-peer-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Bridge == "" {
		cfg.Bridge = "br0"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 9000
	}
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.MustParsePrefix("10.77.0.1/24")
	}
	if !cfg.Addr6.IsValid() {
		cfg.Addr6 = netip.MustParsePrefix("fd77::1/64")
	}
	if !cfg.Addr.Addr().Is4() || !cfg.Addr6.Addr().Is6() || cfg.Addr6.Addr().Is4In6() {
		return nil, fmt.Errorf("new lab: Addr %v must be IPv4 and Addr6 %v IPv6: %w", cfg.Addr, cfg.Addr6, unix.EINVAL)
	}
	l := &Lab{cfg: cfg}
	if err := ipCmd(ctx, "netns", "add", cfg.Name); err != nil {
		return nil, fmt.Errorf("new lab: %w", err)
	}
	mtu := strconv.Itoa(cfg.MTU)
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", cfg.Bridge, "type", "bridge"},
		{"link", "set", cfg.Bridge, "mtu", mtu, "up"},
		{"addr", "add", cfg.Addr.String(), "dev", cfg.Bridge},
		{"addr", "add", cfg.Addr6.String(), "dev", cfg.Bridge, "nodad"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, append([]string{"-n", cfg.Name}, s...)...); err != nil {
			l.Close()
			return nil, fmt.Errorf("new lab: %w", err)
		}
	}
	return l, nil
}

// Name is the network namespace's name.
func (l *Lab) Name() string { return l.cfg.Name }

// Bridge is the bridge's name in the namespace.
func (l *Lab) Bridge() string { return l.cfg.Bridge }

// MTU is the MTU of the bridge and its TAPs.
func (l *Lab) MTU() int { return l.cfg.MTU }

// Addr is the kernel's IPv4 address on the bridge.
func (l *Lab) Addr() netip.Prefix { return l.cfg.Addr }

// Addr6 is the kernel's IPv6 address on the bridge.
func (l *Lab) Addr6() netip.Prefix { return l.cfg.Addr6 }

// PeerAddr returns the conventional addresses of VM i (1, 2, ...): the
// bridge's prefix with host part 10+i (10.77.0.11/24, fd77::11/64 for
// i=1 with the defaults; the IPv6 host part is written in hex digits that
// read like the IPv4 one).
func (l *Lab) PeerAddr(i int) (ip4, ip6 netip.Prefix) {
	return l.hostAddr(10 + i)
}

// SoftroceAddr returns the conventional addresses of softroce's own RoCE
// port on the lab (host part 2).
func (l *Lab) SoftroceAddr() (ip4, ip6 netip.Prefix) { return l.hostAddr(2) }

func (l *Lab) hostAddr(n int) (netip.Prefix, netip.Prefix) {
	a := l.cfg.Addr.Masked().Addr().As4()
	a[3] = byte(n)
	b := l.cfg.Addr6.Masked().Addr().As16()
	// fd77::11 for host 11: the decimal digits as hex digits.
	v, _ := strconv.ParseUint(strconv.Itoa(n), 16, 16)
	b[14], b[15] = byte(v>>8), byte(v)
	return netip.PrefixFrom(netip.AddrFrom4(a), l.cfg.Addr.Bits()),
		netip.PrefixFrom(netip.AddrFrom16(b), l.cfg.Addr6.Bits())
}

// AddTAP creates a persistent TAP device in the namespace, attached to
// the bridge with the lab's MTU and up, for a VM (VMConfig.TAP) or for
// softroce (open it inside Do). Equivalent to:
//
//	ip -n NAME tuntap add dev TAP mode tap
//	ip -n NAME link set TAP mtu 9000 master br0 up
func (l *Lab) AddTAP(ctx context.Context, name string) error {
	if err := ipCmd(ctx, "-n", l.cfg.Name, "tuntap", "add", "dev", name, "mode", "tap"); err != nil {
		return fmt.Errorf("lab %s: %w", l.cfg.Name, err)
	}
	if err := ipCmd(ctx, "-n", l.cfg.Name, "link", "set", name, "mtu", strconv.Itoa(l.cfg.MTU), "master", l.cfg.Bridge, "up"); err != nil {
		return fmt.Errorf("lab %s: %w", l.cfg.Name, err)
	}
	return nil
}

// StartVM adds a TAP named after cfg.Name (or "tapN") and starts a VM on
// it in the lab's namespace. cfg.NetNS and cfg.TAP are filled in; cfg.MTU
// defaults to the lab's MTU.
func (l *Lab) StartVM(ctx context.Context, cfg VMConfig) (*VM, error) {
	if cfg.TAP == "" {
		cfg.TAP = "tap-" + cfg.Name
		if len(cfg.TAP) > unix.IFNAMSIZ-1 {
			cfg.TAP = cfg.TAP[:unix.IFNAMSIZ-1]
		}
	}
	if err := l.AddTAP(ctx, cfg.TAP); err != nil {
		return nil, err
	}
	cfg.NetNS = l.cfg.Name
	if cfg.MTU == 0 {
		cfg.MTU = l.cfg.MTU
	}
	return Start(ctx, cfg)
}

// Exec runs a command in the namespace (`ip netns exec NAME args...`) and
// returns its combined output.
func (l *Lab) Exec(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.cfg.Name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ip netns exec %s %s: %w: %s", l.cfg.Name, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Close stops the lab's captures and deletes the namespace, which removes
// the bridge and TAPs in it. Stop the VMs first: a TAP qemu holds open
// goes away only when qemu exits. Closing a closed Lab does nothing.
func (l *Lab) Close() error {
	l.mu.Lock()
	caps, closed := l.caps, l.closed
	l.caps, l.closed = nil, true
	l.mu.Unlock()
	if closed {
		return nil
	}
	for _, c := range caps {
		c.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ipCmd(ctx, "netns", "del", l.cfg.Name)
}

// Capture is a tcpdump recording every frame on the lab's bridge.
type Capture struct {
	// Path is the pcap file (LINKTYPE_ETHERNET, full frames).
	Path    string
	log     string
	cmd     *exec.Cmd
	done    chan struct{}
	once    sync.Once
	err     error
	stopErr error
}

// StartCapture records every frame crossing the bridge into the pcap file
// path, with tcpdump in the namespace (`tcpdump -i br0 -s 0 -B 65536
// --immediate-mode -U -w path`: immediate mode, or the frames of the last
// partly filled TPACKET_V3 block are lost when tcpdump stops), and returns
// once tcpdump is capturing. tcpdump's messages go to path+".log".
// tcpdump runs at nice -10: immediate mode wakes it for every frame, and
// on a loaded machine at the default priority it fell behind a
// bandwidth test's frames until the kernel dropped some from its ring.
func (l *Lab) StartCapture(ctx context.Context, path string) (*Capture, error) {
	f, err := os.Create(path + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", l.cfg.Name, "nice", "-n", "-10", "tcpdump", "-i", l.cfg.Bridge, "-s", "0", "-B", "65536", "--immediate-mode", "-U", "-n", "-w", path)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("lab %s: start tcpdump: %w", l.cfg.Name, err)
	}
	c := &Capture{Path: path, log: path + ".log", cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	// tcpdump prints "listening on br0" once its socket is bound.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path + ".log")
		if strings.Contains(string(b), "listening on") {
			break
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("lab %s: tcpdump exited: %v: %s", l.cfg.Name, c.err, b)
		case <-ctx.Done():
			c.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("lab %s: tcpdump did not start: %s", l.cfg.Name, b)
		}
	}
	l.mu.Lock()
	l.caps = append(l.caps, c)
	l.mu.Unlock()
	return c, nil
}

// Stop ends the capture and waits for tcpdump to exit. It first waits
// (up to 10 s) for the file to stop growing: tcpdump exits on SIGINT
// without writing the frames still queued in its ring, so it must have
// caught up with the last frames of a run before it is stopped. Then
// SIGINT makes it flush and exit. It fails if tcpdump reports frames it did not
// write (dropped by the kernel, or received by its filter but not
// captured): the file would not hold every frame. It is safe to call more
// than once.
func (c *Capture) Stop() error {
	c.once.Do(func() {
		c.settle(500*time.Millisecond, 10*time.Second)
		syscall.Kill(c.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
		b, err := os.ReadFile(c.log)
		if err != nil {
			c.stopErr = err
			return
		}
		c.stopErr = checkTcpdumpStats(string(b))
	})
	return c.stopErr
}

// settle waits until the capture file has not grown for quiet, or until
// limit.
func (c *Capture) settle(quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) {
		var size int64
		if fi, err := os.Stat(c.Path); err == nil {
			size = fi.Size()
		}
		if size != last {
			last, since = size, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
		select {
		case <-c.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkTcpdumpStats reads tcpdump's closing statistics ("N packets
// captured", "N packets received by filter", "N packets dropped by
// kernel") and fails unless every frame was captured.
func checkTcpdumpStats(log string) error {
	stat := func(what string) (int, bool) {
		for _, l := range strings.Split(log, "\n") {
			if n, ok := strings.CutSuffix(strings.TrimSpace(l), " packets "+what); ok {
				v, err := strconv.Atoi(n)
				return v, err == nil
			}
			if n, ok := strings.CutSuffix(strings.TrimSpace(l), " packet "+what); ok {
				v, err := strconv.Atoi(n)
				return v, err == nil
			}
		}
		return 0, false
	}
	captured, ok1 := stat("captured")
	received, ok2 := stat("received by filter")
	dropped, ok3 := stat("dropped by kernel")
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("tcpdump: no capture statistics in its output: %q", log)
	}
	if dropped != 0 || captured != received {
		return fmt.Errorf("tcpdump: %d frames captured, %d received, %d dropped by the kernel: the capture is incomplete", captured, received, dropped)
	}
	return nil
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
