// Package gpuview maps the processes a GPU driver reports (pid, device
// memory) to gpuext tenants through their cgroups: pid -> cgroup v2 id ->
// registry entry. It is pure Go; the NVML side lives in cmd/gpuext-gpuview,
// the one binary that needs cgo.
package gpuview

import (
	"errors"
	"sort"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
)

// Process is one process using a GPU, as the driver reports it.
type Process struct {
	GPU       int    `json:"gpu"`
	UUID      string `json:"uuid"`
	PID       uint32 `json:"pid"`
	UsedBytes uint64 `json:"usedBytes"`
}

// Sample is one line of gpuext-gpuview --watch: every GPU process at one
// time, as NVML reports it. Err says why a listing failed (Procs then holds
// what was read before the failure).
type Sample struct {
	Time  int64        `json:"t"` // unix nanoseconds
	Procs []SampleProc `json:"procs"`
	Err   string       `json:"error,omitempty"`
}

// SampleProc is one process of a Sample (the memory guard maps its pid to a
// tenant itself).
type SampleProc struct {
	GPU       int    `json:"gpu"`
	PID       uint32 `json:"pid"`
	UsedBytes uint64 `json:"usedBytes"`
}

// MinWatchInterval is the shortest --watch interval gpuext-gpuview takes.
const MinWatchInterval = 50 * time.Millisecond

// Row is a GPU process with the tenant its cgroup belongs to (Tenant 0:
// not a gpuext tenant).
type Row struct {
	Process
	CgroupPath    string       `json:"cgroup,omitempty"`
	CgroupID      cgroup.ID    `json:"cgroupId,omitempty"`
	Tenant        bpf.TenantID `json:"tenant"`
	Container     string       `json:"container,omitempty"`
	ContainerName string       `json:"containerName,omitempty"`
	Policy        string       `json:"policy,omitempty"`
	Err           string       `json:"error,omitempty"`
}

// Map resolves each process's cgroup and looks it up in the registry.
func Map(procs []Process, res *cgroup.Resolver, reg *bpf.Registry) []Row {
	rows := make([]Row, 0, len(procs))
	for _, p := range procs {
		r := Row{Process: p}
		cg, err := res.FromPid(int(p.PID))
		r.CgroupPath = cg.Path
		switch {
		case errors.Is(err, cgroup.ErrRootCgroup):
			// a host process outside any container: no tenant
		case err != nil:
			r.Err = err.Error()
		case cg.ID != 0:
			r.CgroupID = cg.ID
			t, err := reg.Lookup(cg.ID)
			if err == nil {
				r.Tenant, r.Policy = t.ID, t.Policy
				for _, e := range t.Cgroups {
					if e.CgroupID == cg.ID {
						r.Container, r.ContainerName = e.ContainerID, e.ContainerName
					}
				}
			} else if !errors.Is(err, bpf.ErrNotFound) {
				r.Err = err.Error()
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].GPU != rows[j].GPU {
			return rows[i].GPU < rows[j].GPU
		}
		return rows[i].PID < rows[j].PID
	})
	return rows
}

// TenantTotals sums device memory per tenant (0: processes of no tenant).
func TenantTotals(rows []Row) map[bpf.TenantID]uint64 {
	m := map[bpf.TenantID]uint64{}
	for _, r := range rows {
		m[r.Tenant] += r.UsedBytes
	}
	return m
}
