package metrics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/lib/strictjson"
)

// The agent is static (CGO_ENABLED=0) and go-nvml needs cgo, so the
// per-process NVML view comes from gpuext-gpuview --json, the one cgo
// binary, run at scrape time (at most once per NVMLCacheFor). The agent
// maps each process's pid to a tenant itself, through the same registry
// listing the other tenant series come from.
const (
	// MaxNVMLOutput bounds what a scrape reads of gpuext-gpuview --json.
	MaxNVMLOutput = 1 << 20
	// MaxNVMLProcesses bounds the processes one scrape maps to tenants.
	MaxNVMLProcesses = 4096
	// MaxNVMLGPUs bounds the GPU index a row may name.
	MaxNVMLGPUs = 64
	// NVMLTimeout is how long gpuext-gpuview may run.
	NVMLTimeout = 3 * time.Second
	// NVMLCacheFor is how long one run's answer serves scrapes.
	NVMLCacheFor = 5 * time.Second
)

// ErrNVML wraps the reasons gpuext_nvml_up is 0.
var ErrNVML = errors.New("nvml (gpuext-gpuview --json)")

var (
	descNVMLUsed = tdesc("gpuext_tenant_nvml_memory_used_bytes",
		"Device memory the tenant's processes hold on a GPU, as the driver reports it (NVML through gpuext-gpuview; includes context overhead).",
		"gpu")
	descNVMLUntracked = prometheus.NewDesc("gpuext_nvml_untracked_memory_used_bytes",
		"Device memory on a GPU of processes in no gpuext tenant (host processes, unmanaged containers), from NVML.",
		[]string{"gpu"}, nil)
	descNVMLUp = prometheus.NewDesc("gpuext_nvml_up",
		"1 when gpuext-gpuview reported the GPU processes (NVML) for this scrape; 0 when it is missing, failed or found no driver.",
		nil, nil)
)

// NVMLOptions says where the NVML view comes from.
type NVMLOptions struct {
	// Gpuview finds the gpuext-gpuview binary (deviceplugin.GpuviewPath);
	// called at each run, so one installed later is found.
	Gpuview func() (string, error)
	// HostRoot prefixes /proc and /sys/fs/cgroup (config hostRoot).
	HostRoot string
	// Log gets the reason a run failed, once per change of reason.
	Log *logrus.Entry
}

// nvmlProc is one GPU process with the cgroup its pid is in (0: none found).
type nvmlProc struct {
	gpu    int
	used   uint64
	cgroup cgroup.ID
}

// nvmlSource runs gpuext-gpuview and caches its answer.
type nvmlSource struct {
	opts     NVMLOptions
	timeout  time.Duration
	cacheFor time.Duration

	mu      sync.Mutex // held for a run: a burst of scrapes runs it once
	at      time.Time
	procs   []nvmlProc
	err     error
	lastErr string
}

// SetNVML makes the collector show NVML's per-process memory read through
// gpuext-gpuview (gpuext_nvml_up and the per-tenant, per-GPU series).
// Call it before the collector is registered.
func (c *TenantCollector) SetNVML(o NVMLOptions) { c.nvml = newNVMLSource(o) }

func newNVMLSource(o NVMLOptions) *nvmlSource {
	return &nvmlSource{opts: o, timeout: NVMLTimeout, cacheFor: NVMLCacheFor}
}

// get is the processes of the last run, running gpuext-gpuview when that
// is older than cacheFor.
func (s *nvmlSource) get() ([]nvmlProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < s.cacheFor {
		return s.procs, s.err
	}
	s.procs, s.err = s.run()
	s.at = time.Now()
	if s.opts.Log != nil {
		msg := ""
		if s.err != nil {
			msg = s.err.Error()
		}
		if msg != s.lastErr {
			if s.err != nil {
				s.opts.Log.WithError(s.err).Info("gpuext_nvml_up 0")
			} else {
				s.opts.Log.Info("gpuext_nvml_up 1")
			}
			s.lastErr = msg
		}
	}
	return s.procs, s.err
}

