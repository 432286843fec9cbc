package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
)

// ProbesRow is one tenant of `gpuextctl probes` (also the --json element).
type ProbesRow struct {
	Tenant    uint32   `json:"tenant"`
	Key       string   `json:"key"`
	Policy    string   `json:"policy"`
	Probes    []string `json:"probes"`
	Processes int      `json:"processes"`
	// Images the tenant's processes loaded: patched with the probes, or
	// loaded unchanged (UnpatchedReasons counts why: SASS only, target too
	// low, JIT failure, ...).
	Patched          int            `json:"patched"`
	Unpatched        int            `json:"unpatched"`
	UnpatchedReasons map[string]int `json:"unpatchedReasons,omitempty"`
	// OffReasons: processes that ran without probes, and why.
	OffReasons map[string]int `json:"offReasons,omitempty"`
	// LaunchTimeOffReasons: processes whose probes ran but stopped writing
	// launch times (so launch-latency stopped), and why.
	LaunchTimeOffReasons map[string]int `json:"launchTimeOffReasons,omitempty"`

	// launch-stats
	Launches    *uint64  `json:"launches,omitempty"`
	Blocks      *uint64  `json:"blocks,omitempty"`
	MeanBlockNs *float64 `json:"meanBlockNs,omitempty"`
	// BlocksRunning: the last reading was taken while blocks ran, so it
	// has no mean block time (MEAN-BLOCK shows "running").
	BlocksRunning bool `json:"blocksRunning,omitempty"`
	// sm-histogram
	SMs *maps.SMSummary `json:"sms,omitempty"`
	// launch-latency
	LaunchLatency *maps.HistSummary `json:"launchLatency,omitempty"`

	// LaunchesBy and BlocksBy split Launches and Blocks by how they were
	// measured: device (the probes' counters), host (the interposer's launch
	// table, for kernels the probes could not see), none (known launches
	// whose kernels no one saw: not in the sum).
	LaunchesBy map[launches.Measured]uint64 `json:"launchesBy,omitempty"`
	BlocksBy   map[launches.Measured]uint64 `json:"blocksBy,omitempty"`
	// Coverage: launches observed device-side, host-side, not at all, with the reasons.
	Coverage *LaunchCoverage `json:"coverage,omitempty"`
	// HostLatency: host-measured launch latency (launch call to the
	// kernel's completion, CUDA events) of the host-measured kernels.
	HostLatency *maps.HistSummary `json:"hostLatency,omitempty"`
	// Kernels: the launch table, the most launched first, then "other" rows.
	Kernels []launches.Row `json:"kernels,omitempty"`

	// Every probe's views, as the catalog defines them.
	Details []maps.ProbeSummary `json:"details"`
	// Skipped: copy-out files (or maps in them) not counted, and why.
	Skipped []string `json:"skipped,omitempty"`
	// MissedFinal: images whose last copy in a context that ended unseen
	// by the interposer could not be made: the counts are short by what ran
	// there since the copy before (at most the copy interval, 1 s).
	MissedFinal int `json:"missedFinal,omitempty"`
}

func probesCmd(cfg config.Config, args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "compile" {
		return probesCompileCmd(cfg, args[1:], out)
	}
	if len(args) > 0 && args[0] == "catalog" {
		return probesCatalogCmd(cfg, args[1:], out)
	}
	if len(args) > 0 && args[0] == "read" {
		return probesReadCmd(cfg, args[1:], out)
	}
	fset := flag.NewFlagSet("probes", flag.ContinueOnError)
	asJSON := fset.Bool("json", false, "print JSON")
	stateDir := fset.String("state-dir", cfg.StateDir, "the admission state directory (tenants/, acct/)")
	kernels := fset.Int("kernels", 0, "also print each tenant's N most launched kernels (name, device|host, reason, launches, grid, block, host latency)")
	if err := parseFlags(fset, args, out); err != nil {
		return err
	}
	if fset.NArg() != 0 {
		return fmt.Errorf("usage: gpuextctl probes [--json] [--kernels N] [--state-dir DIR]")
	}
	cat, err := admission.ProbeCatalog(cfg) // the views of the config's probeDir too
	if err != nil {
		return err
	}
	rows, err := probeRows(*stateDir, cat)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(out, rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tKEY\tPROBES\tPROCS\tPATCHED\tUNPATCHED\tLAUNCHES\tCOVERAGE\tBLOCKS\tMEAN-BLOCK\tSMS\tLAT-P50\tLAT-P99")
	for _, r := range rows {
		unpatched := strconv.Itoa(r.Unpatched)
		if len(r.UnpatchedReasons) > 0 {
			unpatched += " (" + reasonList(r.UnpatchedReasons) + ")"
		}
		launches, blocks, mean, sms, p50, p99 := "-", "-", "-", "-", "-", "-"
		launches, blocks = measuredCell(r.Launches, r.LaunchesBy), measuredCell(r.Blocks, r.BlocksBy)
		if r.MeanBlockNs != nil {
			mean = time.Duration(*r.MeanBlockNs).String()
		} else if r.BlocksRunning {
			mean = "running"
		}
		if s := r.SMs; s != nil && s.Used > 0 {
			sms = fmt.Sprintf("%d used, %d..%d blocks", s.Used, s.Min, s.Max)
		}
		p50, p99 = latencyCells(r)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Tenant, r.Key, dash(strings.Join(r.Probes, ",")),
			r.Processes, r.Patched, unpatched, launches, coverageCell(r.Coverage), blocks, mean, sms, p50, p99)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, s := range r.Skipped {
			fmt.Fprintf(out, "tenant %d: not counted: %s\n", r.Tenant, s)
		}
		for _, line := range launchLines(r) {
			fmt.Fprintf(out, "tenant %d: %s\n", r.Tenant, line)
		}
		for _, line := range viewLines(cat, r.Details) {
			fmt.Fprintf(out, "tenant %d: %s\n", r.Tenant, line)
		}
		if r.MissedFinal > 0 {
			fmt.Fprintf(out, "tenant %d: %d image(s) without their last copy (a context ended where the interposer could not see it): up to 1 s of their counts missing\n",
				r.Tenant, r.MissedFinal)
		}
	}
	if *kernels > 0 {
		return printKernels(out, rows, *kernels)
	}
	return nil
}

