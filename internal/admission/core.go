package admission

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/policies"
)

// Config is the admission core's configuration (the shared part of the NRI
// plugin's and the OCI hook's config files).
type Config struct {
	FailMode FailMode
	// StateDir holds one directory per tenant (tenants/<id>/config.json), mounted
	// read-only into the tenant's containers.
	StateDir string
	// DevrtDir is the host directory holding the device runtime library; mounted
	// read-only at ContainerDevrtDir.
	DevrtDir string
	// MPSPipeDir, when set, is the pipe directory of the host's MPS control
	// daemon: every tenant container gets it (read-write, at the same path)
	// and CUDA_MPS_PIPE_DIRECTORY, so its CUDA contexts are MPS clients and a
	// best-effort tenant's smPercent can confine it (docs/injection.md).
	MPSPipeDir string
	// HostRoot is where the host's /proc is (the config's hostRoot; "" is
	// "/"): makeAcctDir checks there that the tmpfs it mounts is the one
	// the node's runtime will bind (an agent in a container whose state dir
	// does not propagate mounts to the node).
	HostRoot string
	// MPSShmDir, when set, is mounted at /dev/shm in every tenant container:
	// the shared memory the MPS server and its clients exchange through,
	// for containers that have their own IPC namespace.
	MPSShmDir string
	// MPSRootTenants says whether a tenant whose process may be the host's
	// root becomes an MPS client: MPSRootAllow ("" too) gives it the control
	// socket and logs that it can change the server's share; MPSRootDeny
	// does not (the tenant runs as a plain, time-sliced client).
	MPSRootTenants string
}

// The values of Config.MPSRootTenants (the config file's mpsRootTenants).
const (
	MPSRootAllow = config.MPSRootAllow
	MPSRootDeny  = config.MPSRootDeny
)

// Core is the admission core. It is safe for concurrent use, and several
// processes may run one at a time against the same registry.
type Core struct {
	cfg         Config
	reg         *bpf.Registry
	catalog     *policies.Catalog
	constraints *policies.Constraints
	resolver    *cgroup.Resolver
	log         *logrus.Entry
	// compileProbes turns a probe set, limited to the container's kernels
	// (probe-kernels.gpuext.io; nil = no limit), into the tenant's probe
	// module (compile.CompileKernels: cached per set and kernels, so only
	// a set's first admission pays for verification and translation).
	compileProbes func(probes, kernels []string) (*compile.Bundle, error)
	obs           Observer // SetObserver; nil: nobody observes
	// gpuMem answers what GPU memory the scheduler gave a Kubernetes
	// container (SetGPUMemory; nil: no device plugin, no request).
	gpuMem GPUMemorySource
	// decisionKey authenticates the decisions Admit makes (Decision.MAC).
	decisionKey []byte
	// unboundedAcct warns once that acct dirs cannot be bounded here.
	unboundedAcct sync.Once
	// nodeGPUs are the node's GPUs (SetNodeGPUs), for the dmem regions.
	nodeGPUs []NodeGPU
	// dmemNotice keeps dmem's node-wide notices to once (dmem.go).
	dmemNotice dmemNotice
}

