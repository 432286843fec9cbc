package admission

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/probe/compile"
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
	// MPSShmDir, when set, is mounted at /dev/shm in every tenant container:
	// the shared memory the MPS server and its clients exchange through,
	// for containers that have their own IPC namespace.
	MPSShmDir string
}

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
	c.reg, c.catalog, c.constraints, c.resolver, c.log = reg, catalog, constraints, resolver, log
	c.compileProbes = compile.CompileKernels
	return c, nil
}

// Registry returns the tenant registry the core writes.
func (c *Core) Registry() *bpf.Registry { return c.reg }

// Admit selects the container's policy, reserves its tenant, writes the
// tenant directory and returns the injection. It is idempotent: admitting the
// same container twice returns the same tenant.
func (c *Core) Admit(info ContainerInfo) (Decision, error) {
	return c.admit(info, true)
}

// admit is Admit; full=false (the register path) skips rewriting the tenant
// directory and the admission log line, which Admit already did.
func (c *Core) admit(info ContainerInfo, full bool) (Decision, error) {
	if info.ID == "" {
		return Decision{}, errors.New("admit: container id is empty")
	}
	sel, reqErr, err := c.Select(info)
	if err != nil {
		c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "pod": info.PodName,
			"namespace": info.PodNamespace}).WithError(err).Error("refused container: bad gpu policy request")
		return Decision{}, err
	}
	log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "pod": info.PodName,
		"namespace": info.PodNamespace, "policy": sel.Policy.Name})
	if reqErr != nil && full {
		log.WithError(reqErr).WithField("failMode", c.cfg.FailMode).
			Warn("bad gpu policy request: container starts with the default policy")
	}
	key := tenantKey(info, sel)
	cfg := tenantConfig(sel.Policy, reqErr != nil)
	id, err := c.reg.Reserve(key, sel.Policy.Name, cfg)
	if err != nil {
		return Decision{}, fmt.Errorf("reserve tenant %q: %w", key, err)
	}
	d := Decision{Tenant: id, TenantKey: key, Policy: sel.Policy, RequestErr: reqErr}
	if !full {
		return d, nil
	}
	// probes dropped in fail-open mode (they did not compile) are logged
	// there, and sel.Policy.Probes is then empty
	bundle, _, err := c.probeBundle(info, &sel, log)
	if err != nil {
		return Decision{}, err
	}
	d.Policy = sel.Policy
	dir, err := c.writeTenantDir(id, key, sel.Policy, bundle)
	if err != nil {
		return Decision{}, err
	}
	acct, err := c.makeAcctDir(id)
	if err != nil {
		return Decision{}, err
	}
	d.Injection = c.injection(info, id, dir, acct, sel.Policy)
	fields := logrus.Fields{"tenant": id, "tenantKey": key}
	if len(sel.Policy.Probes) > 0 {
		fields["probes"] = strings.Join(sel.Policy.Probes, ",")
	}
	if bundle != nil && len(bundle.Manifest.Kernels) > 0 {
		fields["probeKernels"] = strings.Join(bundle.Manifest.Kernels, ",")
	}
	log.WithFields(fields).Info("admitted container")
	return d, nil
}

// Register resolves the container's cgroup and attaches it to its tenant.
// The cgroup must exist (NRI StartContainer, OCI createRuntime/prestart).
func (c *Core) Register(info ContainerInfo) (Decision, cgroup.Cgroup, error) {
	d, err := c.admit(info, false)
	if err != nil {
		return Decision{}, cgroup.Cgroup{}, err
	}
	return c.attach(info, d)
}

// RegisterAdmitted is Register for a container whose Admit decision the
// caller kept (the NRI plugin between CreateContainer and StartContainer): it
// skips selection and reservation. If that tenant was released meanwhile, it
// falls back to Register.
func (c *Core) RegisterAdmitted(info ContainerInfo, d Decision) (Decision, cgroup.Cgroup, error) {
	d2, cg, err := c.attach(info, d)
	if errors.Is(err, bpf.ErrNoTenant) {
		return c.Register(info)
	}
	return d2, cg, err
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
	c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "tenant": d.Tenant,
		"cgroup": cg.Path, "cgroupID": cg.ID, "policy": d.Policy.Name}).Info("registered tenant cgroup")
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
	key := runtimePrefix(info.Runtime) + "/ctr/" + info.ID
	if err := c.releaseIfEmpty(key); err != nil {
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
	tenants, err := c.reg.List()
	if err != nil {
		return err
	}
	for _, t := range tenants {
		if t.ID == id && len(t.Cgroups) == 0 {
			if err := c.reg.ReleaseTenant(id); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				return fmt.Errorf("release tenant %d: %w", id, err)
			}
		}
	}
	return nil
}
