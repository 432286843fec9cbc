package admission

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/policies"
)

// The wiring of a core from the config file (internal/config, which the
// hooks read too without linking any of this).

// KernelPolicies loads the config's kernelPolicyDir; nil when none is configured.
func KernelPolicies(c config.Config) (*kernelpolicy.Dir, error) {
	if c.KernelPolicyDir == "" {
		return nil, nil
	}
	return kernelpolicy.LoadDir(c.KernelPolicyDir)
}

// ProbeCatalog is the built-in probe catalog with the config's probeDir
// (programs.LoadDir: every entry verified; a bad one is an error naming it).
func ProbeCatalog(c config.Config) (*programs.Catalog, error) {
	if c.ProbeDir == "" {
		return programs.Builtin(), nil
	}
	cat, err := programs.BuiltinWithDir(c.ProbeDir)
	if err != nil {
		return nil, fmt.Errorf("probeDir: %w", err)
	}
	return cat, nil
}

// Catalog returns the built-in catalog merged with CatalogDir, whose
// policies (and a request's overrides) may name KernelPolicyDir's memory
// policies as eviction and prefetch algorithms and ProbeDir's probes.
func Catalog(c config.Config) (*policies.Catalog, error) {
	cat := policies.BuiltinCatalog()
	algs := policies.BuiltinAlgorithms()
	dir, err := KernelPolicies(c)
	if err != nil {
		return nil, err
	}
	if dir != nil {
		if algs, err = algs.With(dir.Algorithms()); err != nil {
			return nil, fmt.Errorf("kernelPolicyDir: %w", err)
		}
		cat = cat.WithAlgorithms(algs)
	}
	if c.ProbeDir != "" {
		if algs.Probes, err = ProbeCatalog(c); err != nil {
			return nil, err
		}
		cat = cat.WithAlgorithms(algs)
	}
	if c.CatalogDir == "" {
		return cat, nil
	}
	user, err := policies.LoadCatalogDirWith(c.CatalogDir, algs)
	if err != nil {
		return nil, err
	}
	return cat.Merge(user)
}

// Constraints loads the config's constraintsFile; nil when none is configured.
func Constraints(c config.Config) (*policies.Constraints, error) {
	if c.ConstraintsFile == "" {
		return nil, nil
	}
	return policies.LoadConstraints(c.ConstraintsFile)
}

// Open opens the registry and builds the admission core. The caller
// closes the returned registry. Both paths (the NRI plugin at Configure, the
// OCI hook and runc wrapper at every container) come through here, so both
// hand the registry to the gpuext core module: the kernel resolves tenants
// from its cgroup map (the core keeps its own reference; handing the same
// map again replaces it with itself).
func Open(c config.Config, log *logrus.Entry) (*Core, *bpf.Registry, error) {
	cat, err := Catalog(c)
	if err != nil {
		return nil, nil, err
	}
	cons, err := Constraints(c)
	if err != nil {
		return nil, nil, err
	}
	res, err := cgroup.NewResolver(c.HostRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("cgroup resolver: %w", err)
	}
	reg, err := bpf.OpenRegistry(c.PinDir)
	if err != nil {
		return nil, nil, err
	}
	if m := reg.MountedBPFFS(); m != "" {
		log.WithFields(logrus.Fields{"mountpoint": m, "pinDir": c.PinDir}).Info("no bpf filesystem was mounted: mounted one")
	}
	core, err := New(Config{FailMode: c.FailMode, StateDir: c.StateDir, DevrtDir: c.DevrtDir,
		HostRoot: c.HostRoot, MPSPipeDir: c.MPSPipeDirectory, MPSShmDir: c.MPSShmDirectory, MPSRootTenants: c.MPSRootTenants},
		reg, cat, cons, res, log)
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	if err := kernelpolicy.HandRegistryToCore(reg); errors.Is(err, kernelpolicy.ErrNoCore) {
		log.WithError(err).Debug("no gpuext core module: registry not handed to the kernel")
	} else if err != nil {
		log.WithError(err).Warn("registry not handed to the gpuext core")
	} else {
		log.Debug("registry handed to the gpuext core")
	}
	return core, reg, nil
}
