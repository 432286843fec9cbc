package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ProbeReport is what the tenant probe saw for one process
// (struct gpuext_probe_report of tenantprobe.bpf.c).
type ProbeReport = tenantprobeGpuextProbeReport

// TenantProbe is tenantprobe.bpf.c loaded against a registry's maps: a
// cgroup/sock_create program that, for each process creating a socket,
// records the tenant the kernel finds for the process's cgroup and bumps
// that tenant's launches counter. It proves end to end that what the
// registry wrote is what bpf_get_current_cgroup_id() lookups see.
type TenantProbe struct {
	objs tenantprobeObjects
}

// LoadTenantProbe loads the probe sharing r's pinned maps. It is not
// attached yet: see Attach.
func LoadTenantProbe(r *Registry) (*TenantProbe, error) {
	p := &TenantProbe{}
	opts := &ebpf.CollectionOptions{MapReplacements: r.Maps().Replacements()}
	if err := loadTenantprobeObjects(&p.objs, opts); err != nil {
		return nil, fmt.Errorf("load tenant probe: %w", err)
	}
	return p, nil
}

// Attach attaches the probe to the cgroup v2 directory cgroupDir (it then
// runs for every process in that cgroup and below).
func (p *TenantProbe) Attach(cgroupDir string) (link.Link, error) {
	l, err := link.AttachCgroup(link.CgroupOptions{
		Path:    cgroupDir,
		Attach:  ebpf.AttachCGroupInetSockCreate,
		Program: p.objs.GpuextTenantProbe,
	})
	if err != nil {
		return nil, fmt.Errorf("attach tenant probe to %s: %w", cgroupDir, err)
	}
	return l, nil
}

// Report returns what the probe saw for process pid, and false if it saw
// no socket created by it.
func (p *TenantProbe) Report(pid int) (ProbeReport, bool, error) {
	var rep ProbeReport
	key := uint32(pid)
	err := p.objs.GpuextProbeSeen.Lookup(&key, &rep)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return rep, false, nil
	}
	if err != nil {
		return rep, false, fmt.Errorf("probe report of pid %d: %w", pid, err)
	}
	return rep, true, nil
}

// Close unloads the probe; the registry's maps are not affected.
func (p *TenantProbe) Close() error { return p.objs.Close() }
