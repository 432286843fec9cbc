package e2e

// The device plugin's CDI device names against the CDI resolution of a
// real containerd 2.4 (the lab's, through CRI, as the kubelet creates a
// container): a spec shaped like the one `nvidia-ctk cdi generate` writes
// (a device per GPU named by index and by UUID, and "all"; the GPU's
// device node per device, the control node, a driver file and env for
// every device), generated with the CDI library's spec types for fake
// device nodes, in the lab containerd's cdi_spec_dirs.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"
	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
	"github.com/gpuext/gpuext/test/lab"
)

// labGPUUUIDs are the two fake GPUs' UUIDs, in index order.
var labGPUUUIDs = []string{"GPU-0a0a0a0a-0000-4000-8000-000000000000", "GPU-1b1b1b1b-1111-4111-8111-111111111111"}

const (
	labDriverFile = "/usr/lib/gpuext-lab/libcuda.so.1" // where the spec mounts the fake driver file
	labDriverText = "fake libcuda for the CDI e2e test"
)

// writeFakeNVIDIASpec makes the fake device nodes (char devices with
// /dev/null's numbers: a container may write to them) and the driver file
// under dir, and writes the CDI spec of two GPUs into cdiDir.
func writeFakeNVIDIASpec(t *testing.T, dir, cdiDir string) {
	t.Helper()
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		t.Fatal(err)
	}
	devDir := filepath.Join(dir, "fake-dev")
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	node := func(name string) *cdispecs.DeviceNode {
		host := filepath.Join(devDir, name)
		if err := unix.Mknod(host, unix.S_IFCHR|0o666, int(null.Rdev)); err != nil {
			t.Fatalf("mknod %s: %v", host, err)
		}
		// type, major and minor left out: the CDI library reads them from hostPath
		return &cdispecs.DeviceNode{Path: "/dev/" + name, HostPath: host}
	}
	driver := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(driver, []byte(labDriverText+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := cdispecs.Spec{
		Kind: "nvidia.com/gpu",
		ContainerEdits: cdispecs.ContainerEdits{
			Env:         []string{"GPUEXT_LAB_CDI_SPEC=fake-nvidia"},
			DeviceNodes: []*cdispecs.DeviceNode{node("nvidiactl")},
			Mounts: []*cdispecs.Mount{{HostPath: driver, ContainerPath: labDriverFile,
				Options: []string{"ro", "nosuid", "nodev", "bind"}}},
		},
	}
	var all []*cdispecs.DeviceNode
	for i, uuid := range labGPUUUIDs {
		n := node("nvidia" + strconv.Itoa(i))
		all = append(all, n)
		edits := cdispecs.ContainerEdits{DeviceNodes: []*cdispecs.DeviceNode{n}}
		spec.Devices = append(spec.Devices, cdispecs.Device{Name: strconv.Itoa(i), ContainerEdits: edits},
			cdispecs.Device{Name: uuid, ContainerEdits: edits})
	}
	spec.Devices = append(spec.Devices, cdispecs.Device{Name: "all", ContainerEdits: cdispecs.ContainerEdits{DeviceNodes: all}})
	// the lowest version that has what the spec uses, as nvidia-ctk writes it
	v, err := cdispecs.MinimumRequiredVersion(&spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// a spec file is read whole: write it beside, then rename
	path := filepath.Join(cdiDir, "nvidia.json")
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// allocate runs the device plugin of two 4 GiB GPUs with cdi, registered
// with a test kubelet, and returns its answer for a container given units
// of GPU 1: the CDI device names and the env the kubelet passes to the
// runtime.
func allocate(t *testing.T, cdi *pools.CDIConfig) ([]string, map[string]string) {
	t.Helper()
	dir := deviceplugintest.KubeletDir(t)
	k := deviceplugintest.StartKubelet(t, dir)
	spec, err := pools.Config{KubeletDir: dir, CDI: cdi, GPUs: []pools.GPUConfig{
		{Memory: "4GiB", UUID: labGPUUUIDs[0]}, {Memory: "4GiB", UUID: labGPUUUIDs[1]}}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	p, err := deviceplugin.New(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r := k.Wait(t)
	resp, err := r.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu1-m000", "gpu1-m002"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetContainerResponses()[0]
	var names []string
	for _, d := range c.GetCdiDevices() {
		names = append(names, d.GetName())
	}
	return names, c.GetEnvs()
}

// What the container prints: each device node it has, whether it can
// write to it, the driver file, then its env.
const cdiProbeScript = `for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do
  if [ -c $d ]; then echo "chardev $d"; echo x > $d && echo "writable $d"; fi
done
echo "driver $(cat ` + labDriverFile + `)"
env`

// TestContainerdResolvesTheDevicePluginsCDINames: the names Allocate
// returns, given to a real containerd as CRI CDI devices exactly, resolve
// in an NVIDIA-shaped spec: the container has host GPU 1's device node and
// not GPU 0's, the spec's control node, driver file and env, and the
// plugin's env whose GPU names hold in the container (a UUID, never the
// host index 1). Both name strategies; and a kind the node has no spec for
// is refused by containerd when the container is created.
func TestContainerdResolvesTheDevicePluginsCDINames(t *testing.T) {
	c := lab.StartContainerd(t, lab.ContainerdOptions{})
	writeFakeNVIDIASpec(t, c.Dir, c.CDIDir)

	for _, tc := range []struct {
		pod  string
		cdi  *pools.CDIConfig
		want string // the CDI name of host GPU 1
	}{
		{"cdi-by-index", nil, "nvidia.com/gpu=1"},
		{"cdi-by-uuid", &pools.CDIConfig{DeviceNameStrategy: pools.CDINameByUUID}, "nvidia.com/gpu=" + labGPUUUIDs[1]},
	} {
		names, env := allocate(t, tc.cdi)
		if !slices.Equal(names, []string{tc.want}) {
			t.Fatalf("%s: Allocate's CDI devices %q, want [%q]", tc.pod, names, tc.want)
		}
		p := c.RunPod(t, tc.pod, cdiProbeScript, lab.PodOptions{CDIDevices: names, Env: env})
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s: exit %d\n%s", tc.pod, code, p.Logs(t))
		}
		out := p.Logs(t)
		for _, line := range []string{"chardev /dev/nvidia1", "writable /dev/nvidia1", "chardev /dev/nvidiactl",
			"writable /dev/nvidiactl", "driver " + labDriverText} {
			if !slices.Contains(strings.Split(out, "\n"), line) {
				t.Errorf("%s: no line %q in what the container printed:\n%s", tc.pod, line, out)
			}
		}
		if strings.Contains(out, "/dev/nvidia0") {
			t.Errorf("%s: the container has host GPU 0's device node, which it was not given:\n%s", tc.pod, out)
		}
		seen := p.Env(t)
		for k, v := range map[string]string{
			"GPUEXT_LAB_CDI_SPEC":    "fake-nvidia",  // from the spec, through containerd
			"CUDA_VISIBLE_DEVICES":   labGPUUUIDs[1], // from Allocate: the UUID holds where GPU 1 is ordinal 0
			"NVIDIA_VISIBLE_DEVICES": "void",
			"CUDA_DEVICE_ORDER":      "PCI_BUS_ID",
		} {
			if seen[k] != v {
				t.Errorf("%s: the container saw %s=%q, want %q", tc.pod, k, seen[k], v)
			}
		}
	}

	// a kind the node has no spec for: containerd refuses to create the container
	names, env := allocate(t, &pools.CDIConfig{Kind: "example.com/gpu"})
	if !slices.Equal(names, []string{"example.com/gpu=1"}) {
		t.Fatalf("Allocate's CDI devices %q, want [example.com/gpu=1]", names)
	}
	_, err := c.RunPodErr(t, "cdi-unknown-kind", "true", lab.PodOptions{CDIDevices: names, Env: env})
	if err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices example.com/gpu=1") {
		t.Fatalf("a CDI device no spec names: err = %v, want containerd's unresolvable CDI devices", err)
	}
}

// TestContainerdAdmitsACDIGPUContainer: the NRI path with a GPU that CDI
// injects. A container given host GPU 1 by the device plugin's CDI name and
// asking for a gpuext policy and quota by annotation (the container's key
// over the lab pod's policy.gpuext.io/pod) gets both: the spec's device node
// and env from containerd, and gpuext's admission (a tenant in the registry
// with the quota, the device runtime preloaded, its tenant dir mounted),
// with the plugin in strict mode, so that any error would refuse it. The
// GPU node run of the same path: make gpu-node (docs/gpu-node.md).
func TestContainerdAdmitsACDIGPUContainer(t *testing.T) {
	l := startCtdLab(t, "strict")
	writeFakeNVIDIASpec(t, l.Dir, l.CDIDir)
	names, env := allocate(t, nil)
	script := cdiProbeScript + `
[ -f /run/gpuext/tenant/config.json ] && echo "tenant-config present"
echo "== end"; exec sleep 600`
	p := l.RunPod(t, "cdi-nri", script, lab.PodOptions{CDIDevices: names, Env: env,
		Annotations: map[string]string{"policy.gpuext.io/container.cdi-nri": "quota", "quota.gpuext.io": "4GiB"}})
	waitFor(t, 30*time.Second, "the container's output", func() bool { return strings.Contains(p.Logs(t), "== end") })
	out := p.Logs(t)
	for _, line := range []string{"chardev /dev/nvidia1", "writable /dev/nvidia1", "driver " + labDriverText, "tenant-config present"} {
		if !slices.Contains(strings.Split(out, "\n"), line) {
			t.Errorf("no line %q in what the container printed:\n%s\nplugin log:\n%s", line, out, readFile(l.logFile))
		}
	}
	seen := p.Env(t)
	if seen["GPUEXT_LAB_CDI_SPEC"] != "fake-nvidia" {
		t.Errorf("the CDI spec's env did not reach the container: GPUEXT_LAB_CDI_SPEC=%q", seen["GPUEXT_LAB_CDI_SPEC"])
	}
	if !strings.HasSuffix(seen["LD_PRELOAD"], admission.DevrtLibrary) || seen[admission.EnvTenantID] == "" {
		t.Errorf("gpuext's injection missing beside CDI's: LD_PRELOAD=%q %s=%q", seen["LD_PRELOAD"], admission.EnvTenantID, seen[admission.EnvTenantID])
	}
	tn, _, ok := tenantOf(t, l.registry(t), p.ContainerID)
	if !ok {
		t.Fatalf("container %s is not in the registry; plugin log:\n%s", p.ContainerID, readFile(l.logFile))
	}
	if tn.Policy != "quota" || tn.Config.QuotaBytes != 4<<30 || seen[admission.EnvTenantID] != strconv.Itoa(int(tn.ID)) {
		t.Errorf("registry: tenant %d policy %q quota %d; the container saw tenant %q; want quota, 4GiB and the same id",
			tn.ID, tn.Policy, tn.Config.QuotaBytes, seen[admission.EnvTenantID])
	}
}
