package plugin

import (
	"reflect"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
)

func TestContainerInfo(t *testing.T) {
	pod := &api.PodSandbox{Id: "p1", Name: "web", Uid: "u1", Namespace: "prod",
		Labels: map[string]string{"team": "x"}, Annotations: map[string]string{"policy.gpuext.io/pod": "batch"}}
	ctr := &api.Container{Id: "c1", Name: "srv", Pid: 42, Env: []string{"A=1"},
		Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"},
		Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/podu1/c1"}}
	got := ContainerInfo(pod, ctr)
	want := admission.ContainerInfo{ID: "c1", Name: "srv", PodName: "web", PodNamespace: "prod", PodUID: "u1",
		Labels: ctr.Labels, Annotations: ctr.Annotations, PodLabels: pod.Labels, PodAnnotations: pod.Annotations,
		CgroupsPath: "/kubepods/podu1/c1", Pid: 42, Env: []string{"A=1"}, Runtime: bpf.RuntimeNRI}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ContainerInfo =\n%+v\nwant\n%+v", got, want)
	}
	// The process's user, where the runtime says it (containerd does, from
	// the OCI spec): uid 0 is the host's root unless the container has a
	// user namespace of its own; no user said is "not known", taken as root.
	for _, tc := range []struct {
		user     *api.User
		ns       []*api.LinuxNamespace
		hostRoot bool
	}{
		{nil, nil, true},
		{&api.User{Uid: 0}, nil, true},
		{&api.User{Uid: 1000}, nil, false},
		{&api.User{Uid: 0}, []*api.LinuxNamespace{{Type: "pid"}, {Type: "user"}}, false},
	} {
		c := &api.Container{Id: "c3", User: tc.user, Linux: &api.LinuxContainer{Namespaces: tc.ns}}
		if got := ContainerInfo(nil, c).User; got.HostRoot() != tc.hostRoot || got.Known != (tc.user != nil) {
			t.Errorf("user %v namespaces %v: %+v, HostRoot %v, want %v", tc.user, tc.ns, got, got.HostRoot(), tc.hostRoot)
		}
	}
	// No pod and no linux section must not panic.
	if got := ContainerInfo(nil, &api.Container{Id: "c2"}); got.ID != "c2" || got.CgroupsPath != "" {
		t.Errorf("ContainerInfo without pod = %+v", got)
	}
}

func TestAdjustment(t *testing.T) {
	adj := Adjustment(admission.Injection{
		Mounts: []admission.Mount{{Source: "/h/devrt", Destination: "/run/gpuext/devrt", Options: []string{"rbind", "ro"}}},
		Env:    []admission.EnvVar{{Key: "LD_PRELOAD", Value: "/x.so"}, {Key: "GPUEXT_TENANT_ID", Value: "7"}},
	})
	if len(adj.Mounts) != 1 || adj.Mounts[0].Type != "bind" || adj.Mounts[0].Source != "/h/devrt" ||
		!reflect.DeepEqual(adj.Mounts[0].Options, []string{"rbind", "ro"}) {
		t.Errorf("mounts = %+v", adj.Mounts)
	}
	env := map[string]string{}
	for _, e := range adj.Env {
		env[e.Key] = e.Value
	}
	if env["LD_PRELOAD"] != "/x.so" || env["GPUEXT_TENANT_ID"] != "7" || len(env) != 2 {
		t.Errorf("env = %v", env)
	}
}
