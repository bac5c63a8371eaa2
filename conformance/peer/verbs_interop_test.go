//go:build linux

package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/link/udp"
	"github.com/softroce/softroce/wire"
)

// The daemon suite: Debian's unmodified rdma-core and perftest binaries on
// softroce (`softroce serve` on the lab, the tools under `softroce run`
// with the preload library, everything as nobody) against the same
// binaries on the kernel rxe VM, both directions, on two links: a TAP on
// the lab's bridge (softroce is a host of its own, 10.77.0.2) and --udp
// (softroce on UDP port 4791 of the namespace's kernel addresses,
// 10.77.0.1, the kernel doing IP and ARP).

// verbsTools names the interopTools entries the daemon suite runs: the
// pingpongs and perftest's BW tools.
var verbsTools = []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong",
	"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"}

// verbsIPv6Tools also run over the IPv6 GIDs (index 2 on both sides) on
// links whose IPv6 path differs from TestInteropRxe's (--udp: the kernel
// carries the datagrams).
var verbsIPv6Tools = map[string]bool{"ibv_rc_pingpong": true, "ib_write_bw": true}

// verbsLink is how the daemon sits on the lab.
type verbsLink struct {
	name string // "tap" or "udp": the subtest
	dev  string // the served device's name
	// serve is serve's link flags.
	serve []string
	// mtu is the path MTU of the cells (-m; ud_pingpong's -s): 4096 on
	// the TAP (MTU 9000), 1024 on --udp's default link MTU of 1500.
	mtu int
	// softAddr and softAddr6 are softroce's RoCE addresses (its GIDs 1
	// and 2).
	softAddr, softAddr6 netip.Addr
	// ipv6 runs verbsIPv6Tools over the IPv6 GIDs too.
	ipv6 bool
}

func verbsLinks(lab *Lab) []verbsLink {
	sr4, sr6 := lab.SoftroceAddr()
	return []verbsLink{
		{name: "tap", dev: "rxe1", mtu: 4096, softAddr: sr4.Addr(), softAddr6: sr6.Addr(),
			serve: []string{"--tap", softroceUserTAP, "--ip", sr4.String(), "--ip", sr6.String(), "--nodad"}},
		{name: "udp", dev: "rxe2", mtu: 1024, softAddr: lab.Addr().Addr(), softAddr6: lab.Addr6().Addr(), ipv6: true,
			serve: []string{"--udp", "--ip", lab.Addr().Addr().String(), "--ip", lab.Addr6().Addr().String()}},
	}
}

// softroceUserTAP is the daemon's TAP: persistent, owned by nobody,
// attached to the bridge and up, so that an unprivileged softroce opens
// it (as a user opens a TAP made for them by `ip tuntap add ... user`).
const softroceUserTAP = "sr1"

// debianTool checks that tool belongs to the Debian package pkg, that the
// libibverbs it links belongs to libibverbs1 and that the rxe provider
// belongs to ibverbs-providers: the unmodified userspace a user has.
func debianTool(t *testing.T, tool, pkg string) {
	t.Helper()
	path, err := exec.LookPath(tool)
	testenv.Require(t, err == nil, tool+" is not installed (Debian package "+pkg+")")
	owner := func(p string) string {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("dpkg", "-S", real).Output()
		if err != nil { // usrmerge: dpkg may know the /lib path
			out, err = exec.Command("dpkg", "-S", strings.TrimPrefix(real, "/usr")).Output()
		}
		testenv.Require(t, err == nil, "dpkg does not own "+real)
		owner, _, _ := strings.Cut(string(out), ":")
		return owner
	}
	if got := owner(path); got != pkg {
		t.Fatalf("%s belongs to %q, not %s", path, got, pkg)
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", path, err)
	}
	var verbs string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && strings.HasPrefix(f[0], "libibverbs.so") {
			verbs = f[2]
		}
	}
	if verbs == "" || owner(verbs) != "libibverbs1" {
		t.Fatalf("%s does not link Debian's libibverbs (%q):\n%s", path, verbs, out)
	}
	rxe, _ := filepath.Glob("/usr/lib/*/libibverbs/librxe-rdmav34.so")
	if len(rxe) == 0 || owner(rxe[0]) != "ibverbs-providers" {
		t.Fatalf("librxe-rdmav34.so of ibverbs-providers not found (%v)", rxe)
	}
}