// New returns a Core. constraints may be nil (everything allowed).
func New(cfg Config, reg *bpf.Registry, catalog *policies.Catalog, constraints *policies.Constraints,
	resolver *cgroup.Resolver, log *logrus.Entry) (*Core, error) {
	if cfg.FailMode == "" {
		cfg.FailMode = FailOpen
	}
	if cfg.StateDir == "" || cfg.DevrtDir == "" {
		return nil, fmt.Errorf("admission config: stateDir and devrtDir are required")
	}
	if reg == nil || catalog == nil || resolver == nil {
		return nil, fmt.Errorf("admission: registry, catalog and cgroup resolver are required")
	}
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	c := &Core{cfg: cfg}
	if err := os.MkdirAll(c.boardDir(), 0o755); err != nil {
		return nil, fmt.Errorf("board dir: %w", err)
	}
	key, err := loadDecisionKey(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	c.decisionKey = key
	c.reg, c.catalog, c.constraints, c.resolver, c.log = reg, catalog, constraints, resolver, log
	c.compileProbes = compile.CompileKernels
	if pc := programCatalog(catalog); pc != programs.Builtin() {
		// a probe directory's probes too: a compiler (and cache) of its own
		c.compileProbes = compile.NewCompiler(pc, nil).CompileKernels
	}
	return c, nil
}

// ProbeCatalog is the probe catalog the core's selections name (built-in
// and the host's probe directory): what the views of its tenants' probes
// come from.
func (c *Core) ProbeCatalog() *programs.Catalog { return programCatalog(c.catalog) }

// programCatalog is the program catalog whose names cat's policies select:
// the one Catalog put in its algorithms (with the host's probe directory),
// else the built-in one (the policy model holds only the names).
func programCatalog(cat *policies.Catalog) *programs.Catalog {
	if pc, ok := cat.Algorithms().Probes.(*programs.Catalog); ok && pc != nil {
		return pc
	}
	return programs.Builtin()
}

// Registry returns the tenant registry the core writes.
func (c *Core) Registry() *bpf.Registry { return c.reg }

// Admit decides the container's policy once: it selects, reserves the
// tenant, writes the tenant and accounting directories and returns the
// injection. The fail mode is applied here, for every runtime path and every
// error kind (KindOf): in strict mode any error refuses the container (it
// wraps ErrRefused); in fail-open mode Admit returns no error: a bad request
// gets the default policy (Decision.RequestErr), an internal error a decision
// to run without gpuext (Decision.Skipped). It is idempotent: admitting the
// same container twice returns the same tenant.
func (c *Core) Admit(info ContainerInfo) (d Decision, err error) {
	if c.obs != nil {
		start := time.Now()
		defer func() { c.obs.Admitted(info, d, err, time.Since(start)) }()
	}
	log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "pod": info.PodName,
		"namespace": info.PodNamespace})
	d, err = c.admit(info, log)
	if err != nil {
		d, err = c.failed(info, log, "admit", err)
	}
	if err == nil {
		d.MAC = decisionMAC(c.decisionKey, info.ID, d)
	}
	return d, err
}

// failed applies the fail mode to an error of admission or registration.
func (c *Core) failed(info ContainerInfo, log *logrus.Entry, step string, err error) (Decision, error) {
	return ApplyFailMode(c.cfg.FailMode, info, log, step, err)
}

// ApplyFailMode applies the fail mode (failmode.Apply, the one rule for
// every runtime path) to an error of admission or registration, of the
// kind KindOf says: in strict mode it refuses the container (the error
// wraps ErrRefused); in fail-open mode the container runs without gpuext
// (a skipped decision, no error). A bad request never reaches it in
// fail-open mode: Admit has given it the default policy already (the same
// rule, failmode.Decide). Core applies it to its own errors; the NRI
// adapter to an error before there is a core.
func ApplyFailMode(mode FailMode, info ContainerInfo, log *logrus.Entry, step string, err error) (Decision, error) {
	if _, ferr := failmode.Apply(mode, KindOf(err), log, step, info.Name, err); ferr != nil {
		return Decision{}, ferr
	}
	return Decision{Skipped: true, FailedOpen: true, Err: err}, nil
}

