package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/internal/atomicfile"
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

// WarmProbes compiles the probe sets of the catalog's policies ahead of the
// first container that selects one, so that admission finds them cached.
// For a long-running caller (the NRI plugin); a hook process that admits
// one container and exits would only pay for sets it never uses.
func (c *Core) WarmProbes() {
	for _, p := range c.catalog.List() {
		if len(p.Probes) == 0 {
			continue
		}
		if _, err := c.compileProbes(p.Probes, nil); err != nil {
			c.log.WithFields(logrus.Fields{"policy": p.Name, "probes": strings.Join(p.Probes, ",")}).WithError(err).
				Warn("device probes of a catalog policy do not compile: its containers will run without them (fail-open) or be refused (strict)")
		}
	}
}

// probeBundle compiles the selected policy's probes, limited to the
// container's kernels (sel.ProbeKernels). In fail-open mode a failure
// drops the probes (the container runs without them) and is returned as
// dropped; in strict mode it refuses the container.
func (c *Core) probeBundle(info ContainerInfo, sel *policies.Selection, log *logrus.Entry) (b *compile.Bundle, dropped, err error) {
	set := sel.Policy.Probes
	if len(set) == 0 {
		return nil, nil, nil
	}
	source := sel.Sources[policies.KeyProbes]
	if source == "" {
		source = "policy " + sel.Policy.Name
	}
	b, cerr := c.compileProbes(set, sel.ProbeKernels)
	if cerr == nil {
		return b, nil, nil
	}
	fields := logrus.Fields{"probes": strings.Join(set, ","), "probesFrom": source, "failMode": c.cfg.FailMode}
	if len(sel.ProbeKernels) > 0 {
		ks := sel.Sources[policies.KeyProbeKernels]
		source += ", kernels " + strings.Join(sel.ProbeKernels, ",") + " from " + ks
		fields["probeKernels"], fields["probeKernelsFrom"] = strings.Join(sel.ProbeKernels, ","), ks
	}
	cerr = fmt.Errorf("device probes %s (from %s): %w", strings.Join(set, ","), source, cerr)
	if c.cfg.FailMode == FailClosed {
		log.WithFields(fields).WithError(cerr).Error("refused container: its device probes do not compile")
		return nil, nil, fmt.Errorf("%w: container %q: %w", ErrRefused, info.Name, cerr)
	}
	log.WithFields(fields).WithError(cerr).Warn("device probes do not compile: container starts without them")
	sel.Policy.Probes, sel.ProbeKernels = nil, nil
	return nil, cerr, nil
}

// Registry returns the tenant registry the core writes.
func (c *Core) Registry() *bpf.Registry { return c.reg }

// Select validates the container's request against the catalog and the admin
// constraints. In fail-open mode a bad request yields the default policy and
// the keyed error in Decision.RequestErr; in strict mode it is an error that
// wraps ErrRefused.
func (c *Core) Select(info ContainerInfo) (policies.Selection, error, error) {
	req := info.request()
	sel, err := c.catalog.Select(req)
	if err == nil && c.constraints != nil {
		err = c.constraints.Check(req, sel)
	}
	if err == nil {
		return sel, nil, nil
	}
	if c.cfg.FailMode == FailClosed {
		return policies.Selection{}, nil, fmt.Errorf("%w: container %q: %w", ErrRefused, info.Name, err)
	}
	def := policies.Selection{Policy: c.catalog.Default(), Tenant: "container"}
	return def, err, nil
}

func tenantKey(info ContainerInfo, sel policies.Selection) string {
	prefix := runtimePrefix(info.Runtime)
	if sel.Tenant == "pod" && (info.PodUID != "" || info.PodName != "") {
		id := info.PodUID
		if id == "" {
			id = info.PodNamespace + "/" + info.PodName
		}
		return prefix + "/pod/" + id
	}
	return prefix + "/ctr/" + info.ID
}

