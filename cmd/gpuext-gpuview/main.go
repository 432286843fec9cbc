// Command gpuext-gpuview lists the processes using the host's NVIDIA GPUs,
// with their device memory as the driver reports it (NVML), mapped to gpuext
// tenants through their cgroups. It is the one gpuext binary that needs cgo
// (go-nvml loads libnvidia-ml at run time); on a host without the NVIDIA
// driver it says so and exits 1.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/gpuview"
	"github.com/gpuext/gpuext/policies"
)

// ErrNoDriver means NVML could not be loaded: no NVIDIA driver on this host.
var ErrNoDriver = errors.New("no NVIDIA driver (libnvidia-ml) on this host")

func main() {
	cfgPath := flag.String("config", os.Getenv("GPUEXT_CONFIG"), "gpuext config file (for pinDir and hostRoot)")
	asJSON := flag.Bool("json", false, "print JSON")
	gpus := flag.Bool("gpus", false, "list the GPUs (NVML index, UUID, memory) instead of their processes: what the agent's device plugin advertises when its config lists no GPUs")
	watch := flag.Duration("watch", 0, "print one JSON line of every GPU process (gpu, pid, usedBytes) each interval until stdout closes, NVML loaded once: the agent's memory guard reads it (internal/memguard)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: gpuext-gpuview [--config FILE] [--json | --gpus | --watch INTERVAL]\n\nGPU processes (NVML) with their device memory, mapped to gpuext tenants by cgroup.")
		flag.PrintDefaults()
	}
	memLimit := flag.String("memory-limit", "", "GPU:CGROUP-DIR:HARD-BYTES: set NVML's per-cgroup memory limit (nvmlDeviceSetMemoryLimits_v1) and read it back, as JSON; says when this driver's libnvidia-ml lacks it")
	flag.Parse()
	if *memLimit != "" {
		if err := memoryLimit(nvml.New(), *memLimit, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "gpuext-gpuview:", err)
			os.Exit(1)
		}
		return
	}
	if *watch != 0 {
		if err := watchProcesses(nvml.New(), *watch, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "gpuext-gpuview:", err)
			os.Exit(1)
		}
		return
	}
	if *gpus {
		if err := listGPUs(nvml.New(), *asJSON, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "gpuext-gpuview:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*cfgPath, *asJSON, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpuext-gpuview:", err)
		os.Exit(1)
	}
}

func run(cfgPath string, asJSON bool, out io.Writer) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	procs, err := nvmlProcesses(nvml.New())
	if err != nil {
		return err
	}
	res, err := cgroup.NewResolver(cfg.HostRoot)
	if err != nil {
		return err
	}
	var reg *bpf.Registry
	if _, err := os.Stat(cfg.PinDir); err == nil {
		if reg, err = bpf.OpenRegistry(cfg.PinDir); err != nil {
			return err
		}
		defer reg.Close()
	}
	var rows []gpuview.Row
	if reg != nil {
		rows = gpuview.Map(procs, res, reg)
	} else { // no registry on this host: processes only
		for _, p := range procs {
			rows = append(rows, gpuview.Row{Process: p})
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tPID\tGPU-MEM\tTENANT\tCONTAINER\tPOLICY\tCGROUP")
	for _, r := range rows {
		tenant := "-"
		if r.Tenant != 0 {
			tenant = fmt.Sprint(r.Tenant)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.GPU, r.PID, policies.FormatSize(r.UsedBytes), tenant,
			orDash(r.ContainerName), orDash(r.Policy), orDash(r.CgroupPath))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nvmlProcesses lists the compute processes of every GPU.
func nvmlProcesses(lib nvml.Interface) ([]gpuview.Process, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, ErrNoDriver
		}
		return nil, fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	return listProcesses(lib)
}

// watchProcesses loads NVML once and writes one gpuview.Sample line every
// interval; a failed listing is a line with its error (the guard reports
// it), a failed write (the reader went away) ends the watch.
func watchProcesses(lib nvml.Interface, interval time.Duration, out io.Writer) error {
	if interval < gpuview.MinWatchInterval {
		return fmt.Errorf("--watch %s: at least %s", interval, gpuview.MinWatchInterval)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return ErrNoDriver
		}
		return fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s := gpuview.Sample{Time: time.Now().UnixNano()}
		procs, err := listProcesses(lib)
		s.Procs = make([]gpuview.SampleProc, 0, len(procs))
		for _, p := range procs {
			s.Procs = append(s.Procs, gpuview.SampleProc{GPU: p.GPU, PID: p.PID, UsedBytes: p.UsedBytes})
		}
		if err != nil {
			s.Err = err.Error()
		}
		if err := enc.Encode(s); err != nil {
			return nil
		}
		if err := w.Flush(); err != nil {
			return nil
		}
		<-t.C
	}
}

// listProcesses lists the compute processes of every GPU (NVML loaded).
func listProcesses(lib nvml.Interface) ([]gpuview.Process, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", lib.ErrorString(ret))
	}
	var procs []gpuview.Process
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d: %s", i, lib.ErrorString(ret))
		}
		uuid, _ := dev.GetUUID()
		infos, ret := dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d processes: %s", i, lib.ErrorString(ret))
		}
		for _, p := range infos {
			procs = append(procs, gpuview.Process{GPU: i, UUID: uuid, PID: p.Pid, UsedBytes: p.UsedGpuMemory})
		}
	}
	return procs, nil
}

