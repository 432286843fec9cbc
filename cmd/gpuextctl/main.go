// Command gpuextctl is the gpuext admin CLI: the tenant table (from the
// pinned registry), the policy catalog, and what device probes counted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/latency"
	"github.com/gpuext/gpuext/policies"
)

const usage = `Usage: gpuextctl [--config FILE] <command> [flags]

Commands:
  tenants [-o wide|json] [--pin-dir DIR]
                                     the tenant table: tenant, container, pod, policy, quota, the layer that holds
                                     the quota (dmem: the kernel's dmem.max; devrt: the device runtime), priority,
                                     and the GPU memory its processes hold now (MEM-NOW, 0 once they exit) and at
                                     most (MEM-PEAK); -o wide adds the container id, runtime, cgroup, refused
                                     allocations and delayed launches; -o json (or --json) everything
  tenants set-policy TENANT POLICY [--param KEY=VALUE]... [--socket PATH]
                                     change a running tenant's policy (TENANT: its id or key) through the agent,
                                     as if its container had policy.gpuext.io=POLICY (and KEY.gpuext.io=VALUE):
                                     the same catalog and admin constraints; the kernel sees it at once, the
                                     device runtime within a second; no restart (docs/host-agent.md)
  policies [-o wide|json]            the policy catalog (built-in + the config's catalogDir): class, quota,
                                     eviction, prefetch; -o wide: every setting and the description
  policies show NAME                 one policy as JSON (copy it into catalogDir to make your own)
  policies attached [--json]         the kernel policies attached to the gpuext core: name, kind (memory/sched),
                                     classes, calls, handled, refused, errors (from pins and the core's debugfs)
  policies attach NAME [--replace]   attach a kernel policy, built in (bpf/kernelpolicy) or from the config's
                                     kernelPolicyDir, with a pinned link: it stays attached until detached;
                                     --replace swaps a new object in for an attached memory policy atomically
  policies attach --object FILE [--name N] [--replace]
                                     attach a policy object built with the SDK (docs/write-a-policy.md) under
                                     N (default: the file name without .bpf.o); a failed load or attach
                                     leaves what is attached in place
  policies detach NAME               unpin and detach it: its tenants return to the driver's stock behaviour
  probes [--json] [--state-dir DIR]  device probes per tenant (from the tenant dirs and the interposer's copy-outs):
                                     probes, processes, images patched/unpatched (and why), launches, blocks,
                                     mean block time, SMs used (fewest..most blocks), launch latency p50/p99
  probes catalog [--json]            every probe a container may select (built in and probeDir): per probe,
                                     the programs that run and each refused one with its reason
  probes compile --out DIR [--kernel NAME]... PROBE[,PROBE...]
                                     verify and translate catalog probes into a probes/ directory by hand
                                     (and print, per probe, the programs that run and those refused)
  probes read [--json] [--manifest FILE] DIR
                                     what one accounting probes/ directory (.status, .maps files) counted
  board --standalone [--interval 1ms] [--trace FILE]
                                     publish the device runtime's priority board where no agent runs (the
                                     device runtime run by hand); the agent publishes it itself, and
                                     --standalone refuses to run beside an agent that answers
  gc [--grace 10m] [--all] [--socket PATH]
                                     ask the agent to drop registry entries whose cgroup is gone now (OCI hook
                                     path; --all: every runtime) and tenants reserved longer than --grace that
                                     never got a cgroup; the agent also does it every reconcileInterval
  settings write --dir DIR --tenant N [--class C] [--quota SIZE] [--timeslice-us N] [--active-window-us N]
                 [--sm-percent N] [--mps-client-priority N] [--launch-gate] [--policy NAME] [--probes P,...]
                 [--gpus 0,1 --gpu-quotas 2GiB,3GiB]
                                     write a tenant dir by hand as admission would (settings.bin, config.json),
                                     to run the device runtime outside a container; --gpus/--gpu-quotas:
                                     a quota on each GPU given (per device ordinal), none on the others
  settings show DIR|FILE             a tenant dir's settings.bin as the device runtime reads it
  setup-node [--devrt-src FILE] [--in-container]
                                     prepare a node for the agent (the Helm chart's init container): mount a bpf
                                     filesystem for pinDir when none is, install the device runtime in devrtDir
                                     (from the image's /usr/lib/gpuext/devrt; replaced by rename, never in place)
  ping [--socket PATH] [--timeout 2s]
                                     exit 0 when the host agent answers on agentSocket (liveness/readiness probe)

Every command takes --help. The config file is the agent's (docs/configuration.md; GPUEXT_CONFIG
names it too); without one, or when it does not exist, the defaults apply (the commands that change
the node refuse a missing file). --pin-dir overrides its pinDir.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h, --help: the usage is printed, not an error
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "gpuextctl:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	global := flag.NewFlagSet("gpuextctl", flag.ContinueOnError)
	cfgPath := global.String("config", os.Getenv("GPUEXT_CONFIG"), "config file (default: the built-in defaults)")
	global.SetOutput(io.Discard)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, usage)
			return err
		}
		return fmt.Errorf("%w (gpuextctl --help lists the commands and flags)", err)
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch rest[0] {
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return nil
	case "tenants", "policies", "probes", "gc", "board", "settings", "setup-node", "ping":
	default:
		return fmt.Errorf("unknown command %q (gpuextctl --help lists the commands)", rest[0])
	}
	cfg, err := loadConfig(*cfgPath, changesNode(rest), os.Stderr)
	if err != nil {
		return err
	}
	switch rest[0] {
	case "tenants":
		return tenants(cfg, rest[1:], out)
	case "policies":
		return listPolicies(cfg, rest[1:], out)
	case "probes":
		return probesCmd(cfg, rest[1:], out)
	case "gc":
		return gc(cfg, rest[1:], out)
	case "board":
		return runBoard(cfg, rest[1:], out)
	case "settings":
		return settingsCmd(rest[1:], out)
	case "setup-node":
		return setupNode(cfg, rest[1:], out)
	default: // ping
		return ping(cfg, rest[1:], out)
	}
}

// TenantRow is one line of the tenant table (also the --json element).
type TenantRow struct {
	Tenant        uint32 `json:"tenant"`
	Key           string `json:"key"`
	Container     string `json:"container"`
	ContainerName string `json:"containerName"`
	Pod           string `json:"pod,omitempty"`
	Runtime       string `json:"runtime"`
	Cgroup        string `json:"cgroup"`
	CgroupID      uint64 `json:"cgroupId"`
	Policy        string `json:"policy"`
	QuotaBytes    uint64 `json:"quotaBytes"`
	// Layer holds the quota: "dmem" when the cgroup's dmem.max limits a
	// region (the kernel refuses past it), "devrt" when only the device
	// runtime does, "-" without a quota (admission.EnforcingLayer).
	Layer       string `json:"layer"`
	Priority    string `json:"priority"`
	TimesliceUS uint32 `json:"timesliceUs"`
	FailedOpen  bool   `json:"failedOpen"`
	// From the device runtime's usage file of the tenant, when its
	// processes have used the GPU.
	Usage *board.Usage `json:"usage,omitempty"`
	// From the agent's latency controller (its status file), while it runs:
	// a latency-critical tenant's target, p99 and verdict; a best-effort
	// tenant's stall.
	Latency *latency.TenantStatus `json:"latency,omitempty"`
}

func tenants(cfg config.Config, args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "set-policy" {
		return setPolicy(cfg, args[1:], out)
	}
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	format := outputFlags(fs)
	pinDir := fs.String("pin-dir", cfg.PinDir, "registry pin directory")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	output, err := format()
	if err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("tenants: unexpected argument %q (usage: gpuextctl tenants [-o wide|json] [--pin-dir DIR], "+
			"or gpuextctl tenants set-policy TENANT POLICY)", fs.Arg(0))
	}
	if _, err := os.Stat(*pinDir); err != nil {
		return fmt.Errorf("no tenant registry at %s (is the NRI plugin or OCI hook configured with this pinDir?): %w", *pinDir, err)
	}
	reg, err := bpf.OpenRegistry(*pinDir)
	if err != nil {
		return err
	}
	defer reg.Close()
	list, err := reg.List()
	if err != nil {
		return err
	}
	res, resErr := cgroup.NewResolver(cfg.HostRoot) // no cgroups here: the layer is the device runtime's
	now := time.Now()
	lat, latErr := latency.ReadStatus(latency.StatusPath(cfg.StateDir), now)
	latLine := latency.Summary(lat, latErr, now)
	if latErr != nil {
		lat = nil // stale (the controller does not run) or unreadable: not shown as current
	}
	rows := []TenantRow{}
	for _, t := range list {
		base := TenantRow{
			Tenant: uint32(t.ID), Key: t.Key, Policy: t.Policy, QuotaBytes: t.Config.QuotaBytes,
			Priority: admission.PriorityClassName(t.Config.PriorityClass), TimesliceUS: t.Config.TimesliceUs,
			FailedOpen: t.Config.Flags&uint32(bpf.TenantFlagFailOpen) != 0,
		}
		if u, err := board.ReadUsage(admission.AcctDir(cfg.StateDir, uint64(t.ID))); err == nil {
			base.Usage = &u
		}
		base.Latency = lat.Tenant(t.ID)
		if len(t.Cgroups) == 0 {
			base.Runtime = "-"
			base.Layer = admission.EnforcingLayer(nil, base.QuotaBytes)
			rows = append(rows, base)
			continue
		}
		for _, cg := range t.Cgroups {
			r := base
			r.Layer = admission.EnforcingLayer(dmemMax(res, resErr, cg), r.QuotaBytes)
			r.Container, r.ContainerName, r.Cgroup, r.CgroupID = cg.ContainerID, cg.ContainerName, cg.CgroupPath, uint64(cg.CgroupID)
			if cg.PodName != "" {
				r.Pod = cg.PodNamespace + "/" + cg.PodName
			}
			r.Runtime = cg.Runtime.String()
			rows = append(rows, r)
		}
	}
	if output == outputJSON {
		return writeJSON(out, rows)
	}
	if err := tenantTable(out, rows, output == outputWide); err != nil {
		return err
	}
	if latLine != "" {
		fmt.Fprintln(out, latLine)
	}
	return nil
}

// tenantTable prints the tenant table. The narrow one fits a terminal:
// who the tenant is, its policy, and its GPU memory now and at its peak
// (MEM-NOW is what its live processes hold: 0 once they exit, while
// MEM-PEAK keeps the most they held). Wide adds the container id, runtime,
// cgroup and the device runtime's refusal and delay counts.
func tenantTable(out io.Writer, rows []TenantRow, wide bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "TENANT\tCONTAINER\tNAME\tPOD\tRUNTIME\tCGROUP\tCGROUP-ID\tPOLICY\tQUOTA\tLAYER\tPRIORITY\tMEM-NOW\tMEM-PEAK\tREFUSED\tDELAYED\tLATENCY")
	} else {
		fmt.Fprintln(tw, "TENANT\tCONTAINER\tPOD\tPOLICY\tQUOTA\tLAYER\tPRIORITY\tMEM-NOW\tMEM-PEAK\tLATENCY")
	}
	for _, r := range rows {
		policy := r.Policy
		if r.FailedOpen {
			policy += " (fail-open)"
		}
		quota := "-"
		if r.QuotaBytes > 0 {
			quota = policies.FormatSize(r.QuotaBytes)
		}
		used, peak, refused, delayed := "-", "-", "-", "-"
		if u := r.Usage; u != nil {
			used, peak = policies.FormatSize(u.UsedBytes), policies.FormatSize(u.PeakBytes)
			refused, delayed = strconv.FormatUint(u.RefusedAllocs, 10), strconv.FormatUint(u.DelayedLaunches, 10)
		}
		if wide {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Tenant, short(r.Container),
				dash(r.ContainerName), dash(r.Pod), r.Runtime, dash(shortPath(r.Cgroup)), idStr(r.CgroupID), policy, quota,
				r.Layer, r.Priority, used, peak, refused, delayed, r.Latency.Cell())
			continue
		}
		name := r.ContainerName // the short id where the runtime gave no name
		if name == "" {
			name = short(r.Container)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Tenant, name, dash(r.Pod), policy, quota, r.Layer, r.Priority, used, peak, r.Latency.Cell())
	}
	return tw.Flush()
}

// dmemMax is the dmem.max of a registered cgroup, read only while the
// registry's path (cut to its field size) still names that cgroup; nil
// when there is none (no controller, no such cgroup).
func dmemMax(res *cgroup.Resolver, resErr error, cg bpf.CgroupEntry) map[string]cgroup.DmemValue {
	if resErr != nil {
		return nil
	}
	if id, err := res.IDOf(cg.CgroupPath); err != nil || id != cg.CgroupID {
		return nil
	}
	max, err := res.DmemMax(cg.CgroupPath)
	if err != nil {
		return nil
	}
	return max
}

func listPolicies(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("policies", flag.ContinueOnError)
	format := outputFlags(fs)
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if rest := fs.Args(); len(rest) > 0 {
		switch rest[0] {
		case "attached", "attach", "detach":
			return kernelPolicies(cfg, rest[0], rest[1:], out)
		}
	}
	output, err := format()
	if err != nil {
		return err
	}
	cat, err := admission.Catalog(cfg)
	if err != nil {
		return err
	}
	if rest := fs.Args(); len(rest) > 0 {
		if rest[0] != "show" || len(rest) != 2 {
			return fmt.Errorf("usage: gpuextctl policies show NAME")
		}
		p, ok := cat.Get(rest[1])
		if !ok {
			return fmt.Errorf("unknown policy %q (known: %s)", rest[1], strings.Join(cat.Names(), ", "))
		}
		return writeJSON(out, p)
	}
	list := cat.List()
	if output == outputJSON {
		return writeJSON(out, list)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if output == outputWide {
		fmt.Fprintln(tw, "POLICY\tSUMMARY\tDESCRIPTION")
		for _, p := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Summary(), p.Description)
		}
		return tw.Flush()
	}
	// narrow: what a policy asks for, the algorithms by name (-o wide: their
	// parameters, timeslices, SM share, and the description)
	fmt.Fprintln(tw, "POLICY\tCLASS\tQUOTA\tEVICTION\tPREFETCH")
	for _, p := range list {
		quota := "unlimited"
		switch {
		case p.Memory.QuotaBytes > 0:
			quota = policies.FormatSize(p.Memory.QuotaBytes)
		case slices.Contains(p.Requires, policies.KeyQuota):
			quota = "from " + policies.KeyQuota
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Priority.Class, quota, algorithmName(p.Memory.Eviction),
			algorithmName(p.Memory.Prefetch))
	}
	return tw.Flush()
}

// algorithmName is an eviction or prefetch algorithm's name without its
// parameters ("default" for none).
func algorithmName(a policies.Algorithm) string {
	if a.Name == "" {
		return "default"
	}
	return a.Name
}

// AttachedRow is one line of `policies attached` (also the --json element).
type AttachedRow struct {
	Name    string   `json:"name"`
	Ops     string   `json:"ops"`
	Kind    string   `json:"kind"`
	Classes []string `json:"classes,omitempty"`
	Pinned  bool     `json:"pinned"`
	Listed  bool     `json:"listed"`
	Calls   uint64   `json:"calls"`
	Handled uint64   `json:"handled"`
	Refused uint64   `json:"refused"`
	Errors  uint64   `json:"errors"`
	Denied  uint64   `json:"denied"`
}

// kernelPolicies: policies attached | attach NAME | detach NAME.
func kernelPolicies(cfg config.Config, cmd string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("policies "+cmd, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pinDir := fs.String("pin-dir", cfg.PinDir, "bpffs pin directory (links under <pin-dir>/links)")
	debugfs := fs.String("debugfs", kernelpolicy.DefaultDebugfsDir, "the gpuext core's debugfs directory")
	object := fs.String("object", "", "attach: a BPF policy object built with the SDK instead of a policy NAME")
	objName := fs.String("name", "", "attach --object: the name to attach it under (default: the file name without .bpf.o)")
	replace := fs.Bool("replace", false, "attach: replace the attached policy of that name atomically (memory policies)")
	if err := parseFlags(fs, reorderFlags(args), out); err != nil {
		return err
	}
	l := &kernelpolicy.Loader{PinDir: *pinDir, Core: kernelpolicy.Core{Dir: *debugfs}}
	switch cmd {
	case "attach", "detach":
		dir, err := admission.KernelPolicies(cfg)
		if err != nil {
			return err
		}
		if cmd == "attach" && *object != "" {
			if fs.NArg() != 0 {
				return fmt.Errorf("usage: gpuextctl policies attach --object FILE [--name N] [--replace] (no NAME with --object)")
			}
			p, err := kernelpolicy.ObjectPolicy(*object, *objName)
			if err != nil {
				return err
			}
			return attachDirPolicy(l, p, *replace, out)
		}
		if fs.NArg() != 1 {
			known := append(kernelpolicy.Names(), dir.Names()...)
			return fmt.Errorf("usage: gpuextctl policies %s NAME (known: %s)", cmd, strings.Join(known, ", "))
		}
		name := fs.Arg(0)
		if p, ok := dir.Get(name); ok && cmd == "attach" {
			return attachDirPolicy(l, p, *replace, out)
		}
		if *replace {
			return fmt.Errorf("--replace: %q is not a kernelPolicyDir policy (built-in policies change with the release; --object FILE --name N replaces a directory policy)", name)
		}
		if cmd == "detach" {
			if err := l.Detach(name); err != nil {
				return err
			}
			fmt.Fprintf(out, "detached %s\n", name)
			return nil
		}
		a, err := l.Attach(name)
		if err != nil {
			return err
		}
		a.Close() // the pin keeps it attached
		fmt.Fprintf(out, "attached %s (pinned at %s)\n", name, filepath.Join(l.LinksDir(), name))
		return nil
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("usage: gpuextctl policies attached [--json]")
	}
	list, err := l.Attached()
	if err != nil {
		return err
	}
	rows := []AttachedRow{}
	for _, s := range list {
		r := AttachedRow{Name: s.Name, Ops: s.Ops, Kind: string(s.Kind), Pinned: s.Pinned, Listed: s.Listed,
			Calls: s.Calls, Handled: s.Handled, Refused: s.Refused, Errors: s.Errors, Denied: s.Denied}
		for c := uint32(0); c < 32; c++ {
			if s.Classes&(1<<c) != 0 {
				r.Classes = append(r.Classes, admission.PriorityClassName(c))
			}
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return writeJSON(out, rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOPS\tKIND\tCLASSES\tCALLS\tHANDLED\tREFUSED\tERRORS\tSTATE")
	for _, r := range rows {
		classes := "-"
		if len(r.Classes) > 0 {
			classes = strings.Join(r.Classes, ",")
		}
		state := "pinned"
		switch {
		case !r.Listed:
			state = "pinned, not in core (stale pin)"
		case !r.Pinned:
			state = "not pinned here"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", dash(r.Name), r.Ops, dash(r.Kind), classes,
			r.Calls, r.Handled, r.Refused, r.Errors, state)
	}
	return tw.Flush()
}

// attachDirPolicy attaches a kernel policy directory's (or a loose object's) policy.
func attachDirPolicy(l *kernelpolicy.Loader, p *kernelpolicy.DirPolicy, replace bool, out io.Writer) error {
	a, err := l.AttachPolicy(p, kernelpolicy.AttachOptions{Replace: replace})
	if err != nil {
		return err
	}
	a.Close() // the pin keeps it attached
	verb := "attached"
	if replace && a.Link() == nil {
		verb = "replaced"
	}
	fmt.Fprintf(out, "%s %s from %s (%s policy, ops %s, pinned at %s)\n", verb, p.Name, p.ObjectPath, p.Kind,
		bpf.OpsName(p.Name), filepath.Join(l.LinksDir(), p.Name))
	return nil
}

// reorderFlags moves flags after positional arguments to the front, so
// "attach NAME --replace" parses like "attach --replace NAME".
func reorderFlags(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
			if !strings.Contains(a, "=") && takesValue(a) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

func takesValue(flag string) bool {
	switch strings.TrimLeft(flag, "-") {
	case "json", "replace":
		return false
	}
	return true
}

// shortPath shortens 64-hex container ids inside a cgroup path to 12 chars.
func shortPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" {
			parts[i] = s[:12]
		}
	}
	return strings.Join(parts, "/")
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return dash(id)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func idStr(id uint64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatUint(id, 10)
}

// writeJSON is every --json output: indented, one value.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
