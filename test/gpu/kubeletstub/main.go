// Command kubeletstub stands in for the kubelet's device manager beside a
// real agent on the GPU machine (make gpu-test, section multi-gpu): it
// serves the registration socket in <dir>/device-plugins, waits for the
// agent's device plugin to register, and prints as JSON what the kubelet
// would learn from it: the devices of its first ListAndWatch answer, the
// plugin's preferred allocation of --preferred units out of all of them,
// and its Allocate answer (env, CDI devices) for each --allocate list.
// Built static by make gpu-prep (out/gpu/kubelet-stub): the GPU machine
// has no Go.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"
)

// Answer is what the stub prints.
type Answer struct {
	Resource    string       `json:"resource"`
	Endpoint    string       `json:"endpoint"`
	Devices     []string     `json:"devices"`
	Unhealthy   []string     `json:"unhealthy"`
	Preferred   []string     `json:"preferred,omitempty"`
	Allocations []Allocation `json:"allocations"`
}

// Allocation is the plugin's Allocate answer for one container's devices.
type Allocation struct {
	Devices    []string          `json:"devices"`
	Envs       map[string]string `json:"envs"`
	CDIDevices []string          `json:"cdiDevices"`
}

type lists []string

func (l *lists) String() string     { return strings.Join(*l, " ") }
func (l *lists) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	dir := flag.String("dir", "", "the kubelet directory the agent's devicePlugin.kubeletDir names (device-plugins/ is made in it)")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait for the plugin to register")
	preferred := flag.Int("preferred", 0, "ask GetPreferredAllocation for this many units out of every device (0: not asked)")
	var allocs lists
	flag.Var(&allocs, "allocate", "comma-separated device ids to Allocate as one container (repeatable)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: kubeletstub --dir DIR [--preferred N] [--allocate gpu1-m000,gpu1-m001]... [--timeout 60s]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dir, *timeout, *preferred, allocs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletstub:", err)
		os.Exit(1)
	}
}

func run(dir string, timeout time.Duration, preferred int, allocs []string, out io.Writer) error {
	if err := os.MkdirAll(dir+"/device-plugins", 0o755); err != nil {
		return err
	}
	k, err := deviceplugintest.ServeKubelet(dir)
	if err != nil {
		return fmt.Errorf("serve the registration socket: %w", err)
	}
	defer k.Stop()
	r, err := k.Next(timeout)
	if err != nil {
		return err
	}
	a := Answer{Resource: r.Request.GetResourceName(), Endpoint: r.Request.GetEndpoint(), Devices: []string{}, Unhealthy: []string{},
		Allocations: []Allocation{}}
	for _, d := range r.Devices {
		a.Devices = append(a.Devices, d.GetID())
		if d.GetHealth() != pluginapi.Healthy {
			a.Unhealthy = append(a.Unhealthy, d.GetID())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if preferred > 0 {
		resp, err := r.Client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: a.Devices, AllocationSize: int32(preferred)}}})
		if err != nil {
			return fmt.Errorf("GetPreferredAllocation of %d units: %w", preferred, err)
		}
		for _, c := range resp.GetContainerResponses() {
			a.Preferred = append(a.Preferred, c.GetDeviceIDs()...)
		}
	}
	for _, ids := range allocs {
		devs := strings.Split(ids, ",")
		resp, err := r.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}}})
		if err != nil {
			return fmt.Errorf("Allocate %s: %w", ids, err)
		}
		for _, c := range resp.GetContainerResponses() {
			al := Allocation{Devices: devs, Envs: c.GetEnvs(), CDIDevices: []string{}}
			for _, d := range c.GetCdiDevices() {
				al.CDIDevices = append(al.CDIDevices, d.GetName())
			}
			a.Allocations = append(a.Allocations, al)
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}
