package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/policies"
)

// Admission is two steps. Planning decides everything about a container
// from its request, the fail mode, the catalog and admin constraints, the
// GPU memory the scheduler gave it, and a snapshot of the registry (State):
// the policy, the tenant key, the kernel-facing config and its digest, the
// per-GPU quotas, the compiled device probes and the tenant file. It
// writes nothing and needs no root. Applying (Core.apply) makes a Plan
// true: it reserves the tenant in the registry, writes the tenant and
// accounting directories and returns the injection. Core.Admit is one
// after the other; there is no other way in.

// Planner makes Plans. It holds no registry: its tests run without root.
type Planner struct {
	failMode    FailMode
	catalog     *policies.Catalog
	constraints *policies.Constraints
	// compileProbes turns a probe set, limited to the container's kernels
	// (probe-kernels.gpuext.io; nil = no limit), into the tenant's probe
	// module (compile.CompileKernels: cached per set and kernels, so only
	// a set's first admission pays for verification and translation).
	compileProbes func(probes, kernels []string) (*compile.Bundle, error)
	// gpuMem answers what GPU memory the scheduler gave a Kubernetes
	// container (SetGPUMemory; nil: no device plugin, no request).
	gpuMem GPUMemorySource
	log    *logrus.Entry
}

// NewPlanner returns a Planner over a catalog; constraints may be nil
// (everything allowed), log nil (the standard logger). A catalog whose
// probe catalog is not the built-in one (a probe directory) gets a probe
// compiler, and a cache, of its own.
func NewPlanner(mode FailMode, catalog *policies.Catalog, constraints *policies.Constraints, log *logrus.Entry) (*Planner, error) {
	if mode == "" {
		mode = FailOpen
	}
	if catalog == nil {
		return nil, errors.New("admission: a catalog is required")
	}
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	pl := &Planner{failMode: mode, catalog: catalog, constraints: constraints, log: log,
		compileProbes: compile.CompileKernels}
	if pc := programCatalog(catalog); pc != programs.Builtin() {
		// a probe directory's probes too: a compiler (and cache) of its own
		pl.compileProbes = compile.NewCompiler(pc, nil).CompileKernels
	}
	return pl, nil
}

// ProbeCatalog is the probe catalog the planner's selections name (built-in
// and the host's probe directory): what the views of its tenants' probes
// come from.
func (pl *Planner) ProbeCatalog() *programs.Catalog { return programCatalog(pl.catalog) }

// programCatalog is the program catalog whose names cat's policies select:
// the one Catalog put in its algorithms (with the host's probe directory),
// else the built-in one (the policy model holds only the names).
func programCatalog(cat *policies.Catalog) *programs.Catalog {
	if pc, ok := cat.Algorithms().Probes.(*programs.Catalog); ok && pc != nil {
		return pc
	}
	return programs.Builtin()
}

// Plan is what admission does for one container, decided before anything
// is written.
type Plan struct {
	// Selection is the policy the container gets (the default one where
	// fail-open replaced a bad request; its probes dropped where fail-open
	// dropped probes that did not compile) and where each setting came from.
	Selection policies.Selection
	// TenantKey names the tenant in the registry (the container's own, or
	// its pod's).
	TenantKey string
	// Config is the kernel-facing tenant config the registry will hold (its
	// tenant id is the registry's to fill in); ConfigDigest identifies it.
	Config       bpf.GpuextTenantConfig
	ConfigDigest string
	// RequestErr is the keyed error of a bad request that fail-open mode
	// replaced with the default policy; nil for a good request.
	RequestErr error
	// FailedOpen: fail-open let the container start although something
	// went wrong (RequestErr, or GPU memory not known and kept at its floor).
	FailedOpen bool
	// ProbesDropped is why fail-open dropped the policy's device probes.
	ProbesDropped error
	// Probes is the compiled probe module (nil: none).
	Probes *compile.Bundle
	// GPUs are the per-GPU quotas of a container given GPU memory by the
	// scheduler (empty: the policy's quota applies on every GPU).
	GPUs TenantGPUs
	// File is the tenant's config.json and, through File.Settings, its
	// settings.bin; its TenantID is 0 until the registry assigns one.
	File tenantcfg.File
}

