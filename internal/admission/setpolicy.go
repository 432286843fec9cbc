package admission

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/policies"
)

// PolicyChange asks to change a running tenant's policy (gpuextctl tenants
// set-policy; the agent API's type): it is treated as the annotations
// policy.gpuext.io=Policy and KEY.gpuext.io=VALUE for each of Params, on the
// tenant's container.
type PolicyChange = agentapi.PolicyChange

// maxParams bounds a change's params (the keys of policies.Select).
const maxParams = 32

// changeAnnotations is the change as the annotations admission reads; the
// error names the bad param.
func changeAnnotations(pc PolicyChange) (map[string]string, error) {
	if pc.Policy == "" {
		return nil, fmt.Errorf("%w: %s: empty policy name", errRequest, policies.KeyPolicy)
	}
	if len(pc.Params) > maxParams {
		return nil, fmt.Errorf("%w: %d params, at most %d", errRequest, len(pc.Params), maxParams)
	}
	ann := map[string]string{policies.KeyPolicy: pc.Policy}
	for k, v := range pc.Params {
		key := k
		if !strings.Contains(k, ".") {
			key = k + "." + policies.Domain
		}
		switch {
		case !strings.HasSuffix(key, "."+policies.Domain):
			return nil, fmt.Errorf("%w: param %q: not a key of %s", errRequest, k, policies.Domain)
		case key == policies.KeyPolicy:
			return nil, fmt.Errorf("%w: param %q: the policy is the command's POLICY argument", errRequest, k)
		case key == policies.KeyTenant:
			return nil, fmt.Errorf("%w: param %q: a running tenant's mode (container or pod) cannot change", errRequest, k)
		}
		ann[key] = v
	}
	return ann, nil
}

// SetPolicy changes a running tenant's policy without restarting its
// containers, through the selection and admin constraints admission uses:
// what admission would refuse (an unknown policy, a bad value, a policy the
// constraints forbid the tenant's namespace) is refused with the same keyed
// error, whatever the fail mode, and nothing changes. Otherwise the tenant's
// registry record and every attached cgroup get the new config (the kernel
// side reads it per call: effect at once) and the tenant dir is rewritten
// (settings.bin, which the device runtime re-reads within a second, and
// config.json). The registry record is the decision a restarted agent
// recovers (StoredDecision), so reconciliation keeps the new policy.
func (c *Core) SetPolicy(pc PolicyChange) (Decision, error) {
	log := c.log.WithFields(logrus.Fields{"tenant": pc.Tenant, "policy": pc.Policy})
	d, err := c.setPolicy(pc, log)
	if err != nil {
		log.WithError(err).WithField("errorKind", KindOf(err)).Warn("refused a policy change")
		return Decision{}, err
	}
	return d, nil
}

func (c *Core) setPolicy(pc PolicyChange, log *logrus.Entry) (Decision, error) {
	ann, err := changeAnnotations(pc)
	if err != nil {
		return Decision{}, err
	}
	t, err := c.findTenant(pc.Tenant)
	if err != nil {
		return Decision{}, err
	}
	if len(t.Cgroups) == 0 {
		return Decision{}, fmt.Errorf("tenant %d (%s) has no running container: change the policy of a running one", t.ID, t.Key)
	}
	// The tenant's container as the registry knows it: the constraints see
	// its name and namespace as they did at admission.
	cgs := append([]bpf.CgroupEntry(nil), t.Cgroups...)
	sort.Slice(cgs, func(i, j int) bool { return cgs[i].ContainerID < cgs[j].ContainerID })
	cg := cgs[0]
	info := ContainerInfo{ID: cg.ContainerID, Name: cg.ContainerName, PodName: cg.PodName, PodNamespace: cg.PodNamespace,
		Runtime: cg.Runtime, Annotations: ann}
	sel, err := c.selectPolicy(info)
	if err != nil {
		return Decision{}, err
	}
	if isPodKey(t.Key, 0) {
		sel.Tenant = policies.TenantPod
	} else {
		sel.Tenant = policies.TenantContainer
	}
	// The GPU memory the scheduler gave the running tenant, as admission
	// recorded it: not asked again by the registry's names, which are cut
	// to 63 bytes (a longer pod name found nothing, and the quota went).
	gm, err := c.grantedGPUMemory(t.ID)
	if err != nil {
		return Decision{}, err
	}
	gpus, err := applyGPUMemory(&sel, gm)
	if err != nil {
		return Decision{}, err
	}
	bundle, _, err := c.probeBundle(info, &sel, log)
	if err != nil {
		return Decision{}, err
	}
	cfg := tenantConfig(sel.Policy, false)
	digest := configDigest(sel.Policy.Name, cfg)
	unlock, err := c.lockState(false)
	if err != nil {
		return Decision{}, err
	}
	defer unlock()
	id, err := c.reg.Reserve(t.Key, sel.Policy.Name, cfg)
	if err != nil {
		return Decision{}, fmt.Errorf("update tenant %d (%s): %w", t.ID, t.Key, err)
	}
	if id != t.ID {
		// the tenant was released meanwhile and the key got a new one
		return Decision{}, errors.Join(fmt.Errorf("tenant %d (%s) is gone", t.ID, t.Key), c.releaseIfEmpty(t.Key))
	}
	if _, err := c.writeTenantDir(id, tenantFile(t.Key, sel.Policy, bundle, gpus), bundle); err != nil {
		return Decision{}, fmt.Errorf("tenant %d: registry updated, tenant dir not: %w", id, err)
	}
	log.WithFields(logrus.Fields{"tenant": id, "tenantKey": t.Key, "oldPolicy": t.Policy, "configDigest": digest}).
		Info("changed a running tenant's policy")
	for _, cg := range t.Cgroups {
		c.applyDmemEntry(id, cg, log)
	}
	return Decision{Tenant: id, TenantKey: t.Key, Policy: sel.Policy, ConfigDigest: digest}, nil
}

// ErrUnknownTenant: a policy change names no tenant of the registry.
var ErrUnknownTenant = agentapi.ErrUnknownTenant

// findTenant is the tenant named by id or key.
func (c *Core) findTenant(name string) (bpf.Tenant, error) {
	if name == "" {
		return bpf.Tenant{}, fmt.Errorf("%w: empty tenant", ErrUnknownTenant)
	}
	id, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		kid, ok, lerr := c.reg.LookupKey(name)
		if lerr != nil {
			return bpf.Tenant{}, fmt.Errorf("tenant %q: %w", name, lerr)
		}
		if !ok {
			return bpf.Tenant{}, fmt.Errorf("%w: tenant key %q", ErrUnknownTenant, name)
		}
		id = uint64(kid)
	}
	t, err := c.reg.Tenant(bpf.TenantID(id))
	if errors.Is(err, bpf.ErrNoTenant) || errors.Is(err, bpf.ErrNotFound) {
		return bpf.Tenant{}, fmt.Errorf("%w: tenant %q", ErrUnknownTenant, name)
	}
	if err != nil {
		return bpf.Tenant{}, fmt.Errorf("tenant %q: %w", name, err)
	}
	return t, nil
}
