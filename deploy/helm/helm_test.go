package helm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
)

func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func chartDir() string { return filepath.Join(here(), "gpuext") }

// helmBinary is the helm test/k8s/install.sh builds (make deps), or $GPUEXT_HELM.
func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("GPUEXT_HELM")
	if p == "" {
		p = filepath.Join(here(), "..", "..", ".cache", "k8s", "bin", "helm")
	}
	if _, err := os.Stat(p); err != nil {
		testutil.SkipOrFail(t, "helm not found at %s (make deps builds it; or set GPUEXT_HELM): %v", p, err)
	}
	return p
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	// no user's helm config or cache: the chart alone
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// The rendered objects, as much of them as the tests read.
type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   metadata          `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	// ServiceAccount
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
	// Role, RoleBinding
	Rules []struct {
		APIGroups     []string `yaml:"apiGroups"`
		Resources     []string `yaml:"resources"`
		ResourceNames []string `yaml:"resourceNames"`
		Verbs         []string `yaml:"verbs"`
	} `yaml:"rules"`
	RoleRef struct {
		Kind string `yaml:"kind"`
		Name string `yaml:"name"`
	} `yaml:"roleRef"`
	Subjects []struct {
		Kind      string `yaml:"kind"`
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"subjects"`
	Spec struct {
		UpdateStrategy struct {
			Type string `yaml:"type"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata metadata `yaml:"metadata"`
			Spec     podSpec  `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type metadata struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Annotations map[string]string `yaml:"annotations"`
}

type podSpec struct {
	ServiceAccountName           string              `yaml:"serviceAccountName"`
	AutomountServiceAccountToken *bool               `yaml:"automountServiceAccountToken"`
	HostNetwork                  bool                `yaml:"hostNetwork"`
	HostPID                      bool                `yaml:"hostPID"`
	PriorityClassName            string              `yaml:"priorityClassName"`
	Tolerations                  []map[string]string `yaml:"tolerations"`
	NodeSelector                 map[string]string   `yaml:"nodeSelector"`
	InitContainers               []container         `yaml:"initContainers"`
	Containers                   []container         `yaml:"containers"`
	Volumes                      []volume            `yaml:"volumes"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	SecurityContext struct {
		Privileged *bool `yaml:"privileged"`
	} `yaml:"securityContext"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name             string `yaml:"name"`
		MountPath        string `yaml:"mountPath"`
		MountPropagation string `yaml:"mountPropagation"`
		ReadOnly         bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	Exec struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name  string `yaml:"name"`
		Items []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"configMap"`
}

// rendered is one `helm template` output.
type rendered struct {
	objects   []object
	configMap object
	daemonSet object
	pod       podSpec
	agent     container
	setup     container
	cfg       config.Config
}

func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", "gpuext", chartDir(), "--namespace", "gpuext-system"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	var r rendered
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("helm template output is not YAML: %v\n%s", err, out)
		}
		if o.Kind == "" {
			continue
		}
		r.objects = append(r.objects, o)
		switch o.Kind {
		case "ConfigMap":
			r.configMap = o
		case "DaemonSet":
			r.daemonSet = o
		}
	}
	r.pod = r.daemonSet.Spec.Template.Spec
	if len(r.pod.Containers) != 1 || len(r.pod.InitContainers) != 1 {
		t.Fatalf("DaemonSet: %d containers and %d init containers, want 1 and 1", len(r.pod.Containers), len(r.pod.InitContainers))
	}
	r.agent, r.setup = r.pod.Containers[0], r.pod.InitContainers[0]
	// what the agent reads: strict, over the defaults, as at its start
	r.cfg, err = config.Parse([]byte(r.configMap.Data["config.json"]), "ConfigMap gpuext-config")
	if err != nil {
		t.Fatalf("the agent would refuse the chart's config: %v\n%s", err, r.configMap.Data["config.json"])
	}
	return r
}

func (r rendered) volume(t *testing.T, name string) volume {
	t.Helper()
	for _, v := range r.pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %q", name)
	return volume{}
}

// hostPathAt returns the host path a container sees at mountPath (and the
// mount's propagation), failing when nothing from the host is mounted there.
func (r rendered) hostPathAt(t *testing.T, c container, mountPath string) (string, string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath == mountPath {
			v := r.volume(t, m.Name)
			if v.HostPath == nil {
				t.Fatalf("%s: %s is volume %q, not a host path", c.Name, mountPath, m.Name)
			}
			return v.HostPath.Path, m.MountPropagation
		}
	}
	t.Fatalf("%s: nothing mounted at %s", c.Name, mountPath)
	return "", ""
}

// bpffsDir is where bpf.EnsureBPFFS mounts a bpf filesystem for a pin dir.
func bpffsDir(pinDir string) string {
	if pinDir == "/sys/fs/bpf" || strings.HasPrefix(pinDir, "/sys/fs/bpf/") {
		return "/sys/fs/bpf"
	}
	return pinDir
}

func flagValue(t *testing.T, cmd []string, flag string) string {
	t.Helper()
	for i, a := range cmd {
		if a == flag && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	t.Fatalf("command %v has no %s", cmd, flag)
	return ""
}

// checkHostPaths asserts what the runtime and the agent need on any values:
// every path the agent names to the runtime is the node's own, mounted at
// the same path; the node's /proc and cgroups are under hostRoot; the NRI
// socket the agent dials is the node's; the config it reads is the chart's.
func checkHostPaths(t *testing.T, r rendered, nriSocket, propagation string) {
	t.Helper()
	a, s, cfg := r.agent, r.setup, r.cfg
	same := func(c container, p, wantProp string) {
		t.Helper()
		host, prop := r.hostPathAt(t, c, p)
		if host != p {
			t.Errorf("%s: %s is the node's %s; the runtime would bind-mount the node's %s", c.Name, p, host, p)
		}
		if prop != wantProp {
			t.Errorf("%s: %s mountPropagation %q, want %q", c.Name, p, prop, wantProp)
		}
	}
	agentProp := map[string]string{"Bidirectional": "HostToContainer", "None": "None"}[propagation]
	same(a, bpffsDir(cfg.PinDir), agentProp)
	// the tenants' accounting dirs are tmpfs mounts the agent makes: the
	// runtime, on the node, must bind-mount those, not the empty dirs below
	// (None on nodes whose mounts are private, as for bpffs)
	same(a, cfg.StateDir, propagation)
	same(a, filepath.Dir(cfg.AgentSocket), "")
	same(s, bpffsDir(cfg.PinDir), propagation)
	same(s, cfg.DevrtDir, "")
	if cfg.KernelPolicyDir != "" {
		same(a, cfg.KernelPolicyDir, "")
	}
	for host, inside := range map[string]string{"/proc": "/proc", "/sys/fs/cgroup": "/sys/fs/cgroup"} {
		if got, _ := r.hostPathAt(t, a, path.Join(cfg.HostRoot, inside)); got != host {
			t.Errorf("agent: hostRoot %s%s is the node's %s, want %s", cfg.HostRoot, inside, got, host)
		}
	}
	if got := flagValue(t, a.Command, "--socket"); got != nriSocket {
		t.Errorf("agent dials NRI at %s, want %s", got, nriSocket)
	}
	same(a, filepath.Dir(nriSocket), "")
	for _, c := range []container{a, s} {
		if p := c.SecurityContext.Privileged; p == nil || !*p {
			t.Errorf("%s: not privileged (BPF, mounts, the host cgroup namespace need it)", c.Name)
		}
		cfgPath := flagValue(t, c.Command, "--config")
		for _, m := range c.VolumeMounts {
			if m.MountPath == path.Dir(cfgPath) && m.Name == "config" {
				goto mounted
			}
		}
		t.Errorf("%s: --config %s is not in the ConfigMap's mount", c.Name, cfgPath)
	mounted:
	}
	if s.Image != a.Image || s.ImagePullPolicy != a.ImagePullPolicy {
		t.Errorf("init container image %s (%s), agent %s (%s): want the same image", s.Image, s.ImagePullPolicy, a.Image, a.ImagePullPolicy)
	}
	if n := len(s.Command); n < 2 || s.Command[n-2] != "setup-node" || s.Command[n-1] != "--in-container" {
		t.Errorf("init container command %v, want gpuextctl setup-node --in-container", s.Command)
	}
	for _, p := range []*probe{a.ReadinessProbe, a.LivenessProbe} {
		if p == nil || len(p.Exec.Command) == 0 || p.Exec.Command[len(p.Exec.Command)-1] != "ping" {
			t.Errorf("agent probe %+v, want an exec of gpuextctl ping", p)
		}
	}
}

func TestChartLints(t *testing.T) {
	for _, args := range [][]string{nil, {"--values", filepath.Join(here(), "testdata", "lab-values.yaml")}} {
		if out, err := helm(t, append([]string{"lint", "--strict", chartDir()}, args...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

func TestChartDefaults(t *testing.T) {
	r := render(t)
	kinds := []string{}
	for _, o := range r.objects {
		kinds = append(kinds, o.Kind+"/"+o.Metadata.Name)
		if o.Metadata.Namespace != "gpuext-system" {
			t.Errorf("%s/%s in namespace %q, want the release's", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}
	sort.Strings(kinds)
	// least RBAC: the only API call is the watch of the agent's own
	// DaemonSet (cleanupOnUninstall, on by default)
	if want := []string{"ConfigMap/gpuext-config", "DaemonSet/gpuext", "Role/gpuext", "RoleBinding/gpuext", "ServiceAccount/gpuext"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("objects %v, want %v", kinds, want)
	}
	for _, o := range r.objects {
		switch o.Kind {
		case "ServiceAccount":
			if o.AutomountServiceAccountToken == nil || *o.AutomountServiceAccountToken {
				t.Error("the ServiceAccount mounts a token in every pod that uses it; only the agent's pod should")
			}
		case "Role":
			if len(o.Rules) != 1 {
				t.Fatalf("Role rules %+v, want one", o.Rules)
			}
			rule := o.Rules[0]
			if !reflect.DeepEqual(rule.APIGroups, []string{"apps"}) || !reflect.DeepEqual(rule.Resources, []string{"daemonsets"}) ||
				!reflect.DeepEqual(rule.ResourceNames, []string{"gpuext"}) || !reflect.DeepEqual(rule.Verbs, []string{"get", "list", "watch"}) {
				t.Errorf("Role rule %+v, want get/list/watch of daemonset gpuext only", rule)
			}
		case "RoleBinding":
			if o.RoleRef.Kind != "Role" || o.RoleRef.Name != "gpuext" || len(o.Subjects) != 1 ||
				o.Subjects[0].Kind != "ServiceAccount" || o.Subjects[0].Name != "gpuext" || o.Subjects[0].Namespace != "gpuext-system" {
				t.Errorf("RoleBinding %+v %+v, want Role gpuext to ServiceAccount gpuext-system/gpuext", o.RoleRef, o.Subjects)
			}
		}
	}
	p := r.pod
	if p.ServiceAccountName != "gpuext" || p.AutomountServiceAccountToken == nil || !*p.AutomountServiceAccountToken {
		t.Errorf("pod: serviceAccountName %q, automountServiceAccountToken %v; want gpuext with a token (the owner watch)", p.ServiceAccountName, p.AutomountServiceAccountToken)
	}
	if cmd := strings.Join(r.agent.Command, " "); !strings.Contains(cmd, "--owner-daemonset gpuext-system/gpuext") {
		t.Errorf("agent command %q: want --owner-daemonset gpuext-system/gpuext", cmd)
	}
	if p.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", p.PriorityClassName)
	}
	if len(p.Tolerations) != 1 || !reflect.DeepEqual(p.Tolerations[0], map[string]string{"operator": "Exists"}) {
		t.Errorf("tolerations %v, want every taint tolerated", p.Tolerations)
	}
	if p.HostPID {
		t.Error("hostPID: the agent reads the node's /proc under hostRoot and needs no host pid namespace")
	}
	if r.daemonSet.Spec.UpdateStrategy.Type != "RollingUpdate" {
		t.Errorf("updateStrategy %q", r.daemonSet.Spec.UpdateStrategy.Type)
	}
	if !reflect.DeepEqual(p.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) {
		t.Errorf("nodeSelector %v", p.NodeSelector)
	}
	def := config.Default()
	if c := r.cfg; c.PinDir != def.PinDir || c.StateDir != def.StateDir || c.DevrtDir != def.DevrtDir ||
		c.AgentSocket != def.AgentSocket || c.HostRoot != "/host" || c.FailMode != "fail-open" || c.MetricsAddress != "" {
		t.Errorf("default config %+v", c)
	}
	checkHostPaths(t, r, "/var/run/nri/nri.sock", "Bidirectional")
	if got := flagValue(t, r.agent.Command, "--idx"); got != "50" {
		t.Errorf("--idx %s, want 50", got)
	}
	if r.agent.Image != "localhost/gpuext:0.1.0" || r.agent.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("image %s, pull policy %s", r.agent.Image, r.agent.ImagePullPolicy)
	}
	for _, m := range r.agent.VolumeMounts {
		if strings.Contains(m.MountPath, "kubelet") {
			t.Errorf("kubelet dir %s mounted with the device plugin off", m.MountPath)
		}
	}
	if len(r.agent.Ports) != 0 || r.daemonSet.Spec.Template.Metadata.Annotations["prometheus.io/scrape"] != "" {
		t.Errorf("metrics off by default, but ports %v, annotations %v", r.agent.Ports, r.daemonSet.Spec.Template.Metadata.Annotations)
	}
}

// TestChartMetricsDefaultIsNodeLocal: metrics turned on with the chart's
// defaults bind the node's loopback. The agent runs on the host network,
// where NetworkPolicy does not apply, and the endpoint has no
// authentication and names pods: 0.0.0.0 served it to every network the
// node is on.
func TestChartMetricsDefaultIsNodeLocal(t *testing.T) {
	r := render(t, "--set", "metrics.enabled=true")
	if got := r.cfg.MetricsAddress; got != "127.0.0.1:9464" {
		t.Errorf("metrics.enabled=true alone: metricsAddress %q, want 127.0.0.1:9464 (the node only)", got)
	}
	// another address is the operator's explicit choice
	if r := render(t, "--set", "metrics.enabled=true", "--set", "metrics.bindAddress=10.0.0.5"); r.cfg.MetricsAddress != "10.0.0.5:9464" {
		t.Errorf("metrics.bindAddress=10.0.0.5: metricsAddress %q", r.cfg.MetricsAddress)
	}
}

func TestChartOtherValues(t *testing.T) {
	values := filepath.Join(here(), "testdata", "lab-values.yaml")
	r := render(t, "--values", values)
	checkHostPaths(t, r, "/run/containerd-lab/nri/nri.sock", "None")
	c := r.cfg
	if c.HostRoot != "/hostfs" || c.FailMode != "strict" || c.LogLevel != "debug" || c.ReconcileInterval != "5s" ||
		c.PinDir != "/var/lib/gpuext-lab/bpf" || c.MetricsAddress != "127.0.0.1:9500" {
		t.Errorf("config %+v", c)
	}
	if got, _ := r.hostPathAt(t, r.agent, "/var/lib/gpuext-lab/bpf"); got != "/var/lib/gpuext-lab/bpf" {
		t.Errorf("a pin dir outside /sys/fs/bpf: the bpffs volume is %s, want the pin dir itself", got)
	}
	if got := flagValue(t, r.agent.Command, "--idx"); got != "07" {
		t.Errorf("--idx %s, want 07", got)
	}
	if r.agent.Image != "localhost/gpuext:lab" || r.agent.ImagePullPolicy != "Never" {
		t.Errorf("image %s, pull policy %s", r.agent.Image, r.agent.ImagePullPolicy)
	}
	if r.pod.NodeSelector["gpuext.io/lab"] != "true" || r.pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v", r.pod.NodeSelector)
	}
	ann := r.daemonSet.Spec.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9500" ||
		len(r.agent.Ports) != 1 || r.agent.Ports[0].ContainerPort != 9500 {
		t.Errorf("metrics: annotations %v, ports %v", ann, r.agent.Ports)
	}

	// constraints and catalog as the projected ConfigMap volume lays them
	// out, read the way the agent reads them
	etc := t.TempDir()
	for _, it := range r.volume(t, "config").ConfigMap.Items {
		p := filepath.Join(etc, it.Path)
		os.MkdirAll(filepath.Dir(p), 0o755) //nolint:errcheck
		if err := os.WriteFile(p, []byte(r.configMap.Data[it.Key]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c.ConstraintsFile != "/etc/gpuext/constraints.json" || c.CatalogDir != "/etc/gpuext/catalog" {
		t.Fatalf("constraintsFile %q, catalogDir %q", c.ConstraintsFile, c.CatalogDir)
	}
	local := c
	local.ConstraintsFile = filepath.Join(etc, "constraints.json")
	local.CatalogDir = filepath.Join(etc, "catalog")
	cons, err := admission.Constraints(local)
	if err != nil || cons == nil {
		t.Errorf("the agent would refuse the chart's constraints: %v", err)
	}
	cat, err := admission.Catalog(local)
	if err != nil {
		t.Fatalf("the agent would refuse the chart's catalog: %v", err)
	}
	if p, ok := cat.Get("lab-batch"); !ok || p.Priority.Class != "best-effort" {
		t.Errorf("catalog policy lab-batch: %v %+v", ok, p)
	}
}

func TestChartDevicePlugin(t *testing.T) {
	if _, ok := configFields()["devicePlugin"]; !ok {
		t.Fatal("internal/config has no devicePlugin field: the chart's devicePlugin.enabled would render a config the agent refuses")
	}
	r := render(t, "--values", filepath.Join(here(), "testdata", "deviceplugin-values.yaml"))
	checkHostPaths(t, r, "/var/run/nri/nri.sock", "Bidirectional")
	if got, _ := r.hostPathAt(t, r.agent, "/var/lib/kubelet-lab/device-plugins"); got != "/var/lib/kubelet-lab/device-plugins" {
		t.Errorf("device-plugins dir from %s", got)
	}
	if got, _ := r.hostPathAt(t, r.agent, "/var/lib/kubelet-lab/pod-resources"); got != "/var/lib/kubelet-lab/pod-resources" {
		t.Errorf("pod-resources dir from %s", got)
	}
	var raw struct {
		DevicePlugin map[string]any `json:"devicePlugin"`
	}
	json.Unmarshal([]byte(r.configMap.Data["config.json"]), &raw) //nolint:errcheck // parsed strictly above
	if raw.DevicePlugin["kubeletDir"] != "/var/lib/kubelet-lab" || raw.DevicePlugin["unit"] != "1GiB" || raw.DevicePlugin["enabled"] != nil {
		t.Errorf("config.devicePlugin %v, want the values' keys but enabled, with kubeletDir", raw.DevicePlugin)
	}
}

func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want string
	}{
		{"config.failmode=strict", "additional properties 'failmode' not allowed"},
		{"config.hostRoot=/", "/config/hostRoot"},
		{"config.stateDir=run/gpuext", "/config/stateDir"},
		{"config.metricsAddress=:9464", "additional properties 'metricsAddress' not allowed"},
		{"config.failMode=open", "/config/failMode"},
		{"bpffs.mountPropagation=HostToContainer", "/bpffs/mountPropagation"},
		{"nri.socket=nri.sock", "/nri/socket"},
		{"metrics.port=0", "/metrics/port"},
		{"catalog.Bad_Name.description=x", "catalog.Bad_Name: a policy name is lower-case letters, digits and '-'"},
	} {
		out, err := helm(t, "template", "gpuext", chartDir(), "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, want an error with %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// configFields are the JSON names of the agent's config fields.
func configFields() map[string]bool {
	fields := map[string]bool{}
	typ := reflect.TypeOf(config.Config{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields[name] = true
	}
	return fields
}

// The schema's config properties are the agent's config fields: a field
// the chart does not know could not be set, and a property the agent does
// not know would stop it.
func TestChartSchemaKnowsEveryConfigField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Config struct {
				Properties map[string]any `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	// set by the chart from values of their own (templates/_helpers.tpl)
	managed := map[string]string{"metricsAddress": "metrics", "devicePlugin": "devicePlugin", "constraintsFile": "constraints", "catalogDir": "catalog"}
	fields := configFields()
	for name := range fields {
		_, inSchema := schema.Properties.Config.Properties[name]
		if _, ok := managed[name]; ok == inSchema {
			t.Errorf("config field %q: in the schema %v, set by the chart %v; want exactly one", name, inSchema, ok)
		}
	}
	for name := range schema.Properties.Config.Properties {
		if !fields[name] {
			t.Errorf("values.schema.json allows config.%s, which the agent refuses", name)
		}
	}
}

// TestChartWithoutCleanup: cleanupOnUninstall=false renders no RBAC, no
// token, and an agent that never watches the API.
func TestChartWithoutCleanup(t *testing.T) {
	r := render(t, "--set", "cleanupOnUninstall=false")
	for _, o := range r.objects {
		if o.Kind == "Role" || o.Kind == "RoleBinding" {
			t.Errorf("%s/%s rendered with cleanupOnUninstall=false", o.Kind, o.Metadata.Name)
		}
	}
	if p := r.pod; p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Errorf("pod mounts a token with cleanupOnUninstall=false")
	}
	if cmd := strings.Join(r.agent.Command, " "); strings.Contains(cmd, "--owner-daemonset") {
		t.Errorf("agent command %q watches its DaemonSet with cleanupOnUninstall=false", cmd)
	}
}