func reasonList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// probeRows reads every tenant directory of stateDir that has probes
// selected or probe accounting, with what its processes counted.
func probeRows(stateDir string, cat *programs.Catalog) ([]ProbesRow, error) {
	ents, err := os.ReadDir(admission.TenantsRoot(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return []ProbesRow{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read tenant dirs: %w", err)
	}
	rows := []ProbesRow{}
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		dir := admission.TenantDir(stateDir, id)
		var tf tenantcfg.File
		if b, err := os.ReadFile(filepath.Join(dir, tenantcfg.ConfigFileName)); err == nil {
			if err := json.Unmarshal(b, &tf); err != nil {
				return nil, fmt.Errorf("tenant %d: %s: %w", id, tenantcfg.ConfigFileName, err)
			}
		}
		manifest, err := abi.ReadManifest(filepath.Join(dir, admission.TenantProbesDir, abi.ManifestFile))
		if errors.Is(err, fs.ErrNotExist) {
			manifest = nil
		} else if err != nil {
			return nil, fmt.Errorf("tenant %d: %w", id, err)
		}
		acct := filepath.Join(admission.AcctDir(stateDir, id), admission.AcctProbesDir)
		_, acctErr := os.Lstat(acct) // a tenant-made link is not followed
		if len(tf.Probes) == 0 && manifest == nil && acctErr != nil {
			continue // no probes here
		}
		ten, err := maps.ReadTenant(acct, manifest)
		if err != nil {
			return nil, fmt.Errorf("tenant %d: %w", id, err)
		}
		names := tf.Probes
		if manifest != nil {
			names = manifest.Probes
		}
		r := ProbesRow{Tenant: uint32(id), Key: tf.TenantKey, Policy: tf.Policy, Probes: names,
			Processes: ten.Processes, Patched: ten.Patched, Unpatched: ten.Unpatched,
			UnpatchedReasons: ten.Reasons, OffReasons: ten.Off, LaunchTimeOffReasons: ten.LaunchTimeOff, Skipped: ten.Skipped, MissedFinal: ten.MissedFinal,
			Details: maps.Summarize(ten, cat, names)}
		if r.Probes == nil {
			r.Probes = []string{}
		}
		for _, s := range r.Details {
			switch s.Name {
			case "launch-stats":
				if v, ok := s.Counters["launches"]; ok {
					r.Launches = &v
				}
				if v, ok := s.Counters["blocks"]; ok {
					r.Blocks = &v
				}
				if v, ok := s.Means["meanBlockNs"]; ok {
					r.MeanBlockNs = &v
				}
				r.BlocksRunning = slices.Contains(s.InFlight, "meanBlockNs")
			case "launch-count": // the same counts without timing; launch-stats' win if both run
				if v, ok := s.Counters["launches"]; ok && r.Launches == nil {
					r.Launches = &v
				}
				if v, ok := s.Counters["blocks"]; ok && r.Blocks == nil {
					r.Blocks = &v
				}
			case "sm-histogram":
				r.SMs = s.SMs
			case "launch-latency":
				if h, ok := s.Histograms["lat_hist"]; ok {
					r.LaunchLatency = &h
				}
			}
		}
		applyLaunches(&r, ten.Launches)
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Tenant < rows[j].Tenant })
	return rows, nil
}