func (c *Core) admit(info ContainerInfo, log *logrus.Entry) (Decision, error) {
	if info.ID == "" {
		return Decision{}, errors.New("admit: container id is empty")
	}
	sel, reqErr := c.selectPolicy(info)
	var gpus tenantGPUs
	floor := false // fail-open: the GPU memory is the least the scheduler can have given (gpuMemoryOrFloor)
	if reqErr == nil {
		gm, fl, err := c.gpuMemoryOrFloor(info, sel, log)
		if err != nil {
			return Decision{}, err
		}
		floor = fl
		gpus, reqErr = applyGPUMemory(&sel, gm)
	}
	if reqErr == nil && sel.Tenant == policies.TenantPod {
		if key := tenantKey(info, sel); isPodKey(key, info.Runtime) {
			reqErr = c.samePodTenant(key, sel, configDigest(sel.Policy.Name, tenantConfig(sel.Policy, false)))
			if reqErr == nil {
				reqErr = c.samePodGPUs(key, gpus)
			}
		}
	}
	if reqErr != nil {
		if failmode.Decide(c.cfg.FailMode, KindOf(reqErr)) == failmode.Refused {
			return Decision{}, reqErr
		}
		log.WithError(reqErr).WithFields(logrus.Fields{"failMode": c.cfg.FailMode, "errorKind": KindOf(reqErr)}).
			Warn("bad gpu policy request: container starts with the default policy")
		sel = policies.Selection{Policy: c.catalog.Default(), Tenant: "container"}
		// the default policy keeps the GPU memory the scheduler gave the
		// container as its quota: fail-open never lifts the request
		var err error
		if gpus, floor, err = c.gpuQuota(info, &sel, log); err != nil {
			return Decision{}, err
		}
	}
	log = log.WithField("policy", sel.Policy.Name)
	// probes dropped in fail-open mode (they did not compile) are logged
	// there, and sel.Policy.Probes is then empty
	bundle, _, err := c.probeBundle(info, &sel, log)
	if err != nil {
		return Decision{}, err
	}
	key := tenantKey(info, sel)
	failedOpen := reqErr != nil || floor
	cfg := tenantConfig(sel.Policy, failedOpen)
	digest := configDigest(sel.Policy.Name, cfg)
	unlock, err := c.lockState(false)
	if err != nil {
		return Decision{}, err
	}
	defer unlock()
	id, err := c.reg.Reserve(key, sel.Policy.Name, cfg)
	if err != nil {
		return Decision{}, fmt.Errorf("reserve tenant %q: %w", key, err)
	}
	d := Decision{Tenant: id, TenantKey: key, Policy: sel.Policy, ConfigDigest: digest, RequestErr: reqErr,
		FailedOpen: failedOpen}
	dir, err := c.writeTenantDir(id, key, sel.Policy, bundle, gpus)
	if err != nil {
		return Decision{}, c.undoReserve(info, err)
	}
	rec, err := c.reg.TenantRecord(id)
	if err != nil {
		return Decision{}, c.undoReserve(info, fmt.Errorf("tenant %d: %w", id, err))
	}
	acct, err := c.makeAcctDir(id, rec.Created)
	if err != nil {
		return Decision{}, c.undoReserve(info, err)
	}
	d.Injection = c.injection(info, id, dir, acct, sel.Policy)
	fields := logrus.Fields{"tenant": id, "tenantKey": key, "configDigest": digest}
	if len(sel.Policy.Probes) > 0 {
		fields["probes"] = strings.Join(sel.Policy.Probes, ",")
	}
	if bundle != nil && len(bundle.Manifest.Kernels) > 0 {
		fields["probeKernels"] = strings.Join(bundle.Manifest.Kernels, ",")
	}
	if len(gpus.GPUs) > 0 {
		fields["gpus"], fields["gpuQuotaBytes"] = gpus.GPUs, gpus.Quotas
	}
	log.WithFields(fields).Info("admitted container")
	return d, nil
}

// undoReserve gives back the tenant a failed admission reserved for its own
// container (a pod's tenant is left to the pod's other containers).
func (c *Core) undoReserve(info ContainerInfo, err error) error {
	if rerr := c.releaseIfEmpty(containerTenantKey(info)); rerr != nil {
		return errors.Join(err, fmt.Errorf("release reserved tenant: %w", rerr))
	}
	return err
}

// samePodTenant refuses a container of a pod tenant that asks for other
// settings than the tenant already has: one tenant has one config, and the
// last container admitted must not change its siblings' quota or class.
func (c *Core) samePodTenant(key string, sel policies.Selection, digest string) error {
	id, ok, err := c.reg.LookupKey(key)
	if err != nil || !ok {
		return err
	}
	t, err := c.reg.TenantRecord(id)
	if errors.Is(err, bpf.ErrNoTenant) {
		return nil
	}
	if err != nil {
		return err
	}
	if have := configDigest(t.Policy, t.Config); have != digest {
		return fmt.Errorf("%w: %s=pod: this container asks for policy %q (config %s), its pod's tenant %d has policy %q (config %s): "+
			"per-container settings are not possible in a pod tenant, set them for the pod (KEY/pod)",
			errRequest, policies.KeyTenant, sel.Policy.Name, digest, id, t.Policy, have)
	}
	return nil
}