// GPU is one line of --gpus (internal/deviceplugin reads the JSON form).
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	MemoryBytes uint64 `json:"memoryBytes"`
	// PCIBusID as NVML writes it ("00000000:17:00.0"): the agent finds the
	// GPU's cgroup dmem region by it; "" when NVML does not say.
	PCIBusID string `json:"pciBusId,omitempty"`
}

// listGPUs prints every GPU's NVML index, UUID and total memory.
func listGPUs(lib nvml.Interface, asJSON bool, out io.Writer) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return ErrNoDriver
		}
		return fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml device count: %s", lib.ErrorString(ret))
	}
	gpus := []GPU{}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d: %s", i, lib.ErrorString(ret))
		}
		uuid, _ := dev.GetUUID()
		mem, ret := dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d memory: %s", i, lib.ErrorString(ret))
		}
		var bus string
		if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
			bus = cstr(pci.BusId[:])
		}
		gpus = append(gpus, GPU{Index: i, UUID: uuid, MemoryBytes: mem.Total, PCIBusID: bus})
	}
	if asJSON {
		return json.NewEncoder(out).Encode(gpus)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tUUID\tMEMORY\tPCI-BUS-ID")
	for _, g := range gpus {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", g.Index, g.UUID, policies.FormatSize(g.MemoryBytes), g.PCIBusID)
	}
	return tw.Flush()
}

// cstr is a NUL-terminated C char array as a string.
func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// memoryLimit sets NVML's per-cgroup device memory limit on one GPU
// ("GPU:CGROUP-DIR:HARD-BYTES", soft limit 0) and reads it back. Drivers
// that have it (r615+) hold it in the kernel's dmem controller, or in the
// driver where the kernel has none; older ones do not export it.
func memoryLimit(lib nvml.Interface, spec string, out io.Writer) error {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("--memory-limit %q: want GPU:CGROUP-DIR:HARD-BYTES", spec)
	}
	gpu, err1 := strconv.Atoi(parts[0])
	hard, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || !filepath.IsAbs(parts[1]) {
		return fmt.Errorf("--memory-limit %q: want GPU:CGROUP-DIR:HARD-BYTES (an index, an absolute path, bytes)", spec)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return ErrNoDriver
		}
		return fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	res := map[string]any{"gpu": gpu, "cgroup": parts[1], "hardBytes": hard}
	for _, sym := range []string{"nvmlDeviceSetMemoryLimits_v1", "nvmlDeviceGetMemoryLimits_v1"} {
		if err := lib.Extensions().LookupSymbol(sym); err != nil {
			res["error"] = fmt.Sprintf("this driver's libnvidia-ml has no %s", sym)
			return json.NewEncoder(out).Encode(res)
		}
	}
	dev, ret := lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml device %d: %s", gpu, lib.ErrorString(ret))
	}
	res["set"] = lib.ErrorString(dev.SetMemoryLimits_v1(parts[1], 0, hard))
	got, ret := dev.GetMemoryLimits_v1(parts[1])
	res["get"] = lib.ErrorString(ret)
	if ret == nvml.SUCCESS {
		res["softBytes"], res["hardBytesRead"], res["usedBytes"] = got.SoftLimit, got.HardLimit, got.CurrentUsed
	}
	return json.NewEncoder(out).Encode(res)
}