// verbsUser is nobody with a home for softroce: the softroce binary, the
// runtime directory where the daemons' sockets and sysfs trees live, the
// cache where the preload library is built, and a /dev/net/tun node of
// its own.
type verbsUser struct {
	uid, gid int
	home     string
	bin      string
	tun      string
}

func newVerbsUser(t *testing.T, bin string) *verbsUser {
	t.Helper()
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	u := &verbsUser{}
	u.uid, _ = strconv.Atoi(nobody.Uid)
	u.gid, _ = strconv.Atoi(nobody.Gid)
	if u.home, err = os.MkdirTemp("", "softroce-verbs-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(u.home) })
	if err := os.Chmod(u.home, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"run", "cache"} {
		p := filepath.Join(u.home, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, u.uid, u.gid); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	u.bin = filepath.Join(u.home, "softroce")
	if err := os.WriteFile(u.bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// The TAP's owner opens it without privilege, given access to the
	// clone device (Debian's udev gives everyone; here a node of the
	// user's own, bind-mounted over /dev/net/tun for the daemon alone).
	u.tun = filepath.Join(u.home, "tun")
	if err := unix.Mknod(u.tun, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(u.tun, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	return u
}

// command returns `ip netns exec LAB setpriv ... PROG ARGS` as the user
// (no capabilities, no groups), with its home's directories. With tun,
// /dev/net/tun is the user's node in the command's mount namespace.
func (u *verbsUser) command(ctx context.Context, lab *Lab, tun bool, prog string, args ...string) *exec.Cmd {
	priv := []string{"setpriv", fmt.Sprintf("--reuid=%d", u.uid), fmt.Sprintf("--regid=%d", u.gid), "--clear-groups", prog}
	argv := append([]string{"netns", "exec", lab.Name()}, priv...)
	if tun {
		// ip netns exec gives the command a mount namespace of its own
		// (slave to the host's), so the bind stays in it.
		argv = append([]string{"netns", "exec", lab.Name(), "sh", "-c", `mount --bind "$0" /dev/net/tun && exec "$@"`, u.tun}, priv...)
	}
	cmd := exec.CommandContext(ctx, "ip", append(argv, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + u.home,
		"XDG_RUNTIME_DIR=" + filepath.Join(u.home, "run"), "XDG_CACHE_HOME=" + filepath.Join(u.home, "cache")}
	// Its own process group, killed as a whole: killing softroce run
	// leaves its program running, as any parent's death does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// killGroup kills cmd's process group (the program softroce run started
// with it).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// verbsDaemon is a running `softroce serve`.
type verbsDaemon struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
}

// serve starts `softroce serve -d DEV FLAGS` as the user in the lab and
// returns once it prints its environment.
func (u *verbsUser) serve(t *testing.T, ctx context.Context, lab *Lab, l verbsLink) *verbsDaemon {
	t.Helper()
	d := &verbsDaemon{done: make(chan struct{})}
	d.cmd = u.command(ctx, lab, l.name == "tap", u.bin, append([]string{"serve", "-d", l.dev}, l.serve...)...)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = &d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroup(d.cmd) })
	exports := make(chan int, 1)
	go func() {
		n := 0
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			d.out.Write([]byte(line))
			if strings.HasPrefix(line, "export ") {
				if n++; n == 3 {
					exports <- n
				}
			}
			if err != nil {
				break
			}
		}
		io.Copy(&d.out, stdout)
		d.cmd.Wait()
		close(d.done)
	}()
	select {
	case <-exports:
	case <-d.done:
		t.Fatalf("softroce serve %s exited: %v\n%s", strings.Join(l.serve, " "), d.cmd.ProcessState, d.out.String())
	case <-time.After(2 * time.Minute):
		killGroup(d.cmd)
		<-d.done
		t.Fatalf("softroce serve printed no environment:\n%s", d.out.String())
	}
	return d
}

// stop ends the daemon with SIGTERM, which must end it cleanly.
func (d *verbsDaemon) stop() error {
	// ip netns exec, sh and setpriv exec: the process is softroce.
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		killGroup(d.cmd)
		<-d.done
		return fmt.Errorf("softroce serve did not end on SIGTERM:\n%s", d.out.String())
	}
	if !d.cmd.ProcessState.Success() {
		return fmt.Errorf("softroce serve after SIGTERM: %v\n%s", d.cmd.ProcessState, d.out.String())
	}
	return nil
}

// addUserTAP creates the persistent TAP name owned by uid:gid, on the
// lab's bridge with its MTU, up.
func addUserTAP(ctx context.Context, lab *Lab, name string, uid, gid int) error {
	if err := ipCmd(ctx, "-n", lab.Name(), "tuntap", "add", "dev", name, "mode", "tap",
		"user", strconv.Itoa(uid), "group", strconv.Itoa(gid)); err != nil {
		return err
	}
	return ipCmd(ctx, "-n", lab.Name(), "link", "set", name, "mtu", strconv.Itoa(lab.MTU()), "master", lab.Bridge(), "up")
}

// verbsCell is one run: a tool, a link, a direction, an address family.
type verbsCell struct {
	tool           interopTool
	link           verbsLink
	softroceServer bool
	ipv6           bool
}

func (c verbsCell) name() string {
	return c.tool.name + "/" + cellSide(c.softroceServer, c.ipv6)
}

// args returns the VM's command line and softroce's tool command line
// (the same tool with the same options, without -d: the served device is
// the only one the program sees), both without the server's address.
func (c verbsCell) args(port int) (vm string, soft []string) {
	gidx, gflag := 1, "-g"
	if c.ipv6 {
		gidx = 2
	}
	if c.tool.perftest {
		gflag = "-x"
	}
	extra := fmt.Sprintf(" %s %d -p %d", gflag, gidx, port)
	if c.tool.mtuFlag {
		extra += fmt.Sprintf(" -m %d", c.link.mtu)
	} else {
		extra += fmt.Sprintf(" -s %d", c.link.mtu)
	}
	vm = c.tool.vm + extra
	soft = strings.Fields(strings.Replace(c.tool.vm, " -d rxe0", "", 1) + extra)
	return vm, soft
}

// TestInteropVerbs runs Debian's ibv_{rc,uc,ud,srq}_pingpong and
// ib_{write,read,send,atomic}_bw unmodified on softroce — `softroce serve`
// on the lab and the tool under `softroce run`, both as nobody without
// capabilities — against the same tools on one kernel rxe VM, softroce as
// server and as client, on a TAP and on --udp, over the IPv4 GIDs (and
// the IPv6 ones for rc_pingpong and write_bw). Each run must end with
// exit status 0 and the tool's result line on both sides; every RoCEv2
// frame of its capture on the bridge must parse with a good ICRC and
// decode in tshark, with the run's address family and opcodes; the VM's
// rxe must have logged no bad ICRC and accepted every frame sent to it
// (rcvd_pkts of `rdma statistic`, counted after rxe_rcv's header and ICRC
// checks, grows by the number of frames to the VM in the capture, less at
// most the retransmitted ones). After each link's runs, softroce's own
// counters (printed by serve at exit) must show every frame sent to it
// received or dropped, no ICRC error, and on --udp exactly the IPv4
// frames with an identification of udp.MaxSegments or more (rxe's)
// counted unverifiable.
// SOFTROCE_INTEROP_RUN=REGEXP selects cells by name (link/tool/dir/ip).
func TestInteropVerbs(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"tcpdump", "ss", "cc"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed")
	}
	testutil.Tshark(t)
	_, err := os.Stat("/dev/net/tun")
	testenv.Require(t, err == nil, "no /dev/net/tun (the tun module)")
	for _, name := range verbsTools {
		pkg := "perftest"
		if strings.HasPrefix(name, "ibv_") {
			pkg = "ibverbs-utils"
		}
		debianTool(t, name, pkg)
	}
	tools := map[string]interopTool{}
	for _, it := range interopTools {
		tools[it.name] = it
	}
	sel := interopSelection()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	u, lab, vm, dir := startUserVM(t, ctx)

	port := 19500
	for _, l := range verbsLinks(lab) {
		t.Run(l.name, func(t *testing.T) {
			var cells []verbsCell
			for _, name := range verbsTools {
				for _, srv := range []bool{true, false} {
					for _, v6 := range []bool{false, true} {
						c := verbsCell{tool: tools[name], link: l, softroceServer: srv, ipv6: v6}
						if v6 && (!l.ipv6 || !verbsIPv6Tools[name]) || sel != nil && !sel.MatchString(l.name+"/"+c.name()) {
							continue
						}
						cells = append(cells, c)
					}
				}
			}
			if len(cells) == 0 {
				t.Skip("no cell selected")
			}
			start := time.Now()
			d := u.serve(t, ctx, lab, l)
			t.Logf("softroce serve %s up in %v", strings.Join(l.serve, " "), time.Since(start).Round(time.Millisecond))
			t.Cleanup(func() { os.WriteFile(filepath.Join(dir, l.name+".serve.log"), []byte(d.out.String()), 0o644) })
			var sum verbsTally
			for _, c := range cells {
				port++
				t.Run(c.name(), func(t *testing.T) {
					for _, p := range runVerbsCell(t, ctx, lab, vm, u, dir, c, port, &sum) {
						t.Error(p)
					}
				})
			}
			if err := d.stop(); err != nil {
				t.Fatal(err)
			}
			checkServeCounters(t, l, d.out.String(), sum)
		})
	}
}

// runVerbsCell runs one cell and returns what went wrong with it (a
// harness failure is fatal).
func runVerbsCell(t *testing.T, ctx context.Context, lab *Lab, vm *VM, u *verbsUser, dir string, c verbsCell, port int, sum *verbsTally) (problems []string) {
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	vmCmd, softArgs := c.args(port)
	base := filepath.Join(dir, c.link.name+"_"+strings.ReplaceAll(c.name(), "/", "_"))
	before, err := rxeCounters(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	badBefore, err := rxeBadICRCs(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	capture, err := lab.StartCapture(ctx, base+".pcap")
	if err != nil {
		t.Fatal(err)
	}
	runStart := time.Now()
	peerIP, _ := lab.PeerAddr(1)
	runArgs := append([]string{"run", "-d", c.link.dev, "--"}, softArgs...)
	var (
		vmRes      Result
		vmErr      error
		softStatus int
		softOut    string
	)
	start := func(args ...string) *softroceProc { return u.start(t, ctx, lab, args...) }
	if c.softroceServer {
		sp := start(runArgs...)
		if err := waitListening(ctx, lab, sp, port); err != nil {
			killGroup(sp.cmd)
			t.Fatal(err)
		}
		vmRes, vmErr = vm.Run(ctx, vmCmd+" "+lab.Addr().Addr().String())
		wctx := ctx
		if vmErr != nil || vmRes.Status != 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		softStatus, softOut = sp.wait(wctx)
	} else {
		job, err := vm.StartListening(ctx, vmCmd, port)
		if err != nil {
			t.Fatal(err)
		}
		sp := start(append(runArgs, peerIP.Addr().String())...)
		softStatus, softOut = sp.wait(ctx)
		wctx := ctx
		if softStatus != 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		vmRes, vmErr = job.Wait(wctx)
	}
	elapsed := time.Since(runStart)
	if err := capture.Stop(); err != nil {
		errorf("%v", err)
	}
	after, err := rxeCounters(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(base+".softroce.log", []byte(softOut), 0o644)
	os.WriteFile(base+".rxe.log", []byte(vmRes.Output), 0o644)
	vmWant, softWant := c.tool.want(c.link.mtu), c.tool.want(c.link.mtu)
	if c.tool.serverWant != nil {
		if c.softroceServer {
			softWant = c.tool.serverWant(c.link.mtu)
		} else {
			vmWant = c.tool.serverWant(c.link.mtu)
		}
	}
	switch {
	case vmErr != nil:
		errorf("rxe side (%s): %v\n%s", vmCmd, vmErr, vmRes.Output)
	case vmRes.Status != 0 || !vmWant.MatchString(vmRes.Output):
		errorf("rxe side (%s) exited %d, want 0 and a line matching %v:\n%s", vmCmd, vmRes.Status, vmWant, vmRes.Output)
	}
	if softStatus != 0 || !softWant.MatchString(softOut) {
		errorf("softroce %s exited %d, want 0 and a line matching %v:\n%s", strings.Join(runArgs, " "), softStatus, softWant, softOut)
	}
	rep := checkPairCapture(t, ctx, base+".pcap", toolPair{opcodes: c.tool.opcodes(c.link.mtu), ipv6: c.ipv6}, errorf)
	softAddr := c.link.softAddr
	if c.ipv6 {
		softAddr = c.link.softAddr6
	}
	dirs, err := captureDirections(base+".pcap", softAddr)
	if err != nil {
		t.Fatal(err)
	}
	toVM, toSoft := dirs[false], dirs[true]
	t.Logf("%v; %d frames, %d RoCEv2 (%d to rxe, %d to softroce; repeated %d and %d): %s", elapsed.Round(time.Millisecond),
		rep.Frames, rep.RoCE, toVM.frames, toSoft.frames, toVM.repeats, toSoft.repeats, rep.OpcodeSummary())
	// rxe_rcv counts rcvd_pkts after its header and ICRC checks. A
	// frame repeated by a retransmission, or the last frames to a QP
	// (the ACK of the tool's last message and softroce's next message,
	// both still in flight when the tool, having counted its messages
	// over all its QPs, destroyed them: two per QP), may find its QP
	// gone and be dropped in hdr_check uncounted; any other shortfall
	// is a frame rxe refused.
	qps, err := vmQPs(base+".pcap", softAddr)
	if err != nil {
		t.Fatal(err)
	}
	got := int(after["rcvd_pkts"] - before["rcvd_pkts"])
	if got > toVM.frames || got < toVM.frames-toVM.repeats-2*qps {
		errorf("rxe accepted %d packets (rcvd_pkts), the capture has %d to it (%d repeated, to %d QPs): it refused some", got, toVM.frames, toVM.repeats, qps)
	}
	if bad, err := rxeBadICRCs(ctx, vm); err != nil {
		t.Fatal(err)
	} else if bad != badBefore {
		errorf("the VM's kernel logged %d more \"bad ICRC\" lines", bad-badBefore)
	}
	sum.toSoftroce += toSoft.frames
	sum.unverifiable += toSoft.unverifiable
	if c.link.name == "udp" && !c.ipv6 {
		// softroce's datagrams leave with identification 0 (the ICRC
		// it computes assumes it, and the capture's ICRCs are good);
		// rxe's carry nonzero ones, which softroce's link counts as
		// unverifiable unless the ICRC matches an identification below
		// udp.MaxSegments.
		if toVM.nonzeroID != 0 {
			errorf("%d of softroce's IPv4 frames carry a nonzero identification", toVM.nonzeroID)
		}
		t.Logf("IPv4 identification: rxe's frames %d nonzero of %d (unverifiable on softroce's side), softroce's %d nonzero of %d",
			toSoft.nonzeroID, toSoft.frames, toVM.nonzeroID, toVM.frames)
	}
	if len(problems) > 0 {
		t.Logf("capture and logs: %s.*", base)
	}
	return problems
}

// pinNeighbours makes the lab namespace's neighbour entries of VM i
// (IPv4, global and link-local IPv6) permanent, so that the namespace's
// kernel sends no ARP or ND probe of its own between runs: one that
// lands while a capture stops makes it incomplete.
func pinNeighbours(ctx context.Context, lab *Lab, i int) error {
	ip4, ip6 := lab.PeerAddr(i)
	a := ip4.Addr().As4()
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x4d, 0x00, a[3]} // VMConfig.MAC's default
	// The link-local address from the MAC (modified EUI-64).
	ll := [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
	for _, addr := range []netip.Addr{ip4.Addr(), ip6.Addr(), netip.AddrFrom16(ll)} {
		if err := ipCmd(ctx, "-n", lab.Name(), "neigh", "replace", addr.String(), "lladdr", mac.String(),
			"dev", lab.Bridge(), "nud", "permanent"); err != nil {
			return err
		}
	}
	return nil
}

// direction counts the RoCEv2 frames of a capture to one side.
type direction struct {
	frames int
	// nonzeroID counts the IPv4 frames with a nonzero identification.
	nonzeroID int
	// unverifiable counts the IPv4 frames whose identification the UDP
	// link's receiver does not try (udp.MaxSegments and above): it
	// checks the identifications a GSO send gives its segments.
	unverifiable int
	// repeats counts the frames whose destination QP, PSN and opcode an
	// earlier frame had (retransmissions).
	repeats int
}

// captureDirections reads a capture's RoCEv2 frames by direction: to
// softAddr (true) or not.
func captureDirections(path string, softAddr netip.Addr) (map[bool]*direction, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, err
	}
	type key struct {
		toSoft bool
		qp     uint32
		psn    uint32
		op     wire.Opcode
	}
	seen := map[key]bool{}
	d := map[bool]*direction{false: {}, true: {}}
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, err
		}
		pkt, err := wire.Parse(data)
		if err != nil {
			continue
		}
		toSoft := pkt.Dst().Unmap() == softAddr
		s := d[toSoft]
		s.frames++
		if !pkt.IsIPv6() && pkt.IPID() != 0 {
			s.nonzeroID++
		}
		if !pkt.IsIPv6() && pkt.IPID() >= udp.MaxSegments {
			s.unverifiable++
		}
		k := key{toSoft, pkt.BTH().DestQP(), pkt.BTH().PSN(), pkt.Opcode()}
		if seen[k] {
			s.repeats++
		}
		seen[k] = true
	}
}

// rxeBadICRCs counts the "bad ICRC" lines in the VM's kernel log
// (rxe_icrc_check's warning: rxe has no counter of them).
func rxeBadICRCs(ctx context.Context, vm *VM) (int, error) {
	r, err := vm.Run(ctx, "dmesg | grep -c 'bad ICRC'")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(r.Output))
}