// Register attaches the container's cgroup to the tenant of its decision.
// The cgroup must exist (NRI StartContainer, OCI createRuntime). It never
// selects: d is the decision Admit made (kept by the caller, or carried in
// AnnotationDecision), checked against the registry and the container. A
// skipped decision registers nothing. The fail mode applies as in Admit:
// in fail-open mode a failure returns a skipped decision and no error.
func (c *Core) Register(info ContainerInfo, d Decision) (rd Decision, cg cgroup.Cgroup, err error) {
	if c.obs != nil {
		defer func() { c.obs.Registered(info, rd, err) }()
	}
	log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "pod": info.PodName,
		"namespace": info.PodNamespace, "tenant": d.Tenant})
	if d.Skipped {
		return d, cgroup.Cgroup{}, nil
	}
	d2, cg, err := c.register(info, d)
	if err != nil {
		fd, ferr := c.failed(info, log, "register", err)
		return fd, cgroup.Cgroup{}, ferr
	}
	return d2, cg, nil
}

func (c *Core) register(info ContainerInfo, d Decision) (Decision, cgroup.Cgroup, error) {
	if d.TenantKey == "" {
		return d, cgroup.Cgroup{}, fmt.Errorf("%w: no admission decision is known for container %q", ErrDecisionMismatch, info.ID)
	}
	t, err := c.checkDecision(info, d)
	if err != nil {
		return d, cgroup.Cgroup{}, err
	}
	if d.Policy.Name == "" {
		d.Policy.Name = t.Policy
	}
	return c.attach(info, d)
}

// checkDecision: the decision names this container's tenant key, and the
// registry still holds that tenant with the config the decision reserved.
func (c *Core) checkDecision(info ContainerInfo, d Decision) (bpf.Tenant, error) {
	if own := containerTenantKey(info); d.TenantKey != own && !isPodKey(d.TenantKey, info.Runtime) {
		return bpf.Tenant{}, fmt.Errorf("%w: decision for tenant key %q, container %q of runtime %s has key %q",
			ErrDecisionMismatch, d.TenantKey, info.ID, runtimePrefix(info.Runtime), own)
	}
	t, err := c.reg.TenantRecord(d.Tenant)
	if err != nil {
		return bpf.Tenant{}, fmt.Errorf("%w: decision: tenant %d key %q config %s; registry: %w",
			ErrDecisionMismatch, d.Tenant, d.TenantKey, d.ConfigDigest, err)
	}
	if have := configDigest(t.Policy, t.Config); t.Key != d.TenantKey || have != d.ConfigDigest {
		return bpf.Tenant{}, fmt.Errorf("%w: decision: tenant %d key %q policy %q config %s; registry: tenant %d key %q policy %q config %s",
			ErrDecisionMismatch, d.Tenant, d.TenantKey, d.Policy.Name, d.ConfigDigest, t.ID, t.Key, t.Policy, have)
	}
	return t, nil
}

// RegisterOCI is the OCI hook's registration at createRuntime. It applies
// the decision the runc wrapper wrote into config.json (AnnotationDecision),
// once its MAC shows the agent made it for this container; any other is
// forged (ErrDecisionForged), refused in strict mode and logged.
// A container without one was not created through the wrapper (podman's
// hooks.d, a hook added to config.json by hand): the hook is then the only
// gpuext step, and Admit decides here, once (it writes the tenant
// directory; no injection can reach the container from a hook).
func (c *Core) RegisterOCI(info ContainerInfo) (Decision, cgroup.Cgroup, error) {
	d, ok, err := DecodeDecision(info.Annotations)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrDecisionForged, err) // malformed: not the agent's either
	} else if ok {
		err = c.verifyDecision(info.ID, d)
	}
	if err != nil {
		// A decision the agent did not make (a {"skipped":true} would skip
		// strict mode and the constraints): strict refuses the container;
		// fail-open admits it as if the annotation were not there.
		log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "annotation": AnnotationDecision})
		if failmode.Decide(c.cfg.FailMode, KindOf(err)) == failmode.Refused {
			fd, ferr := c.failed(info, log, "register", err)
			return fd, cgroup.Cgroup{}, ferr
		}
		log.WithError(err).WithField("failMode", c.cfg.FailMode).
			Error("forged decision annotation ignored: the container is admitted as if it had none")
		ok = false
		info.Annotations = maps.Clone(info.Annotations)
		delete(info.Annotations, AnnotationDecision) // not a selection key
	}
	if !ok {
		if d, err = c.Admit(info); err != nil {
			return d, cgroup.Cgroup{}, err
		}
	}
	return c.Register(info, d)
}

