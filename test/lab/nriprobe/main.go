package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// event is one line of the probe's output file.
type event struct {
	Event       string            `json:"event"`
	Pod         string            `json:"pod,omitempty"`
	PodUID      string            `json:"pod_uid,omitempty"`
	Container   string            `json:"container,omitempty"`
	ID          string            `json:"id,omitempty"`
	Pid         uint32            `json:"pid,omitempty"`
	CgroupsPath string            `json:"cgroups_path,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// probe records events and optionally adds an env var at CreateContainer.
type probe struct {
	mu     sync.Mutex
	out    *os.File
	addEnv string // KEY=VALUE, empty for none
}

func (p *probe) record(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	_, _ = p.out.Write(append(line, '\n'))
}

func podEvent(name string, pod *api.PodSandbox) event {
	return event{Event: name, Pod: pod.GetName(), PodUID: pod.GetUid(), ID: pod.GetId(),
		Labels: pod.GetLabels(), Annotations: pod.GetAnnotations()}
}

func containerEvent(name string, pod *api.PodSandbox, ctr *api.Container) event {
	return event{Event: name, Pod: pod.GetName(), PodUID: pod.GetUid(), Container: ctr.GetName(),
		ID: ctr.GetId(), Pid: ctr.GetPid(), CgroupsPath: ctr.GetLinux().GetCgroupsPath(),
		Labels: ctr.GetLabels(), Annotations: ctr.GetAnnotations()}
}

func (p *probe) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.record(event{Event: "Synchronize", Annotations: map[string]string{
		"pods": fmt.Sprint(len(pods)), "containers": fmt.Sprint(len(ctrs))}})
	return nil, nil
}

func (p *probe) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podEvent("RunPodSandbox", pod))
	return nil
}

func (p *probe) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podEvent("StopPodSandbox", pod))
	return nil
}

func (p *probe) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podEvent("RemovePodSandbox", pod))
	return nil
}

func (p *probe) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record(containerEvent("CreateContainer", pod, ctr))
	if p.addEnv == "" {
		return nil, nil, nil
	}
	key, value, _ := strings.Cut(p.addEnv, "=")
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv(key, value)
	return adjust, nil, nil
}

func (p *probe) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record(containerEvent("StartContainer", pod, ctr))
	return nil
}

func (p *probe) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.record(containerEvent("StopContainer", pod, ctr))
	return nil, nil
}

func (p *probe) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record(containerEvent("RemoveContainer", pod, ctr))
	return nil
}

func main() {
	socket := flag.String("socket", os.Getenv("NRI_SOCKET"), "NRI socket of the runtime")
	name := flag.String("name", "nriprobe", "plugin name")
	idx := flag.String("idx", "50", "plugin index (two digits)")
	outPath := flag.String("out", "nriprobe.jsonl", "file the events are appended to")
	addEnv := flag.String("add-env", "", "KEY=VALUE to add to every created container")
	flag.Parse()

	out, err := os.OpenFile(*outPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nriprobe: open %s: %v\n", *outPath, err)
		os.Exit(1)
	}
	p := &probe{out: out, addEnv: *addEnv}

	opts := []stub.Option{stub.WithPluginName(*name), stub.WithOnClose(func() { os.Exit(0) })}
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	// A pre-installed plugin gets its index from NRI_PLUGIN_IDX; setting it again fails.
	if os.Getenv("NRI_PLUGIN_IDX") == "" {
		opts = append(opts, stub.WithPluginIdx(*idx))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nriprobe: %v\n", err)
		os.Exit(1)
	}
	p.record(event{Event: "Connecting"})
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "nriprobe: %v\n", err)
		os.Exit(1)
	}
}
