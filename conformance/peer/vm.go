//go:build linux

package peer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// VMConfig describes one rxe peer VM. The zero value of each optional
// field is documented with it.
type VMConfig struct {
	// Image is the image to boot (BuildImage). Required.
	Image *Image
	// Name names the VM in logs and is its hostname; "" means "peer".
	Name string
	// Cmd, if not empty, is a shell script the VM runs once (as /cmd.sh)
	// before powering off; Wait returns its exit status. If empty the VM
	// serves commands from the host (Run, StartJob) until Shutdown.
	Cmd string
	// NetNS is the network namespace (a name under /var/run/netns) qemu
	// runs in, where TAP must exist; "" means the caller's namespace.
	NetNS string
	// TAP is the TAP device the VM's virtio-net NIC (eth0) uses; "" means
	// the VM has no NIC (and so no rxe0).
	TAP string
	// MAC is eth0's address; nil means 52:54:00:4d:00:NN with NN the last
	// byte of IP (the addressing of the captures in wire/testdata).
	MAC net.HardwareAddr
	// IP is eth0's IPv4 address and prefix (e.g. 10.77.0.11/24); the zero
	// Prefix means none.
	IP netip.Prefix
	// IP6 is an extra global IPv6 address of eth0 (e.g. fd77::11/64),
	// which becomes GID index 2; the zero Prefix means none.
	IP6 netip.Prefix
	// MTU is eth0's MTU; 0 means 9000 (rxe's active MTU is then 4096).
	MTU int
	// Memory is the VM's memory in MiB; 0 means 512.
	Memory int
	// Timeout bounds the VM's life: qemu is killed when it expires; 0
	// means 10 minutes.
	Timeout time.Duration
	// Console, if not nil, receives the VM's console output as it comes
	// (for example a file kept as a test artifact).
	Console io.Writer
	// Accel is qemu's -accel value; "" means $SOFTROCE_PEER_ACCEL or, if
	// that is unset, "tcg" (no KVM needed).
	Accel string
	// Programs are extra executables for this VM only, by name: each is
	// put in /bin of the run archive (for example a test program built
	// on the host against the image's libraries). nil means none.
	Programs map[string][]byte
	// Chroot, if not "", is a root file system tree on the host (a
	// debroot tree) put into the run archive as /chroot: its directories,
	// regular files and symbolic links, for programs run with chroot
	// (Memory must hold it).
	Chroot string
}

// Result is the outcome of a command run in a VM.
type Result struct {
	// Status is the command's exit status (128+N when killed by signal N).
	Status int
	// Output is its standard output and standard error, interleaved.
	Output string
}

// Markers printed by /init and softroce-agent on the console.
const (
	markerBooted = "SOFTROCE-BOOTED"
	markerAgent  = "SOFTROCE-AGENT-READY"
	markerExit   = "SOFTROCE-EXIT="
	markerOut    = "SOFTROCE-OUT "
	markerDone   = "SOFTROCE-DONE "
	markerFailed = "SOFTROCE-INIT-FAILED"
)

// VM is a running rxe peer VM.
type VM struct {
	cfg   VMConfig
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string // per-run initramfs

	started time.Time
	exited  chan struct{} // closed when qemu has exited and the console is drained
	waitErr error         // qemu's exit, valid after exited

	mu       sync.Mutex
	lines    []string
	changed  chan struct{} // closed and replaced on each new line
	jobs     map[int]*Job
	nextJob  int
	status   int // from SOFTROCE-EXIT=, -1 until seen
	bootedAt time.Duration
	stderr   bytes.Buffer
	timedOut bool
}