func runtimePrefix(r bpf.Runtime) string {
	switch r {
	case bpf.RuntimeNRI:
		return "nri"
	case bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper:
		return "oci"
	}
	return "rt" + strconv.Itoa(int(r))
}

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

// injection builds the mounts and env of the device-runtime contract
// (docs/injection.md).
func (c *Core) injection(info ContainerInfo, id bpf.TenantID, tenantDir, acctDir string, p policies.Policy) Injection {
	lib := ContainerDevrtDir + "/" + DevrtLibrary
	inj := Injection{
		Mounts: []Mount{
			{Source: c.cfg.DevrtDir, Destination: ContainerDevrtDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			{Source: tenantDir, Destination: ContainerTenantDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			{Source: acctDir, Destination: ContainerAcctDir, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
			{Source: c.boardDir(), Destination: ContainerBoardDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
		},
		Env: []EnvVar{
			{Key: EnvLDPreload, Value: AppendPreload(lookupEnv(info.Env, EnvLDPreload), lib)},
			{Key: EnvTenantID, Value: strconv.FormatUint(uint64(id), 10)},
			{Key: EnvTenantDir, Value: ContainerTenantDir},
			{Key: EnvTenantConfig, Value: ContainerTenantDir + "/" + TenantConfigFile},
			{Key: EnvDevrtDir, Value: ContainerDevrtDir},
			{Key: EnvPolicy, Value: p.Name},
			{Key: EnvTenantAcct, Value: ContainerAcctDir},
			{Key: EnvBoard, Value: ContainerBoardDir + "/" + BoardFile},
		},
	}
	if d := c.cfg.MPSPipeDir; d != "" {
		inj.Mounts = append(inj.Mounts, Mount{Source: d, Destination: d, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
		inj.Env = append(inj.Env, EnvVar{Key: EnvMPSPipeDir, Value: d})
	}
	if d := c.cfg.MPSShmDir; d != "" {
		inj.Mounts = append(inj.Mounts, Mount{Source: d, Destination: "/dev/shm", Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
	}
	return inj
}

// EnvMPSPipeDir is where CUDA looks for the MPS control daemon.
const EnvMPSPipeDir = "CUDA_MPS_PIPE_DIRECTORY"

// AppendPreload appends lib to an LD_PRELOAD value unless it is already there.
// ld.so accepts both ':' and ' ' as separators; ':' is used.
func AppendPreload(existing, lib string) string {
	for _, f := range strings.FieldsFunc(existing, func(r rune) bool { return r == ':' || r == ' ' }) {
		if f == lib {
			return existing
		}
	}
	if strings.TrimSpace(existing) == "" {
		return lib
	}
	return existing + ":" + lib
}

func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val // the last one wins, as execve users see it
		}
	}
	return v
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

// acctDir is the tenant's writable accounting directory (the device
// runtime's shared usage file). It is separate from the read-only tenant
// directory, so a tenant can write its usage but not its limits.
func (c *Core) acctDir(id bpf.TenantID) string { return AcctDir(c.cfg.StateDir, uint64(id)) }

// The state directory's layout: tenants/<id> (TenantDir: config.json and
// the compiled probes), acct/<id> (AcctDir: usage and probe output), board.
const (
	stateTenants = "tenants"
	stateAcct    = "acct"
)

// TenantDir is tenant id's directory under stateDir.
func TenantDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateTenants, strconv.FormatUint(id, 10))
}

// AcctDir is tenant id's accounting directory under stateDir.
func AcctDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateAcct, strconv.FormatUint(id, 10))
}

// TenantsRoot is the directory of all tenant directories under stateDir.
func TenantsRoot(stateDir string) string { return filepath.Join(stateDir, stateTenants) }

// boardDir holds the host-published, read-only priority board.
func (c *Core) boardDir() string { return filepath.Join(c.cfg.StateDir, "board") }

func (c *Core) makeAcctDir(id bpf.TenantID) (string, error) {
	dir := c.acctDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant accounting dir: %w", err)
		}
	} else if err != nil {
		return dir, nil // exists: mode already set
	}
	// Any user of the container may run CUDA processes: world-writable,
	// sticky, and private to the tenant because only its containers mount it.
	if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	return dir, nil
}