// verbsTally sums what a link's captures show softroce received.
type verbsTally struct {
	// toSoftroce counts the RoCEv2 frames to softroce's address.
	toSoftroce int
	// unverifiable counts those over IPv4 with an identification of
	// udp.MaxSegments or more (--udp cannot check their ICRC).
	unverifiable int
}

// checkServeCounters reads the counters `softroce serve` printed at exit
// and checks them against the captures: softroce received every frame
// sent to it (rcvd_pkts, counted after the device's header and ICRC
// checks), found no bad ICRC, and on --udp counted exactly rxe's IPv4
// frames with identifications of udp.MaxSegments or more as unverifiable.
func checkServeCounters(t *testing.T, l verbsLink, out string, sum verbsTally) {
	t.Helper()
	var line string
	for _, ln := range strings.Split(out, "\n") {
		if strings.HasPrefix(ln, "link "+l.dev+"/1 ") {
			line = ln
		}
	}
	if line == "" {
		t.Fatalf("softroce serve printed no counters at exit:\n%s", out)
	}
	st := parseStatistic(line)
	t.Logf("softroce's counters: %s", line)
	// Like rxe, the device drops a frame whose QP is gone or not in a
	// state to take it before counting it or checking its ICRC; it
	// counts those in softroce_dropped_pkts.
	if got := st["rcvd_pkts"] + st["softroce_dropped_pkts"]; got != int64(sum.toSoftroce) {
		t.Errorf("softroce accepted %d packets (rcvd_pkts) and dropped %d, the captures have %d to it",
			st["rcvd_pkts"], st["softroce_dropped_pkts"], sum.toSoftroce)
	}
	if st["softroce_icrc_err"] != 0 {
		t.Errorf("softroce counted %d bad ICRCs", st["softroce_icrc_err"])
	}
	if l.name == "udp" && st["softroce_udp_unverifiable_icrc"] != int64(sum.unverifiable) {
		t.Errorf("softroce counted %d unverifiable ICRCs, the captures have %d IPv4 frames to it with an identification of at least %d",
			st["softroce_udp_unverifiable_icrc"], sum.unverifiable, udp.MaxSegments)
	}
}

