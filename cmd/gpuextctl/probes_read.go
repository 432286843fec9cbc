package main

import (
	"flag"
	"fmt"
	"io"
	stdmaps "maps"
	"slices"
	"time"

	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
)

// probesReadCmd is `gpuextctl probes read [--json] [--manifest FILE] DIR`:
// what one accounting probes directory (the interposer's .status and .maps
// files, $GPUEXT_TENANT_ACCT/probes) holds, without a state dir - for a
// program run by hand with a bundle from `probes compile`.
func probesReadCmd(cfg config.Config, args []string, out io.Writer) error {
	fset := flag.NewFlagSet("probes read", flag.ContinueOnError)
	asJSON := fset.Bool("json", false, "print JSON")
	manifestPath := fset.String("manifest", "", "the module's manifest.json: count only its maps and name its probes (default: every map, every catalog probe)")
	if err := parseFlags(fset, args, out); err != nil {
		return err
	}
	if fset.NArg() != 1 {
		return fmt.Errorf("usage: gpuextctl probes read [--json] [--manifest FILE] DIR")
	}
	cat, err := admission.ProbeCatalog(cfg) // the views of the config's probeDir too
	if err != nil {
		return err
	}
	var manifest *abi.Manifest
	names := cat.Names()
	if *manifestPath != "" {
		var err error
		if manifest, err = abi.ReadManifest(*manifestPath); err != nil {
			return err
		}
		names = manifest.Probes
	}
	ten, err := maps.ReadTenant(fset.Arg(0), manifest)
	if err != nil {
		return err
	}
	sum := maps.Summarize(ten, cat, names)
	if *asJSON {
		return writeJSON(out, struct {
			Tenant *maps.Tenant        `json:"tenant"`
			Probes []maps.ProbeSummary `json:"probes"`
		}{ten, sum})
	}
	fmt.Fprintf(out, "processes %d, images patched %d, unpatched %d", ten.Processes, ten.Patched, ten.Unpatched)
	if len(ten.Reasons) > 0 {
		fmt.Fprintf(out, " (%s)", reasonList(ten.Reasons))
	}
	if len(ten.Off) > 0 {
		fmt.Fprintf(out, "; off: %s", reasonList(ten.Off))
	}
	if len(ten.LaunchTimeOff) > 0 {
		fmt.Fprintf(out, "; launch times off: %s", reasonList(ten.LaunchTimeOff))
	}
	fmt.Fprintln(out)
	if ten.Launches != nil { // the interposer's launch table: every launch, patched image or not
		r := ProbesRow{}
		applyLaunches(&r, ten.Launches)
		fmt.Fprintf(out, "launches %s, observed %s\n", measuredCell(r.Launches, r.LaunchesBy), coverageCell(r.Coverage))
		for _, line := range launchLines(r) {
			fmt.Fprintln(out, line)
		}
		if h := r.HostLatency; h != nil && h.Count > 0 {
			fmt.Fprintf(out, "host latency (launch call to completion): count=%d p50=%s p99=%s, %d launches not timed\n",
				h.Count, time.Duration(h.P50), time.Duration(h.P99), ten.Launches.LatSkipped)
		}
	}
	for _, s := range sum {
		if s.Counters == nil && s.SMs == nil && s.Histograms == nil && s.Hashes == nil && s.Records == nil && s.PerThread == nil {
			continue // no file had this probe's maps
		}
		fmt.Fprintf(out, "%s:", s.Name)
		for _, k := range slices.Sorted(stdmaps.Keys(s.Counters)) {
			fmt.Fprintf(out, " %s=%d", k, s.Counters[k])
		}
		for _, k := range slices.Sorted(stdmaps.Keys(s.Means)) {
			fmt.Fprintf(out, " %s=%.1f", k, s.Means[k])
		}
		if sm := s.SMs; sm != nil {
			fmt.Fprintf(out, " smsUsed=%d minBlocks=%d(sm%d) maxBlocks=%d(sm%d)", sm.Used, sm.Min, sm.MinSM, sm.Max, sm.MaxSM)
		}
		for _, m := range slices.Sorted(stdmaps.Keys(s.Histograms)) {
			h := s.Histograms[m]
			fmt.Fprintf(out, " %s: count=%d p50=%d%s p99=%d%s", m, h.Count, h.P50, h.Unit, h.P99, h.Unit)
		}
		fmt.Fprintln(out)
		for _, line := range viewLines(cat, []maps.ProbeSummary{s}) {
			fmt.Fprintf(out, "  %s\n", line)
		}
	}
	for _, s := range ten.Skipped {
		fmt.Fprintf(out, "not counted: %s\n", s)
	}
	return nil
}