func (c *Core) tenantDir(id bpf.TenantID) string { return TenantDir(c.cfg.StateDir, uint64(id)) }

// TenantFile is the config.json the device runtime reads (docs/injection.md).
type TenantFile struct {
	ABIVersion  uint32 `json:"abiVersion"`
	TenantID    uint32 `json:"tenantId"`
	TenantKey   string `json:"tenantKey"`
	Policy      string `json:"policy"`
	Class       string `json:"priorityClass"`
	QuotaBytes  uint64 `json:"quotaBytes"`
	TimesliceUS uint32 `json:"timesliceUs"`
	Interleave  uint32 `json:"interleave"`
	// ActiveWindowUS: how long a latency-critical tenant counts as active
	// after its last launch (the device runtime's priority gate).
	ActiveWindowUS uint32 `json:"activeWindowUs"`
	// SMPercent: a best-effort tenant's share of the SMs under MPS.
	SMPercent uint32   `json:"smPercent"`
	Eviction  string   `json:"eviction"`
	Prefetch  string   `json:"prefetch"`
	Probes    []string `json:"probes"`
	// ProbeKernels: the kernels (.entry names) the probes are limited to,
	// as the kernel lines of probes/module.conf: the container's
	// probe-kernels.gpuext.io narrowed by the probes' catalog kernels.
	// Empty: every kernel (or no probes).
	ProbeKernels []string `json:"probeKernels"`
}

// writeTenantDir writes the tenant's config.json and its probes/ directory
// (the compiled probe module, or none when probes is nil).
func (c *Core) writeTenantDir(id bpf.TenantID, key string, p policies.Policy, probes *compile.Bundle) (string, error) {
	dir := c.tenantDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant dir: %w", err)
		}
	}
	probesDir := filepath.Join(dir, TenantProbesDir)
	if probes != nil {
		if err := probes.WriteDir(probesDir); err != nil {
			return "", fmt.Errorf("tenant probes: %w", err)
		}
	} else if err := compile.RemoveDir(probesDir); err != nil {
		return "", fmt.Errorf("tenant probes: %w", err)
	}
	probeNames := p.Probes
	if probeNames == nil {
		probeNames = []string{}
	}
	probeKernels := []string{}
	if probes != nil && len(probes.Manifest.Kernels) > 0 {
		probeKernels = probes.Manifest.Kernels
	}
	tf := TenantFile{
		ABIVersion: abiVersion, TenantID: uint32(id), TenantKey: key, Policy: p.Name,
		Class: string(p.Priority.Class), QuotaBytes: p.Memory.QuotaBytes, TimesliceUS: p.Priority.TimesliceUS,
		Interleave: p.Priority.Interleave, ActiveWindowUS: p.Priority.ActiveWindowUS, SMPercent: p.Priority.EffectiveSMPercent(), Eviction: p.Memory.Eviction.Name, Prefetch: p.Memory.Prefetch.Name,
		Probes: probeNames, ProbeKernels: probeKernels,
	}
	b, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	path := filepath.Join(dir, TenantConfigFile)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return dir, nil // unchanged: a second container of the tenant, or a re-admission
	}
	if err := atomicfile.Write(path, b, 0o644); err != nil {
		return "", fmt.Errorf("tenant config: %w", err)
	}
	return dir, nil
}

// gcTenantDirs removes tenant directories whose tenant is gone.
func (c *Core) gcTenantDirs() {
	tenants, err := c.reg.List()
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, t := range tenants {
		live[strconv.FormatUint(uint64(t.ID), 10)] = true
	}
	for _, sub := range []string{stateTenants, stateAcct} {
		root := filepath.Join(c.cfg.StateDir, sub)
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if !live[e.Name()] {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
}