// State is what planning reads of the registry: the tenant a key names,
// if any (the pod tenant a container joins must keep its settings). Core
// answers from its registry and state directory; StateMap from a snapshot.
type State interface {
	Tenant(key string) (TenantState, bool, error)
}

// TenantState is what the registry and the state directory hold of one tenant.
type TenantState struct {
	ID bpf.TenantID
	// Reserved: the registry holds its record (Policy, Config). A key
	// whose record is gone (released meanwhile) is not Reserved.
	Reserved bool
	Policy   string
	Config   bpf.GpuextTenantConfig
	// File is its config.json; nil while it is not written (a sibling's
	// admission that failed before writing it).
	File *tenantcfg.File
}

// StateMap is a State from a snapshot: tenants by key.
type StateMap map[string]TenantState

// Tenant is the tenant under key in the snapshot.
func (m StateMap) Tenant(key string) (TenantState, bool, error) {
	t, ok := m[key]
	return t, ok, nil
}

// Plan decides admission for a container against state. In strict mode a
// bad request is an error naming the key (it wraps ErrRefused where the
// device probes do not compile); in fail-open mode it is the plan of the
// default policy with RequestErr set. An error of GPU memory lookup or of
// state is returned as it is: Core.Admit applies the fail mode to it.
func (pl *Planner) Plan(info ContainerInfo, state State) (Plan, error) {
	return pl.plan(info, state, pl.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name,
		"pod": info.PodName, "namespace": info.PodNamespace}))
}

func (pl *Planner) plan(info ContainerInfo, state State, log *logrus.Entry) (Plan, error) {
	if info.ID == "" {
		return Plan{}, errors.New("admit: container id is empty")
	}
	sel, reqErr := pl.selectPolicy(info)
	var gpus TenantGPUs
	floor := false // fail-open: the GPU memory is the least the scheduler can have given (gpuMemoryOrFloor)
	if reqErr == nil {
		gm, fl, err := pl.gpuMemoryOrFloor(info, sel, log)
		if err != nil {
			return Plan{}, err
		}
		floor = fl
		gpus, reqErr = applyGPUMemory(&sel, gm)
	}
	if reqErr == nil && sel.Tenant == policies.TenantPod {
		if key := tenantKey(info, sel); isPodKey(key, info.Runtime) {
			reqErr = samePodTenant(state, key, sel, gpus)
		}
	}
	if reqErr != nil {
		if failmode.Decide(pl.failMode, KindOf(reqErr)) == failmode.Refused {
			return Plan{}, reqErr
		}
		log.WithError(reqErr).WithFields(logrus.Fields{"failMode": pl.failMode, "errorKind": KindOf(reqErr)}).
			Warn("bad gpu policy request: container starts with the default policy")
		sel = policies.Selection{Policy: pl.catalog.Default(), Tenant: "container"}
		// the default policy keeps the GPU memory the scheduler gave the
		// container as its quota: fail-open never lifts the request
		var err error
		if gpus, floor, err = pl.gpuQuota(info, &sel, log); err != nil {
			return Plan{}, err
		}
	}
	// probes dropped in fail-open mode (they did not compile) are logged
	// there, and sel.Policy.Probes is then empty
	bundle, dropped, err := pl.probeBundle(info, &sel, log.WithField("policy", sel.Policy.Name))
	if err != nil {
		return Plan{}, err
	}
	key := tenantKey(info, sel)
	failedOpen := reqErr != nil || floor
	cfg := tenantConfig(sel.Policy, failedOpen)
	return Plan{Selection: sel, TenantKey: key, Config: cfg, ConfigDigest: configDigest(sel.Policy.Name, cfg),
		RequestErr: reqErr, FailedOpen: failedOpen, ProbesDropped: dropped, Probes: bundle, GPUs: gpus,
		File: tenantFile(key, sel.Policy, bundle, gpus)}, nil
}

