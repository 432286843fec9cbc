package deviceplugin

import (
	"errors"
	"fmt"
	"path/filepath"
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
	srv.SetPods(deviceplugintest.Pod("ml", "train", nil), deviceplugintest.Pod("ml", "train", nil))
	if _, err := r.GPUMemory(info, false); !errors.Is(err, ErrPodResources) {
		t.Fatalf("a pod listed twice: %v", err)
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
