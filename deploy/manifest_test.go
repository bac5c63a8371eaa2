package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/uverbsd"
)

const manifestPath = "kubernetes/softroce-ring.yaml"

// The Kubernetes objects of the manifest, with the fields it uses. They
// are decoded strictly: a field these types do not name (a typo, a field
// in the wrong place) fails the test instead of being ignored as the API
// server's lenient decoding could.

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type service struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name     string `yaml:"name"`
			Port     int    `yaml:"port"`
			Protocol string `yaml:"protocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type job struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       struct {
		CompletionMode string `yaml:"completionMode"`
		Completions    int    `yaml:"completions"`
		Parallelism    int    `yaml:"parallelism"`
		BackoffLimit   *int   `yaml:"backoffLimit"`
		Template       struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	Subdomain                    string `yaml:"subdomain"`
	RestartPolicy                string `yaml:"restartPolicy"`
	ShareProcessNamespace        bool   `yaml:"shareProcessNamespace"`
	HostNetwork                  bool   `yaml:"hostNetwork"`
	HostPID                      bool   `yaml:"hostPID"`
	HostIPC                      bool   `yaml:"hostIPC"`
	AutomountServiceAccountToken *bool  `yaml:"automountServiceAccountToken"`
	SecurityContext              struct {
		RunAsNonRoot   *bool  `yaml:"runAsNonRoot"`
		RunAsUser      *int64 `yaml:"runAsUser"`
		RunAsGroup     *int64 `yaml:"runAsGroup"`
		FSGroup        *int64 `yaml:"fsGroup"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Volumes []struct {
		Name     string `yaml:"name"`
		EmptyDir *struct {
			Medium string `yaml:"medium"`
		} `yaml:"emptyDir"`
	} `yaml:"volumes"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
}

type container struct {
	Name          string   `yaml:"name"`
	Image         string   `yaml:"image"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Command       []string `yaml:"command"`
	Args          []string `yaml:"args"`
	Env           []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	StartupProbe *struct {
		Exec struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	} `yaml:"startupProbe"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Privileged               *bool `yaml:"privileged"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