// Start boots a VM. The VM runs until its command ends (VMConfig.Cmd),
// Shutdown or Kill is called, ctx is done or the timeout expires; callers
// must eventually call Wait or Kill to reap it.
func Start(ctx context.Context, cfg VMConfig) (*VM, error) {
	if cfg.Image == nil {
		return nil, fmt.Errorf("start peer VM: no image: %w", unix.EINVAL)
	}
	if cfg.Name == "" {
		cfg.Name = "peer"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 9000
	}
	if cfg.Memory == 0 {
		cfg.Memory = 512
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Accel == "" {
		cfg.Accel = os.Getenv("SOFTROCE_PEER_ACCEL")
	}
	if cfg.Accel == "" {
		cfg.Accel = "tcg"
	}
	if cfg.MAC == nil && cfg.IP.IsValid() {
		a := cfg.IP.Addr().As4()
		cfg.MAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x4d, 0x00, a[3]}
	}
	for _, s := range []string{cfg.Name, cfg.TAP, cfg.NetNS} {
		if strings.ContainsAny(s, " \t\n,=") {
			return nil, fmt.Errorf("start peer VM: bad name %q: %w", s, unix.EINVAL)
		}
	}

	dir, err := os.MkdirTemp("", "softroce-peer-"+cfg.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("start peer VM %s: %w", cfg.Name, err)
	}
	initrd := filepath.Join(dir, "initrd")
	if err := writeRunArchive(initrd, cfg.Image.Initrd, cfg.Cmd, cfg.Programs, cfg.Chroot); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start peer VM %s: %w", cfg.Name, err)
	}

	appendArgs := []string{"console=ttyS0", "quiet", "loglevel=1", "panic=-1", "mitigations=off",
		"softroce.name=" + cfg.Name, "softroce.mtu=" + strconv.Itoa(cfg.MTU)}
	if cfg.IP.IsValid() {
		appendArgs = append(appendArgs, "softroce.ip="+cfg.IP.String())
	}
	if cfg.IP6.IsValid() {
		appendArgs = append(appendArgs, "softroce.ip6="+cfg.IP6.String())
	}
	args := []string{
		"-accel", cfg.Accel, "-machine", "pc", "-cpu", "max", "-smp", "1",
		"-m", strconv.Itoa(cfg.Memory) + "M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-kernel", cfg.Image.Kernel, "-initrd", initrd,
		"-append", strings.Join(appendArgs, " "),
	}
	if cfg.TAP != "" {
		args = append(args,
			"-netdev", "tap,id=n0,ifname="+cfg.TAP+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,mac="+cfg.MAC.String())
	}
	var cmd *exec.Cmd
	if cfg.NetNS != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", cfg.NetNS, "qemu-system-x86_64"}, args...)...)
	} else {
		cmd = exec.Command("qemu-system-x86_64", args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	vm := &VM{cfg: cfg, cmd: cmd, dir: dir, exited: make(chan struct{}), changed: make(chan struct{}), jobs: make(map[int]*Job), status: -1}
	cmd.Stderr = &lockedWriter{mu: &vm.mu, w: &vm.stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if vm.stdin, err = cmd.StdinPipe(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	vm.started = time.Now()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start peer VM %s: %w", cfg.Name, err)
	}
	timer := time.AfterFunc(cfg.Timeout, func() {
		vm.mu.Lock()
		vm.timedOut = true
		vm.mu.Unlock()
		vm.Kill()
	})
	stop := context.AfterFunc(ctx, func() { vm.Kill() })
	go func() {
		vm.readConsole(stdout)
		vm.waitErr = cmd.Wait()
		timer.Stop()
		stop()
		os.RemoveAll(dir)
		vm.mu.Lock()
		close(vm.changed)
		vm.changed = nil
		for _, j := range vm.jobs {
			j.finish(-1)
		}
		vm.mu.Unlock()
		close(vm.exited)
	}()
	return vm, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (vm *VM) readConsole(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if vm.cfg.Console != nil {
				vm.cfg.Console.Write([]byte(line))
			}
			vm.addLine(strings.TrimRight(line, "\r\n"))
		}
		if err != nil {
			return
		}
	}
}

func (vm *VM) addLine(line string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.lines = append(vm.lines, line)
	if i := strings.Index(line, "SOFTROCE-"); i >= 0 {
		m := line[i:]
		switch {
		case strings.HasPrefix(m, markerBooted):
			vm.bootedAt = time.Since(vm.started)
		case strings.HasPrefix(m, markerExit):
			f := strings.Fields(strings.TrimPrefix(m, markerExit))
			if len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					vm.status = n
				}
			}
		case strings.HasPrefix(m, markerOut):
			id, rest, _ := strings.Cut(strings.TrimPrefix(m, markerOut), " ")
			if n, err := strconv.Atoi(id); err == nil && vm.jobs[n] != nil {
				vm.jobs[n].out.WriteString(rest + "\n")
			}
		case strings.HasPrefix(m, markerDone):
			f := strings.Fields(strings.TrimPrefix(m, markerDone))
			if len(f) == 2 {
				id, err1 := strconv.Atoi(f[0])
				st, err2 := strconv.Atoi(f[1])
				if err1 == nil && err2 == nil && vm.jobs[id] != nil {
					vm.jobs[id].finish(st)
				}
			}
		}
	}
	close(vm.changed)
	vm.changed = make(chan struct{})
}