// TestChartKernelPolicyDir: an operator's policy directory on the node is
// mounted read-only at the path the agent reads.
func TestChartKernelPolicyDir(t *testing.T) {
	r := render(t, "--set", "config.kernelPolicyDir=/etc/gpuext-policies")
	if r.cfg.KernelPolicyDir != "/etc/gpuext-policies" {
		t.Fatalf("config kernelPolicyDir %q", r.cfg.KernelPolicyDir)
	}
	if host, _ := r.hostPathAt(t, r.agent, "/etc/gpuext-policies"); host != "/etc/gpuext-policies" {
		t.Errorf("kernelPolicyDir is the node's %s", host)
	}
	for _, m := range r.agent.VolumeMounts {
		if m.MountPath == "/etc/gpuext-policies" && !m.ReadOnly {
			t.Error("the policy directory is mounted writable")
		}
	}
}

// TestChartProbeDir: an operator's device probe directory on the node is
// mounted read-only at the path the agent reads.
func TestChartProbeDir(t *testing.T) {
	r := render(t, "--set", "config.probeDir=/etc/gpuext-probes")
	if r.cfg.ProbeDir != "/etc/gpuext-probes" {
		t.Fatalf("config probeDir %q", r.cfg.ProbeDir)
	}
	if host, _ := r.hostPathAt(t, r.agent, "/etc/gpuext-probes"); host != "/etc/gpuext-probes" {
		t.Errorf("probeDir is the node's %s", host)
	}
	mounted := false
	for _, m := range r.agent.VolumeMounts {
		if m.MountPath == "/etc/gpuext-probes" {
			mounted = true
			if !m.ReadOnly {
				t.Error("the probe directory is mounted writable")
			}
		}
	}
	if !mounted {
		t.Error("the probe directory is not mounted in the agent")
	}
}