func (s *nvmlSource) run() ([]nvmlProc, error) {
	if s.opts.Gpuview == nil {
		return nil, fmt.Errorf("%w: no gpuext-gpuview configured", ErrNVML)
	}
	bin, err := s.opts.Gpuview()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNVML, err)
	}
	data, err := deviceplugin.RunGpuview(context.Background(), bin, s.timeout, MaxNVMLOutput, "--json")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNVML, err)
	}
	rows, err := decodeNVML(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNVML, bin, err)
	}
	var res *cgroup.Resolver
	if len(rows) > 0 {
		if res, err = cgroup.NewResolver(s.opts.HostRoot); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNVML, err)
		}
	}
	procs := make([]nvmlProc, 0, len(rows))
	for _, r := range rows {
		p := nvmlProc{gpu: r.GPU, used: r.UsedBytes}
		if cg, err := res.FromPid(int(r.PID)); err == nil {
			p.cgroup = cg.ID // a pid gone since, or in the root cgroup: no tenant
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// nvmlRow is one element of gpuext-gpuview --json (gpuview.Row, spelled
// out flat: strictjson does not look into embedded structs). The agent
// uses gpu, pid and usedBytes; it maps the pid to a tenant itself.
type nvmlRow struct {
	GPU           int    `json:"gpu"`
	UUID          string `json:"uuid"`
	PID           uint32 `json:"pid"`
	UsedBytes     uint64 `json:"usedBytes"`
	CgroupPath    string `json:"cgroup"`
	CgroupID      uint64 `json:"cgroupId"`
	Tenant        uint32 `json:"tenant"`
	Container     string `json:"container"`
	ContainerName string `json:"containerName"`
	Policy        string `json:"policy"`
	Err           string `json:"error"`
}

// decodeNVML strictly decodes gpuext-gpuview --json: a list of rows, each
// naming a GPU in [0, MaxNVMLGPUs) and a positive pid; at most
// MaxNVMLProcesses rows.
func decodeNVML(data []byte) ([]nvmlRow, error) {
	var rows []nvmlRow
	if err := strictjson.Decode(data, &rows); err != nil {
		return nil, err
	}
	if rows == nil {
		return nil, errors.New("not a list of processes")
	}
	if len(rows) > MaxNVMLProcesses {
		return nil, fmt.Errorf("%d processes, at most %d", len(rows), MaxNVMLProcesses)
	}
	for i, r := range rows {
		if r.GPU < 0 || r.GPU >= MaxNVMLGPUs {
			return nil, fmt.Errorf("process %d: gpu %d, want 0 to %d", i, r.GPU, MaxNVMLGPUs-1)
		}
		if r.PID == 0 {
			return nil, fmt.Errorf("process %d: pid 0", i)
		}
	}
	return rows, nil
}

// collectNVML sends gpuext_nvml_up and, when up, the NVML memory of the
// listed tenants per GPU and that of processes in no tenant.
func collectNVML(ch chan<- prometheus.Metric, s *nvmlSource, all []bpf.Tenant, shown []bpf.Tenant) {
	procs, err := s.get()
	if err != nil {
		ch <- gauge(descNVMLUp, 0)
		return
	}
	ch <- gauge(descNVMLUp, 1)
	owner := map[cgroup.ID]bpf.TenantID{}
	for _, t := range all {
		for _, cg := range t.Cgroups {
			owner[cg.CgroupID] = t.ID
		}
	}
	type key struct {
		t   bpf.TenantID
		gpu int
	}
	used := map[key]uint64{}
	untracked := map[int]uint64{}
	for _, p := range procs {
		id, ok := owner[p.cgroup]
		if p.cgroup == 0 || !ok {
			untracked[p.gpu] += p.used
			continue
		}
		used[key{id, p.gpu}] += p.used
	}
	for gpu, v := range untracked {
		ch <- gauge(descNVMLUntracked, float64(v), strconv.Itoa(gpu))
	}
	if len(used) == 0 {
		return
	}
	for _, t := range shown {
		var lv []string
		for gpu := range MaxNVMLGPUs {
			v, ok := used[key{t.ID, gpu}]
			if !ok {
				continue
			}
			if lv == nil {
				lv = labelsOf(t)
			}
			ch <- gauge(descNVMLUsed, float64(v), append(lv, strconv.Itoa(gpu))...)
		}
	}
}
