// Package admission is the one admission path of gpuext. The host agent
// (the NRI plugin, which also serves the runc wrapper and the OCI hooks
// through internal/agent) turns what a runtime knows of a container into a
// ContainerInfo and calls one Core:
//
//   - Admit: labels/annotations -> validated policy (policies), a reserved
//     tenant (bpf registry), the tenant and accounting directories, and the
//     injection (mounts and env) for the device runtime: one Decision per
//     container (decision.go). Called when the container is created, before
//     its process runs. It is two steps: Planner.Plan decides everything
//     (policy, tenant key, kernel-facing config, per-GPU quotas, probes,
//     the tenant file) from the request, the catalog, the constraints and
//     a snapshot of the registry (State), writing nothing and needing no
//     root; Core.apply then reserves the tenant and writes its files
//     (plan.go). Admit is the only caller of apply.
//   - Register: applies a stored Decision (never selects again): container
//     -> cgroup -> cgroup id (cgroup), attached to the decision's tenant
//     after checking the decision against the registry. RegisterOCI reads
//     the decision the runc wrapper wrote into config.json, or admits first
//     when there is none (a hook without the wrapper).
//   - Remove: detach the cgroup and release the tenant when it has no cgroup left.
//   - Synchronize: rebuild the registry from the live containers of one
//     runtime and drop stale entries of that runtime; Reconcile: collect what
//     killed hooks and runtimes left.
//
// The fail mode is decided by one rule, failmode.Decide, for every runtime
// path and every kind of error (KindOf): the core applies it to its own
// errors (ApplyFailMode, and Admit's default policy for a bad request); the
// hooks, which do not link the core, apply the same rule to theirs.
// ContainerInfo, the injection and the decision's record are the agent
// API's types (internal/agentapi). The files follow the jobs: core.go
// (lifecycle), plan.go (the planning step), open.go (a core from the config file), decision.go (the
// Decision, its record, the decision stored in the registry),
// decisionkey.go (its MAC),
// select.go (selection, the tenant key), probes.go, injection.go,
// tenantfile.go (what the device runtime reads), statedir.go (the state
// directory's layout, lock and collection), sync.go.
package admission