// WaitConsole waits until a console line contains s and returns that
// line. It fails when ctx is done or the VM exits first.
func (vm *VM) WaitConsole(ctx context.Context, s string) (string, error) {
	next := 0
	for {
		vm.mu.Lock()
		for ; next < len(vm.lines); next++ {
			if strings.Contains(vm.lines[next], s) {
				l := vm.lines[next]
				vm.mu.Unlock()
				return l, nil
			}
		}
		ch := vm.changed
		vm.mu.Unlock()
		if ch == nil {
			return "", fmt.Errorf("peer VM %s: exited before printing %q%s", vm.cfg.Name, s, vm.tail())
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("peer VM %s: waiting for %q: %w%s", vm.cfg.Name, s, ctx.Err(), vm.tail())
		}
	}
}

// Console returns the console output so far (qemu's own error output
// follows it, if any).
func (vm *VM) Console() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	s := strings.Join(vm.lines, "\n")
	if vm.stderr.Len() > 0 {
		s += "\n[qemu stderr]\n" + vm.stderr.String()
	}
	return s
}

// tail is the end of the console for error messages.
func (vm *VM) tail() string {
	c := vm.Console()
	if len(c) > 3000 {
		c = "..." + c[len(c)-3000:]
	}
	return "\nconsole:\n" + c
}

// BootTime is how long the VM took from qemu's start to rxe0 being up
// (the SOFTROCE-BOOTED line), or 0 if it has not got there.
func (vm *VM) BootTime() time.Duration {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.bootedAt
}

// Wait waits for qemu to exit and returns the exit status /init printed
// (SOFTROCE-EXIT=), which is Cmd's status in one-shot mode and 255 when
// init failed. It fails if the VM printed no status (it was killed, timed
// out or crashed); the error holds the end of the console.
func (vm *VM) Wait() (int, error) {
	<-vm.exited
	vm.mu.Lock()
	st, timedOut := vm.status, vm.timedOut
	vm.mu.Unlock()
	switch {
	case timedOut:
		return -1, fmt.Errorf("peer VM %s: timed out after %v: %w%s", vm.cfg.Name, vm.cfg.Timeout, os.ErrDeadlineExceeded, vm.tail())
	case st < 0:
		return -1, fmt.Errorf("peer VM %s: no exit status (qemu: %v)%s", vm.cfg.Name, vm.waitErr, vm.tail())
	}
	return st, nil
}

// Done is closed when qemu has exited.
func (vm *VM) Done() <-chan struct{} { return vm.exited }

// Kill stops qemu at once (SIGKILL to its process group). It is safe to
// call more than once and after the VM has exited.
func (vm *VM) Kill() error {
	select {
	case <-vm.exited:
		return nil
	default:
	}
	if vm.cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-vm.cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	return err
}

// send writes one request line to the agent.
func (vm *VM) send(line string) error {
	if strings.ContainsAny(line, "\n\r") || len(line) > 4000 {
		return fmt.Errorf("peer VM %s: request must be one line of at most 4000 bytes: %w", vm.cfg.Name, unix.EINVAL)
	}
	select {
	case <-vm.exited:
		return fmt.Errorf("peer VM %s: exited: %w", vm.cfg.Name, net.ErrClosed)
	default:
	}
	_, err := io.WriteString(vm.stdin, line+"\n")
	return err
}

