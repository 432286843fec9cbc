package admission

import (
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/policies"
)

// WarmProbes compiles the probe sets of the catalog's policies ahead of the
// first container that selects one, so that admission finds them cached.
// For a long-running caller (the NRI plugin); a hook process that admits
// one container and exits would only pay for sets it never uses.
func (pl *Planner) WarmProbes() {
	for _, p := range pl.catalog.List() {
		if len(p.Probes) == 0 {
			continue
		}
		if _, err := pl.compileProbes(p.Probes, nil); err != nil {
			pl.log.WithFields(logrus.Fields{"policy": p.Name, "probes": strings.Join(p.Probes, ",")}).WithError(err).
				Warn("device probes of a catalog policy do not compile: its containers will run without them (fail-open) or be refused (strict)")
		}
	}
}

// probeBundle compiles the selected policy's probes, limited to the
// container's kernels (sel.ProbeKernels). In fail-open mode a failure
// drops the probes (the container runs without them) and is returned as
// dropped; in strict mode it refuses the container.
func (pl *Planner) probeBundle(info ContainerInfo, sel *policies.Selection, log *logrus.Entry) (b *compile.Bundle, dropped, err error) {
	set := sel.Policy.Probes
	if len(set) == 0 {
		return nil, nil, nil
	}
	source := sel.Sources[policies.KeyProbes]
	if source == "" {
		source = "policy " + sel.Policy.Name
	}
	b, cerr := pl.compileProbes(set, sel.ProbeKernels)
	if cerr == nil {
		return b, nil, nil
	}
	fields := logrus.Fields{"probes": strings.Join(set, ","), "probesFrom": source, "failMode": pl.failMode}
	if len(sel.ProbeKernels) > 0 {
		ks := sel.Sources[policies.KeyProbeKernels]
		source += ", kernels " + strings.Join(sel.ProbeKernels, ",") + " from " + ks
		fields["probeKernels"], fields["probeKernelsFrom"] = strings.Join(sel.ProbeKernels, ","), ks
	}
	cerr = fmt.Errorf("device probes %s (from %s): %w", strings.Join(set, ","), source, cerr)
	if pl.failMode == FailClosed {
		log.WithFields(fields).WithError(cerr).Error("refused container: its device probes do not compile")
		return nil, nil, fmt.Errorf("%w: container %q: %w", ErrRefused, info.Name, cerr)
	}
	log.WithFields(fields).WithError(cerr).Warn("device probes do not compile: container starts without them")
	sel.Policy.Probes, sel.ProbeKernels = nil, nil
	return nil, cerr, nil
}
