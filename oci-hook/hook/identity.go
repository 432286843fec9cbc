package hook

import (
	"maps"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/bpf/ids"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/policies/grammar"
)

// AnnotationContainerName is the annotation in which the runc wrapper
// records a Docker container's name, so the hook (which sees only the OCI
// state and config.json) uses the same name for policy selection.
const AnnotationContainerName = "io.gpuext.oci.container-name"

// nameAnnotations are the annotations that carry a container's name, in
// order of preference. Without any of them the name is the container id.
var nameAnnotations = []string{
	AnnotationContainerName,
	"io.kubernetes.cri.container-name", // containerd CRI
	"io.kubernetes.container.name",     // CRI-O, dockershim
	"nerdctl/name",
}

// ContainerName picks the container's name from its annotations, else the id.
func ContainerName(id string, annotations map[string]string) string {
	for _, k := range nameAnnotations {
		if v := annotations[k]; v != "" {
			return v
		}
	}
	return id
}

// GpuextKeys returns the gpuext keys of m (nil when there are none), as
// the agent's selection reads them (grammar.IsKey): a key that only looks
// like one (Cyrillic letters, a zero-width space, upper case) is one too,
// and reaches the agent, which names it in its error.
func GpuextKeys(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if grammar.IsKey(k) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// HookContainerInfo is the admission core's view of a container as the OCI
// hook sees it: the state (id, host pid, annotations) and config.json
// (annotations, env, cgroupsPath). b may be nil when config.json could not
// be read (poststop only needs the id).
func HookContainerInfo(st *specs.State, b *Bundle, stage Stage) agentapi.ContainerInfo {
	ann := map[string]string{}
	info := agentapi.ContainerInfo{ID: st.ID, Runtime: ids.RuntimeOCIHook}
	if b != nil {
		maps.Copy(ann, b.Spec.Annotations)
		if b.Spec.Process != nil {
			info.Env = b.Spec.Process.Env
		}
		if b.Spec.Linux != nil {
			info.CgroupsPath = b.Spec.Linux.CgroupsPath
		}
		info.User = SpecUser(&b.Spec)
	}
	maps.Copy(ann, st.Annotations)
	info.Annotations = ann
	info.Name = ContainerName(st.ID, ann)
	// Only prestart/createRuntime see the pid in the host's pid namespace;
	// createContainer sees the container's own pid 1.
	if stage.registers() {
		info.Pid = st.Pid
	}
	return info
}

// SpecUser is the container process's user as config.json says it:
// process.user.uid, and whether the container has a user namespace of its
// own (a "user" namespace or uid mappings).
func SpecUser(s *specs.Spec) agentapi.ProcessUser {
	if s == nil || s.Process == nil {
		return agentapi.ProcessUser{}
	}
	u := agentapi.ProcessUser{Known: true, UID: s.Process.User.UID}
	if s.Linux != nil {
		u.UserNS = len(s.Linux.UIDMappings) > 0
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == specs.UserNamespace {
				u.UserNS = true
			}
		}
	}
	return u
}