// env returns the value of the container's variable name.
func (c *container) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// mountOf returns the volume mounted at path in c, or "".
func (c *container) mountOf(path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

// manifest is the decoded manifest.
type manifest struct {
	svc service
	job job
}

// readManifest decodes the manifest's documents, each strictly into the
// type its kind names.
func readManifest(t *testing.T) *manifest {
	t.Helper()
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{}
	var kinds []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct {
			Kind string `yaml:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: %v", manifestPath, err)
		}
		var v any
		switch head.Kind {
		case "Service":
			v = &m.svc
		case "Job":
			v = &m.job
		default:
			t.Fatalf("%s: unexpected kind %q", manifestPath, head.Kind)
		}
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(true)
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %s: %v", manifestPath, head.Kind, err)
		}
		kinds = append(kinds, head.Kind)
	}
	if !slices.Equal(kinds, []string{"Service", "Job"}) {
		t.Fatalf("%s holds %q, want a Service and a Job", manifestPath, kinds)
	}
	return m
}

// sidecar and app return the pod's two containers.
func (m *manifest) sidecar(t *testing.T) *container {
	t.Helper()
	p := &m.job.Spec.Template.Spec
	if len(p.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the softroce sidecar", len(p.InitContainers))
	}
	return &p.InitContainers[0]
}

func (m *manifest) app(t *testing.T) *container {
	t.Helper()
	p := &m.job.Spec.Template.Spec
	if len(p.Containers) != 1 {
		t.Fatalf("%d containers, want the program's", len(p.Containers))
	}
	return &p.Containers[0]
}

// socketPath is where serve's socket is for the container's environment
// (uverbsd.BaseDir with its XDG_RUNTIME_DIR, the default device).
func socketPath(c *container) string {
	return filepath.Join(c.env("XDG_RUNTIME_DIR"), "softroce", "rxe0", uverbsd.SocketName)
}

// TestManifestPodsAreUnprivileged: the manifest's pods ask for nothing a
// restricted namespace refuses: no host network, PID or IPC namespace, no
// host path, no privilege, no capability (all dropped), no privilege
// escalation, not root, the runtime's default seccomp profile, and no
// resource but CPU and memory (no device plugin); the image's user is the
// pods' user. The rest holds the
// pods together: a headless Service publishing not-ready addresses that
// selects the pods and names UDP 4791; an Indexed Job whose completions,
// parallelism and SOFTROCE_PODS agree; a sidecar that is a native one
// (restartPolicy Always) running "softroce serve --udp" with a startup
// probe on its socket; the program under "softroce run"; both sharing the
// runtime directory through one volume and one PID namespace.
func TestManifestPodsAreUnprivileged(t *testing.T) {
	m := readManifest(t)
	svc, job := &m.svc, &m.job
	pod := &job.Spec.Template.Spec
	if svc.APIVersion != "v1" || job.APIVersion != "batch/v1" {
		t.Errorf("apiVersions %q and %q, want v1 and batch/v1", svc.APIVersion, job.APIVersion)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("the pod uses a host namespace")
	}
	sc := pod.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("the pod does not run as a user other than root (runAsNonRoot, runAsUser)")
	}
	if sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("seccompProfile %q, want RuntimeDefault", sc.SeccompProfile.Type)
	}
	if u := parseContainerfile(t, containerfilePath).stages[1].the("USER"); sc.RunAsUser != nil && sc.RunAsGroup != nil &&
		(len(u) != 1 || u[0] != fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup)) {
		t.Errorf("the image's USER %q is not the pods' runAsUser:runAsGroup", u)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it does not use")
	}
	for _, v := range pod.Volumes {
		if v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir", v.Name)
		}
	}
	side, app := m.sidecar(t), m.app(t)
	for _, c := range []*container{side, app} {
		s := c.SecurityContext
		if s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", c.Name)
		}
		if s.Privileged != nil && *s.Privileged {
			t.Errorf("%s: privileged", c.Name)
		}
		if len(s.Capabilities.Add) != 0 || !slices.Equal(s.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("%s: capabilities add %q drop %q, want none added and ALL dropped", c.Name, s.Capabilities.Add, s.Capabilities.Drop)
		}
		for _, r := range []map[string]string{c.Resources.Requests, c.Resources.Limits} {
			for k := range r {
				if k != "cpu" && k != "memory" {
					t.Errorf("%s: resource %s: only cpu and memory (no device plugin)", c.Name, k)
				}
			}
		}
		if c.Image != side.Image {
			t.Errorf("%s: image %s, want the sidecar's %s", c.Name, c.Image, side.Image)
		}
		rt := c.env("XDG_RUNTIME_DIR")
		if rt == "" || rt != side.env("XDG_RUNTIME_DIR") || c.mountOf(rt) == "" || c.mountOf(rt) != side.mountOf(rt) {
			t.Errorf("%s: XDG_RUNTIME_DIR %q is not the sidecar's, on the same volume", c.Name, rt)
		}
	}
	if !pod.ShareProcessNamespace {
		t.Error("the containers do not share a PID namespace: the daemon cannot reach the program's memory")
	}
	if side.RestartPolicy != "Always" {
		t.Errorf("sidecar restartPolicy %q, want Always (a native sidecar)", side.RestartPolicy)
	}
	if !slices.Equal(side.Command, []string{"softroce", "serve", "--udp"}) {
		t.Errorf("sidecar command %q, want softroce serve --udp", side.Command)
	}
	if p := side.StartupProbe; p == nil || !slices.Equal(p.Exec.Command, []string{"test", "-S", socketPath(side)}) {
		t.Errorf("sidecar startup probe %+v, want test -S %s", side.StartupProbe, socketPath(side))
	}
	if len(app.Command) < 3 || !slices.Equal(app.Command[:3], []string{"softroce", "run", "--"}) {
		t.Errorf("program command %q, want softroce run -- ...", app.Command)
	}
	if svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses {
		t.Error("the Service is not headless with publishNotReadyAddresses")
	}
	for k, v := range svc.Spec.Selector {
		if job.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p struct {
		Name     string `yaml:"name"`
		Port     int    `yaml:"port"`
		Protocol string `yaml:"protocol"`
	}) bool {
		return p.Port == 4791 && p.Protocol == "UDP"
	}) {
		t.Error("the Service does not name UDP 4791")
	}
	if pod.Subdomain != svc.Metadata.Name {
		t.Errorf("pod subdomain %q, want the Service's name %q (the pods' DNS names)", pod.Subdomain, svc.Metadata.Name)
	}
	n, err := strconv.Atoi(app.env("SOFTROCE_PODS"))
	if job.Spec.CompletionMode != "Indexed" || err != nil || job.Spec.Completions != n || job.Spec.Parallelism != n || n < 2 {
		t.Errorf("Job: %s, completions %d, parallelism %d, SOFTROCE_PODS %q: want Indexed and all three equal (all pods at once)",
			job.Spec.CompletionMode, job.Spec.Completions, job.Spec.Parallelism, app.env("SOFTROCE_PODS"))
	}
	if !strings.Contains(strings.Join(app.Args, " "), job.Metadata.Name+"-") {
		t.Errorf("the program does not name its peers after the Job's pods (%s-INDEX)", job.Metadata.Name)
	}
}

// podHost is one pod of TestManifestPodsRunTheirRing.
type podHost struct {
	ns      *testenv.NetNS
	ip      string
	vols    map[string]string // volume name -> directory
	sidecar *exec.Cmd
	sideOut bytes.Buffer
}

// TestManifestPodsRunTheirRing runs the manifest's pods as Kubernetes
// would run them, without Kubernetes: three pods, each a network
// namespace with a veth to one bridge (the pod network) and the pod's DNS
// name in its /etc/hosts (`ip netns exec` binds /etc/netns/NAME/hosts),
// each container's command, arguments and environment taken from the
// manifest (the image's files from the Containerfile's build step, its
// ENV from the final stage), run as the manifest's user with no
// capability, volumes as directories of that user. Each sidecar must pass
// its startup probe, each program must exit 0 with both of its
// ibv_rc_pingpong runs' results and no data mismatch, and each sidecar
// must end cleanly on SIGTERM.
func TestManifestPodsRunTheirRing(t *testing.T) {
	m := readManifest(t)
	testenv.RequireRoot(t)
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
	_, err = exec.LookPath("ibv_rc_pingpong")
	testenv.Require(t, err == nil, "ibv_rc_pingpong is not installed (Debian package ibverbs-utils)")
	dest := buildImage(t)
	imageEnv := parseContainerfile(t, containerfilePath).stages[1].env(t)
	side, app := m.sidecar(t), m.app(t)
	pod := &m.job.Spec.Template.Spec
	uid, gid := *pod.SecurityContext.RunAsUser, *pod.SecurityContext.RunAsGroup
	const pods = 3
	br := testenv.NewNetNS(t)
	br.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	br.Run(t, "ip", "link", "set", "br0", "up")
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	hs := make([]*podHost, pods)
	for i := range hs {
		h := &podHost{ns: testenv.NewNetNS(t), ip: fmt.Sprintf("10.95.0.%d", i+1), vols: map[string]string{}}
		hs[i] = h
		port := fmt.Sprintf("p%d", i)
		br.Run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns.Name)
		br.Run(t, "ip", "link", "set", port, "master", "br0", "up")
		h.ns.Run(t, "ip", "addr", "add", h.ip+"/24", "dev", "eth0")
		h.ns.Run(t, "ip", "link", "set", "eth0", "up")
		fmt.Fprintf(&hosts, "%s %s-%d.%s\n", h.ip, m.job.Metadata.Name, i, pod.Subdomain)
		for _, v := range pod.Volumes {
			d, err := os.MkdirTemp("", "softroce-pod-vol-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			if err := os.Chown(d, int(uid), int(gid)); err != nil {
				t.Fatal(err)
			}
			h.vols[v.Name] = d
		}
	}
	for _, h := range hs {
		etc := filepath.Join("/etc/netns", h.ns.Name)
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(etc) })
		if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// mapPath puts an absolute path of the container on this machine: a
	// volume's mount path on the pod's directory, a file of the image
	// under the image's root.
	mapPath := func(h *podHost, c *container, p string) string {
		for _, vm := range c.VolumeMounts {
			if rest, ok := strings.CutPrefix(p, vm.MountPath); ok && (rest == "" || rest[0] == '/') {
				return h.vols[vm.Name] + rest
			}
		}
		if strings.HasPrefix(p, "/") {
			if _, err := os.Stat(filepath.Join(dest, p)); err == nil {
				return filepath.Join(dest, p)
			}
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	command := func(i int, c *container, argv []string) *exec.Cmd {
		h := hs[i]
		env := []string{"PATH=" + filepath.Join(dest, "usr/local/bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			fmt.Sprintf("HOSTNAME=%s-%d", m.job.Metadata.Name, i), "JOB_COMPLETION_INDEX=" + strconv.Itoa(i)}
		for k, v := range imageEnv {
			env = append(env, k+"="+mapPath(h, c, v))
		}
		for _, e := range c.Env {
			v := mapPath(h, c, e.Value)
			if e.Name == "SOFTROCE_PODS" {
				v = strconv.Itoa(pods) // the test's pod count
			}
			env = append(env, e.Name+"="+v)
		}
		var args []string
		for _, a := range argv {
			args = append(args, mapPath(h, c, a))
		}
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns.Name, "setpriv",
			"--reuid=" + strconv.FormatInt(uid, 10), "--regid=" + strconv.FormatInt(gid, 10), "--clear-groups",
			"--inh-caps=-all", "--"}, args...)...)
		cmd.Env = env
		return cmd
	}
	for i, h := range hs {
		h.sidecar = command(i, side, append(slices.Clone(side.Command), side.Args...))
		h.sidecar.Stdout, h.sidecar.Stderr = &h.sideOut, &h.sideOut
		if err := h.sidecar.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			h.sidecar.Process.Kill()
			h.sidecar.Wait()
		})
	}
	for i, h := range hs {
		probe := side.StartupProbe
		for try := 0; ; try++ {
			if command(i, side, probe.Exec.Command).Run() == nil {
				break
			}
			if try >= probe.FailureThreshold {
				t.Fatalf("pod %d: the sidecar's startup probe %q failed %d times\n%s", i, probe.Exec.Command, try, h.sideOut.String())
			}
			time.Sleep(time.Duration(probe.PeriodSeconds) * time.Second)
		}
	}
	type result struct {
		out []byte
		err error
	}
	done := make([]chan result, pods)
	for i := range hs {
		done[i] = make(chan result, 1)
		cmd := command(i, app, append(slices.Clone(app.Command), app.Args...))
		go func() {
			out, err := cmd.CombinedOutput()
			done[i] <- result{out, err}
		}()
	}
	for i, h := range hs {
		r := <-done[i]
		if r.err != nil {
			t.Errorf("pod %d: the program: %v\n%s\nsidecar:\n%s", i, r.err, r.out, h.sideOut.String())
			continue
		}
		if n := strings.Count(string(r.out), " bytes in "); n != 2 || strings.Contains(string(r.out), "invalid data") {
			t.Errorf("pod %d: %d pingpong results, want 2 (server and client), or invalid data:\n%s", i, n, r.out)
		}
	}
	for i, h := range hs {
		h.sidecar.Process.Signal(syscall.SIGTERM)
		if err := h.sidecar.Wait(); err != nil {
			t.Errorf("pod %d: the sidecar after SIGTERM: %v\n%s", i, err, h.sideOut.String())
		}
	}
}