// Job is a command running in the VM's agent.
type Job struct {
	vm   *VM
	id   int
	cmd  string
	out  bytes.Buffer // under vm.mu
	st   int
	done chan struct{}
}

func (j *Job) finish(st int) {
	select {
	case <-j.done:
	default:
		j.st = st
		close(j.done)
	}
}

// StartJob starts cmd (one line of shell) in the background in an agent
// mode VM (VMConfig.Cmd empty) once the agent is up, and returns at once.
func (vm *VM) StartJob(ctx context.Context, cmd string) (*Job, error) {
	if vm.cfg.Cmd != "" {
		return nil, fmt.Errorf("peer VM %s: runs a fixed command, not the agent: %w", vm.cfg.Name, unix.EINVAL)
	}
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		return nil, err
	}
	vm.mu.Lock()
	vm.nextJob++
	j := &Job{vm: vm, id: vm.nextJob, cmd: cmd, done: make(chan struct{})}
	vm.jobs[j.id] = j
	vm.mu.Unlock()
	if err := vm.send(fmt.Sprintf("start %d %s", j.id, cmd)); err != nil {
		return nil, err
	}
	return j, nil
}

// Wait waits for the job to end and returns its status and output. If ctx
// is done first, the job is killed and Wait returns ctx's error with the
// output so far.
func (j *Job) Wait(ctx context.Context) (Result, error) {
	select {
	case <-j.done:
	case <-ctx.Done():
		j.Kill()
		select {
		case <-j.done:
		case <-time.After(30 * time.Second):
		}
		j.vm.mu.Lock()
		out := j.out.String()
		j.vm.mu.Unlock()
		return Result{Status: -1, Output: out}, fmt.Errorf("peer VM %s: %q: %w\noutput:\n%s", j.vm.cfg.Name, j.cmd, ctx.Err(), out)
	}
	j.vm.mu.Lock()
	r := Result{Status: j.st, Output: j.out.String()}
	j.vm.mu.Unlock()
	if r.Status < 0 {
		return r, fmt.Errorf("peer VM %s: %q: the VM exited before the command ended%s", j.vm.cfg.Name, j.cmd, j.vm.tail())
	}
	return r, nil
}

// Kill kills the job's process group in the VM.
func (j *Job) Kill() error { return j.vm.send(fmt.Sprintf("kill %d", j.id)) }

// StartListening starts cmd (a server such as `ibv_rc_pingpong -g 1` or
// `ib_write_bw -x 1 -F`) as a job and returns once a TCP socket listens on
// port in the VM, so a client may connect. If cmd exits or nothing listens
// within a minute, it kills the job and returns an error with its output.
func (vm *VM) StartListening(ctx context.Context, cmd string, port int) (*Job, error) {
	j, err := vm.StartJob(ctx, cmd)
	if err != nil {
		return nil, err
	}
	r, err := vm.Run(ctx, fmt.Sprintf("softroce-listening %d 60", port))
	if err == nil && r.Status == 0 {
		return j, nil
	}
	j.Kill()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := j.Wait(wctx)
	return nil, fmt.Errorf("peer VM %s: %q: nothing listens on TCP port %d (%v %s); its output:\n%s", vm.cfg.Name, cmd, port, err, strings.TrimSpace(r.Output), out.Output)
}

// Run runs cmd in the VM's agent and waits for it.
func (vm *VM) Run(ctx context.Context, cmd string) (Result, error) {
	j, err := vm.StartJob(ctx, cmd)
	if err != nil {
		return Result{Status: -1}, err
	}
	return j.Wait(ctx)
}

// Shutdown asks the agent to exit and waits for the VM to power off; it
// kills the VM if that takes longer than ctx allows.
func (vm *VM) Shutdown(ctx context.Context) error {
	if err := vm.send("exit 0"); err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		vm.Kill()
		return err
	}
	select {
	case <-vm.exited:
		return nil
	case <-ctx.Done():
		vm.Kill()
		<-vm.exited
		return fmt.Errorf("peer VM %s: shutdown: %w", vm.cfg.Name, ctx.Err())
	}
}