func (c *Core) attach(info ContainerInfo, d Decision) (Decision, cgroup.Cgroup, error) {
	cg, err := c.resolve(info)
	if err != nil {
		return d, cg, err
	}
	entry := bpf.CgroupEntry{
		CgroupID:      cg.ID,
		CgroupPath:    cg.Path,
		ContainerID:   info.ID,
		ContainerName: info.Name,
		PodName:       info.PodName,
		PodNamespace:  info.PodNamespace,
		Runtime:       info.Runtime,
	}
	if err := c.reg.Attach(d.Tenant, entry); err != nil {
		return d, cg, fmt.Errorf("attach cgroup %s (id %d) to tenant %d: %w", cg.Path, cg.ID, d.Tenant, err)
	}
	log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "tenant": d.Tenant,
		"cgroup": cg.Path, "cgroupID": cg.ID, "policy": d.Policy.Name})
	log.Info("registered tenant cgroup")
	c.applyDmem(d.Tenant, cg.Path, log)
	return d, cg, nil
}

func (c *Core) resolve(info ContainerInfo) (cgroup.Cgroup, error) {
	var errs []error
	if info.Pid > 0 {
		cg, err := c.resolver.FromPid(info.Pid)
		if err == nil && cg.ID != 0 {
			return cg, nil
		}
		errs = append(errs, fmt.Errorf("pid %d: %w", info.Pid, err))
	}
	if info.CgroupsPath != "" {
		cg, err := c.resolver.FromCgroupsPath(info.CgroupsPath)
		if err == nil && cg.ID != 0 {
			return cg, nil
		}
		errs = append(errs, fmt.Errorf("cgroupsPath %q: %w", info.CgroupsPath, err))
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("neither a pid nor a cgroupsPath is known"))
	}
	return cgroup.Cgroup{}, fmt.Errorf("%w: container %q: %w", ErrNoCgroup, info.ID, errors.Join(errs...))
}

// Remove detaches every cgroup registered for the container and releases
// tenants that are left without cgroups. Removing an unknown container is
// not an error.
func (c *Core) Remove(info ContainerInfo) error {
	tenants, err := c.reg.List()
	if err != nil {
		return fmt.Errorf("remove container %q: %w", info.ID, err)
	}
	var errs []error
	for _, t := range tenants {
		for _, cg := range t.Cgroups {
			if cg.ContainerID != info.ID {
				continue
			}
			if _, err := c.reg.Detach(cg.CgroupID); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				errs = append(errs, err)
			}
			c.log.WithFields(logrus.Fields{"container": info.ID, "tenant": t.ID, "cgroupID": cg.CgroupID}).
				Info("removed tenant cgroup")
		}
	}
	// A container that was admitted but never registered (creation failed)
	// still holds a reserved tenant under its own key.
	if err := c.releaseIfEmpty(containerTenantKey(info)); err != nil {
		errs = append(errs, err)
	}
	c.gcTenantDirs()
	return errors.Join(errs...)
}

func (c *Core) releaseIfEmpty(key string) error {
	id, ok, err := c.reg.LookupKey(key)
	if err != nil || !ok {
		return err
	}
	t, err := c.reg.Tenant(id) // its own cgroups only, not the whole registry
	if errors.Is(err, bpf.ErrNoTenant) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(t.Cgroups) == 0 {
		if err := c.reg.ReleaseTenant(id); err != nil && !errors.Is(err, bpf.ErrNotFound) {
			return fmt.Errorf("release tenant %d: %w", id, err)
		}
	}
	return nil
}