// samePodTenant refuses a container of a pod tenant that asks for other
// settings than the tenant already has: one tenant has one config and one
// set of per-GPU quotas, and the last container admitted must not change
// its siblings' quota or class.
func samePodTenant(state State, key string, sel policies.Selection, gpus TenantGPUs) error {
	have, ok, err := state.Tenant(key)
	if err != nil || !ok {
		return err
	}
	if have.Reserved {
		digest := configDigest(sel.Policy.Name, tenantConfig(sel.Policy, false))
		if hd := configDigest(have.Policy, have.Config); hd != digest {
			return fmt.Errorf("%w: %s=pod: this container asks for policy %q (config %s), its pod's tenant %d has policy %q (config %s): "+
				"per-container settings are not possible in a pod tenant, set them for the pod (KEY/pod)",
				errRequest, policies.KeyTenant, sel.Policy.Name, digest, have.ID, have.Policy, hd)
		}
	}
	if f := have.File; f != nil && (!slices.Equal(f.GPUs, gpus.GPUs) || !slices.Equal(f.GPUQuotaBytes, gpus.Quotas)) {
		return fmt.Errorf("%w: %s=pod: this container's GPU quotas %v on GPUs %v differ from its pod's tenant %d (%v on GPUs %v): "+
			"per-container settings are not possible in a pod tenant",
			errRequest, policies.KeyTenant, gpus.Quotas, gpus.GPUs, have.ID, f.GPUQuotaBytes, f.GPUs)
	}
	return nil
}

// tenantFile is the tenant's config.json (and settings.bin) for policy p:
// TenantID is left 0 for the registry to assign.
func tenantFile(key string, p policies.Policy, probes *compile.Bundle, gpus TenantGPUs) tenantcfg.File {
	probeNames := p.Probes
	if probeNames == nil {
		probeNames = []string{}
	}
	probeKernels := []string{}
	if probes != nil && len(probes.Manifest.Kernels) > 0 {
		probeKernels = probes.Manifest.Kernels
	}
	return tenantcfg.File{
		ABIVersion: abiVersion, TenantKey: key, Policy: p.Name,
		Class: string(p.Priority.Class), QuotaBytes: p.Memory.QuotaBytes, TimesliceUS: p.Priority.TimesliceUS,
		Interleave: p.Priority.Interleave, ActiveWindowUS: p.Priority.ActiveWindowUS,
		SMPercent: p.Priority.EffectiveSMPercent(), MPSClientPriority: p.Priority.EffectiveMPSClientPriority(),
		LaunchGate: p.Priority.EffectiveLaunchGate(), Eviction: p.Memory.Eviction.Name, Prefetch: p.Memory.Prefetch.Name,
		Probes: probeNames, ProbeKernels: probeKernels, GPUs: gpus.GPUs, GPUQuotaBytes: gpus.Quotas, GPUMemoryBytes: gpus.Granted,
		QuotaAction: p.Memory.QuotaAction, LatencyTarget: latencyTargetOf(p.Priority),
	}
}

// latencyTargetOf is the policy's latency target where it applies (a
// latency-critical tenant; an override that changes the class drops it).
func latencyTargetOf(p policies.PriorityPolicy) string {
	if p.Class != policies.LatencyCritical {
		return ""
	}
	return p.LatencyTarget
}

// registryState is State from a core's registry and state directory: the
// tenant reserved under a key, its record, and its config.json.
type registryState struct{ c *Core }

func (r registryState) Tenant(key string) (TenantState, bool, error) {
	c := r.c
	id, ok, err := c.reg.LookupKey(key)
	if err != nil || !ok {
		return TenantState{}, false, err
	}
	ts := TenantState{ID: id}
	t, err := c.reg.TenantRecord(id)
	switch {
	case err == nil:
		ts.Reserved, ts.Policy, ts.Config = true, t.Policy, t.Config
	case !errors.Is(err, bpf.ErrNoTenant):
		return TenantState{}, false, err
	}
	data, err := os.ReadFile(filepath.Join(c.tenantDir(id), TenantConfigFile))
	if err != nil {
		return ts, true, nil // not written yet (a sibling's admission failed): nothing to differ from
	}
	var f tenantcfg.File
	if err := json.Unmarshal(data, &f); err != nil {
		return TenantState{}, false, fmt.Errorf("tenant %d config.json: %w", id, err)
	}
	ts.File = &f
	return ts, true, nil
}
