package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
)

// LaunchCoverage is how a tenant's launches were observed: device-side (the
// kernel's image carries the probes), host-side only (the interposer's
// launch table: the image could not be patched, with the reason), or not at
// all (known to have run, kernels unseen: graph replays of a graph whose
// nodes could not be read).
type LaunchCoverage struct {
	Device uint64 `json:"device"`
	Host   uint64 `json:"host"`
	None   uint64 `json:"none"`
	// ObservedPercent is (Device + Host) of all, 100 with no launch.
	ObservedPercent float64 `json:"observedPercent"`
	// Reasons: the launches per class and reason, the most first.
	Reasons []launches.Coverage `json:"reasons"`
}

// applyLaunches adds the interposer's launch table to r: the LAUNCHES and
// BLOCKS numbers become device counts (the probes' own, when launch-count
// or launch-stats ran) plus the host's counts of the kernels the probes
// could not see, each part labelled; coverage, host latency and kernels.
func applyLaunches(r *ProbesRow, tab *launches.Table) {
	var byL, byB map[launches.Measured]uint64
	if tab != nil {
		byL, byB = tab.Launches, tab.Blocks
	}
	r.Launches, r.LaunchesBy = measuredSum(r.Launches, byL, tab != nil)
	r.Blocks, r.BlocksBy = measuredSum(r.Blocks, byB, tab != nil)
	if tab == nil {
		return
	}
	c := &LaunchCoverage{Device: tab.Launches[launches.Device], Host: tab.Launches[launches.Host],
		None: tab.Launches[launches.None], ObservedPercent: 100, Reasons: tab.Coverage}
	if all := tab.Total(); all > 0 {
		c.ObservedPercent = 100 * float64(c.Device+c.Host) / float64(all)
	}
	r.Coverage = c
	if tab.Latency {
		h := maps.Log2Histogram(tab.LatHist[:])
		h.Unit = "ns"
		r.HostLatency = &h
	}
	r.Kernels = tab.Kernels
}

// measuredSum is the device counter (dev, nil when no device probe counts
// launches) plus the host's count of the launches it alone saw; with no
// device counter the host's count of every launch. The launches no one saw
// (none) are in the map, not in the sum.
func measuredSum(dev *uint64, tab map[launches.Measured]uint64, haveTab bool) (*uint64, map[launches.Measured]uint64) {
	by := map[launches.Measured]uint64{}
	if dev != nil {
		by[launches.Device] = *dev
	}
	if haveTab {
		host := tab[launches.Host]
		if dev == nil {
			host += tab[launches.Device]
		}
		if host > 0 || dev == nil {
			by[launches.Host] = host
		}
		if tab[launches.None] > 0 {
			by[launches.None] = tab[launches.None]
		}
	}
	if len(by) == 0 {
		return nil, nil
	}
	total := by[launches.Device] + by[launches.Host]
	return &total, by
}

// measuredCell is "N" labelled with how it was measured: "8 host",
// "51 (4 device, 47 host)"; a part counted by no one (none) is shown but
// not added.
func measuredCell(total *uint64, by map[launches.Measured]uint64) string {
	if total == nil {
		return "-"
	}
	var parts []string
	for _, m := range []launches.Measured{launches.Device, launches.Host} {
		if v, ok := by[m]; ok {
			parts = append(parts, fmt.Sprintf("%d %s", v, m))
		}
	}
	s := strconv.FormatUint(*total, 10)
	switch {
	case len(parts) == 1:
		s = parts[0]
	case len(parts) > 1:
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if v := by[launches.None]; v > 0 {
		s += fmt.Sprintf(" +%d unseen", v)
	}
	return s
}

func coverageCell(c *LaunchCoverage) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatFloat(c.ObservedPercent, 'f', 1, 64) + "%"
}

// latencyCells: the device's launch-latency (launch call to the first
// block's start) when it ran, else the host's (launch call to the kernel's
// completion), marked (d) or (h).
func latencyCells(r ProbesRow) (p50, p99 string) {
	if h := r.LaunchLatency; h != nil && h.Count > 0 {
		return time.Duration(h.P50).String() + "(d)", time.Duration(h.P99).String() + "(d)"
	}
	if h := r.HostLatency; h != nil && h.Count > 0 {
		return time.Duration(h.P50).String() + "(h)", time.Duration(h.P99).String() + "(h)"
	}
	return "-", "-"
}

// launchLines are the lines under the table for r: the coverage by reason
// and what the latency marks mean.
func launchLines(r ProbesRow) []string {
	var out []string
	if c := r.Coverage; c != nil && len(c.Reasons) > 0 {
		parts := make([]string, 0, len(c.Reasons))
		for _, e := range c.Reasons {
			parts = append(parts, fmt.Sprintf("%d %s (%s)", e.Launches, e.Measured, e.Reason))
		}
		out = append(out, "launches observed: "+strings.Join(parts, ", "))
	}
	if p, _ := latencyCells(r); strings.HasSuffix(p, "(h)") {
		// (d), the device's launch-latency, is launch call to the first block's start
		out = append(out, "latency (h): host-measured, launch call to kernel completion (a CUDA event after the launch)")
	}
	return out
}

// kernelName shows a kernel's name within width, with its full length when cut.
func kernelName(k launches.Row, width int) string {
	name := k.Name
	if len(name) > width {
		name = name[:width]
	}
	if k.Truncated || len(name) < len(k.Name) {
		name += fmt.Sprintf("...(%d bytes)", k.NameLen)
	}
	return name
}

// printKernels writes the top n kernels of each row's launch table.
func printKernels(out io.Writer, rows []ProbesRow, n int) error {
	for _, r := range rows {
		if len(r.Kernels) == 0 {
			continue
		}
		fmt.Fprintf(out, "tenant %d kernels:\n", r.Tenant)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KERNEL\tMEASURED\tREASON\tLAUNCHES\tIN-GRAPHS\tBLOCKS\tGRID\tBLOCK\tLAT-MEAN(h)\tLAT-MAX(h)")
		for i, k := range r.Kernels {
			if i >= n && !k.Other() {
				continue
			}
			mean, lmax := "-", "-"
			if k.LatCount > 0 {
				mean, lmax = time.Duration(k.LatSumNs/k.LatCount).String(), time.Duration(k.LatMaxNs).String()
			}
			name := kernelName(k, 60)
			if k.Other() {
				name = fmt.Sprintf("%s (%d kernels)", launches.OtherName, k.Kernels)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%dx%dx%d\t%dx%dx%d\t%s\t%s\n", name, k.Measured, k.Reason, k.Launches,
				k.GraphLaunches, k.Blocks, k.GridLast[0], k.GridLast[1], k.GridLast[2], k.BlockLast[0], k.BlockLast[1],
				k.BlockLast[2], mean, lmax)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
