package deviceplugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func TestPodResourcesGPUMemory(t *testing.T) {
	dir := kubeletDir(t)
	srv := deviceplugintest.ServePodResources(t, dir)
	cfg := twoGPUs
	cfg.KubeletDir = dir
	r, err := NewPodResources(spec(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const res = "gpuext.io/gpu-memory"
	srv.SetPods(
		deviceplugintest.Pod("default", "other", map[string]map[string][]string{"main": {res: ids(0, 0, 8)}}),
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{
			"trainer": {res: ids(1, 10, 12), "nvidia.com/gpu": {"GPU-x"}},
			"sidecar": {res: append(ids(1, 12, 13), ids(1, 10, 11)...)}, // one id shared with trainer (an init container's, reused)
			"logger":  {"example.com/thing": {"a"}},
		}),
	)
	info := admission.ContainerInfo{Name: "trainer", PodName: "train", PodNamespace: "ml"}
	for _, tc := range []struct {
		name     string
		info     admission.ContainerInfo
		wholePod bool
		want     string
	}{
		{"a container's units", info, false, "[{1 2147483648}] own [1]"},
		{"the pod's units, each once", info, true, "[{1 3221225472}] own [1]"},
		{"no request", admission.ContainerInfo{Name: "logger", PodName: "train", PodNamespace: "ml"}, false, "[] own []"},
		{"pod tenant, container without a request", admission.ContainerInfo{Name: "logger", PodName: "train", PodNamespace: "ml"}, true, "[{1 3221225472}] own []"},
		{"a pod the kubelet does not list", admission.ContainerInfo{Name: "trainer", PodName: "train", PodNamespace: "other-ns"}, false, "[] own []"},
	} {
		gm, err := r.GPUMemory(tc.info, tc.wholePod)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := fmt.Sprintf("%v own %v", orEmpty(gm.GPUs), orEmptyInts(gm.ContainerGPUs)); got != tc.want || gm.Resource != res {
			t.Errorf("%s: %s (%s), want %s", tc.name, got, gm.Resource, tc.want)
		}
	}

	srv.SetPods(deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {res: {"gpu1-m099"}}}))
	if _, err := r.GPUMemory(info, false); !errors.Is(err, ErrPodResources) || !errors.Is(err, pools.ErrDeviceID) {
		t.Fatalf("a device the node does not have: %v", err)
	}
	// a pod listed twice (one terminating): an error when the listings
	// differ, the answer when they hold the same devices
	srv.SetPods(deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {res: {"gpu1-m000"}}}),
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {res: {"gpu1-m001", "gpu1-m002"}}}))
	if _, err := r.GPUMemory(info, false); !errors.Is(err, ErrPodResources) || !strings.Contains(err.Error(), "listed 2 times") {
		t.Fatalf("a pod listed twice with other devices: %v", err)
	}
	twice := deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {res: {"gpu1-m001", "gpu1-m002"}}})
	srv.SetPods(twice, twice)
	if gm, err := r.GPUMemory(info, false); err != nil || fmt.Sprint(gm.GPUs) != "[{1 2147483648}]" {
		t.Fatalf("a pod listed twice with the same devices: %v %v", gm.GPUs, err)
	}
	gone := spec(t, pools.Config{KubeletDir: filepath.Join(dir, "none"), GPUs: []pools.GPUConfig{{Memory: "8GiB"}}})
	r2, err := NewPodResources(gone)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if _, err := r2.GPUMemory(info, false); !errors.Is(err, ErrPodResources) {
		t.Fatalf("no kubelet: %v", err)
	}
}

func orEmpty(s []admission.GPUShare) []admission.GPUShare {
	if s == nil {
		return []admission.GPUShare{}
	}
	return s
}

func orEmptyInts(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// The floor fail-open keeps a container at when the kubelet cannot say how
// much it was given: one unit on each node GPU its visible-devices env
// (Allocate's) names, by UUID or by index; nothing for names of no GPU here.
func TestGPUMemoryFloor(t *testing.T) {
	dir := t.TempDir()
	sp := spec(t, pools.Config{KubeletDir: dir, Unit: "512MiB", GPUs: []pools.GPUConfig{{Memory: "8GiB", UUID: "GPU-0a"}, {Memory: "8GiB", UUID: "GPU-1b"}}})
	r, err := NewPodResources(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for env, want := range map[string]string{
		"CUDA_VISIBLE_DEVICES=GPU-1b,GPU-0a": "[{0 536870912} {1 536870912}] true",
		"NVIDIA_VISIBLE_DEVICES=GPU-1b":      "[{1 536870912}] true",
		"CUDA_VISIBLE_DEVICES=1":             "[{1 536870912}] true",
		"CUDA_VISIBLE_DEVICES=GPU-ff":        "[] false",
		"PATH=/bin":                          "[] false",
	} {
		gm, ok := r.GPUMemoryFloor(admission.ContainerInfo{Env: []string{env}})
		if got := fmt.Sprintf("%v %v", orEmpty(gm.GPUs), ok); got != want {
			t.Errorf("%s: %s, want %s", env, got, want)
		}
	}
}