// startUserVM starts what the tests of unmodified programs under an
// unprivileged softroce share: the Debian 12 peer VM (agent mode) in a new
// lab, the unprivileged user with the softroce binary, its TAP, and the
// VM's neighbour entries of softroce's addresses pinned. The VM shuts down
// at the end of t. dir holds the artifacts.
func startUserVM(t *testing.T, ctx context.Context) (u *verbsUser, lab *Lab, vm *VM, dir string) {
	t.Helper()
	img := buildTestImage(t)
	u = newVerbsUser(t, buildSoftroce(t))
	lab = newTestLab(t)
	dir = artifactDir(t)
	t.Logf("captures and logs in %s", dir)
	if err := addUserTAP(ctx, lab, softroceUserTAP, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	vm = startTestVM(t, ctx, lab, img, dir, 1, "")
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	t.Logf("VM up in %v", time.Since(start).Round(time.Millisecond))
	if err := pinNeighbours(ctx, lab, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := vm.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	})
	return u, lab, vm, dir
}

// cellSide names a cell's direction and address family as the cell names
// of the tests of unmodified programs end: "softroce-server/ipv4", ...
func cellSide(softroceServer, ipv6 bool) string {
	dir, ip := "softroce-client", "ipv4"
	if softroceServer {
		dir = "softroce-server"
	}
	if ipv6 {
		ip = "ipv6"
	}
	return dir + "/" + ip
}

// start runs the softroce binary with args as u in lab; whatever happens,
// nothing of it outlives t.
func (u *verbsUser) start(t *testing.T, ctx context.Context, lab *Lab, args ...string) *softroceProc {
	t.Helper()
	p := &softroceProc{done: make(chan struct{})}
	p.cmd = u.command(ctx, lab, false, u.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroup(p.cmd) })
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}
