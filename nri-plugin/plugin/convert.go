package plugin

import (
	"path/filepath"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
)

// ContainerInfo converts NRI's view of a container into the admission core's.
func ContainerInfo(pod *api.PodSandbox, ctr *api.Container) admission.ContainerInfo {
	info := admission.ContainerInfo{
		ID:          ctr.GetId(),
		Name:        ctr.GetName(),
		Labels:      ctr.GetLabels(),
		Annotations: ctr.GetAnnotations(),
		Env:         ctr.GetEnv(),
		Pid:         int(ctr.GetPid()),
		CgroupsPath: ctr.GetLinux().GetCgroupsPath(),
		Runtime:     bpf.RuntimeNRI,
	}
	if u := ctr.GetUser(); u != nil {
		info.User = admission.ProcessUser{Known: true, UID: u.GetUid()}
		for _, ns := range ctr.GetLinux().GetNamespaces() {
			if ns.GetType() == "user" {
				info.User.UserNS = true
			}
		}
	}
	if pod != nil {
		info.PodName = pod.GetName()
		info.PodNamespace = pod.GetNamespace()
		info.PodUID = pod.GetUid()
		info.PodLabels = pod.GetLabels()
		info.PodAnnotations = pod.GetAnnotations()
	}
	return info
}

// Adjustment turns an injection into NRI container adjustments.
func Adjustment(inj admission.Injection) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	for _, m := range inj.Mounts {
		adj.AddMount(&api.Mount{Source: m.Source, Destination: m.Destination, Type: "bind", Options: m.Options})
	}
	for _, e := range inj.Env {
		adj.AddEnv(e.Key, e.Value)
	}
	return adj
}

// TerminationLogPath is where Kubernetes mounts a container's
// termination-message file (terminationMessagePath's default).
const TerminationLogPath = "/dev/termination-log"

// terminationLog is the host file mounted at the container's
// /dev/termination-log ("" when none: not a Kubernetes container, or the
// pod moved terminationMessagePath); the runtime's record, not the tenant's.
func terminationLog(ctr *api.Container) string {
	for _, m := range ctr.GetMounts() {
		if m.GetDestination() == TerminationLogPath && filepath.IsAbs(m.GetSource()) {
			return m.GetSource()
		}
	}
	return ""
}
