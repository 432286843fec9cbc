package policies

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuext/gpuext/gpubpf/programs/catalog"
)

// Limits of the policy model (they match kmod/include/gpuext_abi.h where the
// ABI has one).
const (
	MaxProbes     = 8                // GPUEXT_MAX_PROBES
	MaxTimeslice  = 10 * time.Second // largest timeslice a tenant may ask for
	MinInterleave = 1
	MaxInterleave = 64
)

var (
	policyNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`) // fits GPUEXT_NAME_LEN
	probeNameRE  = catalog.NameRE
	// ptxIdentRE: a kernel name as probe-kernels.gpuext.io takes it.
	ptxIdentRE = regexp.MustCompile(`^[A-Za-z_$.][A-Za-z0-9_$.]*$`)
)

// Classes lists the priority classes, most urgent first.
var Classes = []PriorityClass{LatencyCritical, Standard, BestEffort}

// Valid reports whether c is a known priority class.
func (c PriorityClass) Valid() bool { return slices.Contains(Classes, c) }

// ParamSpec describes one parameter of an algorithm. Each algorithm has at
// most one, because the tenant config carries one parameter per algorithm.
type ParamSpec struct {
	Name     string
	Min, Max int64
	// Default is filled in when the parameter is omitted; 0 = left to the
	// policy program (it says what it does then).
	Default int64
	Doc     string
}

// AlgorithmSpec describes one eviction or prefetch algorithm.
type AlgorithmSpec struct {
	Name   string
	Doc    string
	Params []ParamSpec
	// Source is where an algorithm that is not built in comes from (the
	// descriptor file of a policy in the host's kernelPolicyDir); "" for the
	// built-in ones.
	Source string
}

// Algorithms are the eviction and prefetch algorithms a catalog's policies
// and a container's overrides may name: the built-in ones, and those the
// host's kernel policy directory adds (bpf/kernelpolicy.Dir).
type Algorithms struct {
	Eviction []AlgorithmSpec
	Prefetch []AlgorithmSpec
	// Probes are the device probes policies and probes.gpuext.io may name:
	// admission sets the program catalog (gpubpf/programs: the built-in
	// probes and the host's probe directory); nil = BuiltinProbes.
	Probes ProbeSet
}

// ProbeSet is a set of device probes that a policy may select.
// gpubpf/programs.Catalog is one; the policy model needs no more of it, so
// it links neither the device toolchain nor cilium/ebpf.
type ProbeSet interface {
	// Check returns an error naming the first of names that the set does
	// not hold, and the names it holds.
	Check(names []string) error
}

// BuiltinProbes are the device probes gpuext ships (gpubpf/programs/catalog).
var BuiltinProbes ProbeSet = builtinProbes{}

type builtinProbes struct{}

func (builtinProbes) Check(names []string) error { return catalog.Check(catalog.Names(), names) }

// BuiltinAlgorithms are EvictionAlgorithms and PrefetchAlgorithms.
func BuiltinAlgorithms() Algorithms {
	return Algorithms{Eviction: slices.Clone(EvictionAlgorithms), Prefetch: slices.Clone(PrefetchAlgorithms)}
}

// With returns a with extra's algorithms added. A name that a already has
// is an error naming the algorithm and where both come from.
func (a Algorithms) With(extra Algorithms) (Algorithms, error) {
	out := Algorithms{Eviction: slices.Clone(a.Eviction), Prefetch: slices.Clone(a.Prefetch), Probes: a.Probes}
	for _, k := range []struct {
		kind       string
		dst        *[]AlgorithmSpec
		extraSpecs []AlgorithmSpec
	}{{"eviction", &out.Eviction, extra.Eviction}, {"prefetch", &out.Prefetch, extra.Prefetch}} {
		for _, s := range k.extraSpecs {
			if old, ok := findAlgorithm(*k.dst, s.Name); ok {
				from := old.Source
				if from == "" {
					from = "built in"
				}
				return Algorithms{}, badValue(fmt.Sprintf("%s: %s policy %q is already defined (%s)", s.Source, k.kind, s.Name, from))
			}
			*k.dst = append(*k.dst, s)
		}
	}
	return out, nil
}

// Lookup returns the eviction (kind "eviction") or prefetch algorithm name.
func (a Algorithms) Lookup(kind, name string) (AlgorithmSpec, bool) {
	if kind == "prefetch" {
		return findAlgorithm(a.Prefetch, name)
	}
	return findAlgorithm(a.Eviction, name)
}

func (a Algorithms) orBuiltin() Algorithms {
	if a.Eviction == nil && a.Prefetch == nil {
		a.Eviction, a.Prefetch = EvictionAlgorithms, PrefetchAlgorithms
	}
	if a.Probes == nil {
		a.Probes = BuiltinProbes
	}
	return a
}

// EvictionAlgorithms are the eviction policies, in ABI order (enum gpuext_eviction_policy).
var EvictionAlgorithms = []AlgorithmSpec{
	{Name: "default", Doc: "the driver's stock eviction (LRU)"},
	{Name: "lru", Doc: "least recently used chunk first"},
	{Name: "fifo", Doc: "oldest allocated chunk first"},
	{Name: "lfu", Doc: "least frequently used chunk first", Params: []ParamSpec{
		{Name: "decay", Min: 1, Max: 100, Default: 50, Doc: "percent by which access counts decay at each aging pass"}}},
	{Name: "mru", Doc: "most recently used chunk first (scans larger than memory)"},
	{Name: "tenant-quota", Doc: "a tenant over its quota evicts its own chunks first (needs a quota)"},
	{Name: "priority-weighted", Doc: "prefer evicting chunks of lower-priority tenants", Params: []ParamSpec{
		{Name: "weight", Min: 1, Max: 100, Default: 4, Doc: "how many times longer a class keeps its chunks than the class below it"}}},
	{Name: "freq-decay", Doc: "least recently used chunk first, a chunk's recency refreshed only every period-th access", Params: []ParamSpec{
		{Name: "period", Min: 1, Max: 16, Default: 4, Doc: "accesses a chunk needs to refresh its recency (1 = lru)"}}},
}

// PrefetchAlgorithms are the prefetch policies, in ABI order (enum gpuext_prefetch_policy).
var PrefetchAlgorithms = []AlgorithmSpec{
	{Name: "default", Doc: "the driver's stock prefetch"},
	{Name: "none", Doc: "no prefetch: migrate only the faulting pages"},
	{Name: "always-max", Doc: "prefetch the whole VA block on a fault"},
	{Name: "tree-threshold", Doc: "prefetch a region once enough of it is resident", Params: []ParamSpec{
		{Name: "threshold", Min: 1, Max: 100, Default: 51, Doc: "percent of a region's pages resident or faulted before the rest is prefetched"}}},
	{Name: "sequential", Doc: "prefetch pages after the faulting one", Params: []ParamSpec{
		{Name: "pages", Min: 1, Max: 512, Default: 32, Doc: "4 KiB pages prefetched ahead of the fault"}}},
	{Name: "stride", Doc: "prefetch along a fixed or detected stride", Params: []ParamSpec{
		{Name: "stride", Min: 1, Max: 65536, Doc: "stride in 4 KiB pages; omitted = detected from the fault pattern"}}},
}

func findAlgorithm(specs []AlgorithmSpec, name string) (AlgorithmSpec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return AlgorithmSpec{}, false
}

func algorithmNames(specs []AlgorithmSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// validateAlgorithm checks a against specs; kind is "eviction" or "prefetch".
// Errors name the field path under path.
func validateAlgorithm(a Algorithm, specs []AlgorithmSpec, kind, path string) error {
	spec, ok := findAlgorithm(specs, a.Name)
	if !ok {
		return fieldError(path+".name", fmt.Sprintf("unknown %s policy %s (want one of: %s)", kind, quote(a.Name), algorithmNames(specs)))
	}
	for _, name := range sortedKeys(a.Params) {
		v := a.Params[name]
		i := slices.IndexFunc(spec.Params, func(p ParamSpec) bool { return p.Name == name })
		if i < 0 {
			return fieldError(path+".params."+keyText(name), fmt.Sprintf("%s policy %q has no parameter %s%s", kind, a.Name, quote(name), paramHint(spec)))
		}
		p := spec.Params[i]
		if v < p.Min || v > p.Max {
			return fieldError(path+".params."+name, fmt.Sprintf("%d is out of range %d..%d", v, p.Min, p.Max))
		}
	}
	return nil
}

func paramHint(spec AlgorithmSpec) string {
	if len(spec.Params) == 0 {
		return " (it takes none)"
	}
	names := make([]string, len(spec.Params))
	for i, p := range spec.Params {
		names[i] = p.Name
	}
	return " (want " + strings.Join(names, ", ") + ")"
}

func fieldError(path, msg string) error { return badValue(path + ": " + msg) }

// withDefaults returns a with omitted parameters set to their defaults.
func (a Algorithm) withDefaults(specs []AlgorithmSpec) Algorithm {
	spec, _ := findAlgorithm(specs, a.Name)
	for _, p := range spec.Params {
		if _, ok := a.Params[p.Name]; !ok && p.Default != 0 {
			if a.Params == nil {
				a.Params = map[string]int64{}
			}
			a.Params[p.Name] = p.Default
		}
	}
	return a
}

// ParseAlgorithm parses the override grammar NAME or NAME:PARAM=INT[,PARAM=INT...],
// e.g. "lfu", "lfu:decay=20", "tree-threshold:threshold=60". It checks syntax
// only; Validate checks names and ranges.
func ParseAlgorithm(s string) (Algorithm, error) {
	name, params, hasParams := strings.Cut(s, ":")
	a := Algorithm{Name: name}
	if name == "" {
		return a, badValue("empty algorithm name (want NAME or NAME:PARAM=VALUE)")
	}
	if !hasParams {
		return a, nil
	}
	a.Params = map[string]int64{}
	for _, kv := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return a, badValue(fmt.Sprintf("parameter %s: want PARAM=VALUE", quote(kv)))
		}
		if _, dup := a.Params[k]; dup {
			return a, badValue(fmt.Sprintf("parameter %s given twice", quote(k)))
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return a, badValue(fmt.Sprintf("parameter %s=%s: want an integer", keyText(k), quote(v)))
		}
		a.Params[k] = n
	}
	return a, nil
}

// String writes a in the override grammar: "lru", "tree-threshold:threshold=51".
func (a Algorithm) String() string {
	if len(a.Params) == 0 {
		return a.Name
	}
	parts := make([]string, 0, len(a.Params))
	for _, k := range sortedKeys(a.Params) {
		parts = append(parts, k+"="+strconv.FormatInt(a.Params[k], 10))
	}
	return a.Name + ":" + strings.Join(parts, ",")
}

// Validate checks every field of p against the built-in algorithms; errors
// name the field path (`memory.eviction.name: unknown eviction policy "lruu"
// ...`) and wrap ErrBadValue.
func (p Policy) Validate() error { return p.ValidateWith(BuiltinAlgorithms()) }

// ValidateWith is Validate where the eviction and prefetch names may be any of algs.
func (p Policy) ValidateWith(algs Algorithms) error {
	algs = algs.orBuiltin()
	if !policyNameRE.MatchString(p.Name) {
		return fieldError("name", fmt.Sprintf("%q must match %s", p.Name, policyNameRE))
	}
	if err := validateAlgorithm(p.Memory.Eviction, algs.Eviction, "eviction", "memory.eviction"); err != nil {
		return err
	}
	if err := validateAlgorithm(p.Memory.Prefetch, algs.Prefetch, "prefetch", "memory.prefetch"); err != nil {
		return err
	}
	if p.Memory.Quota != "" {
		n, err := ParseSize(p.Memory.Quota)
		if err != nil {
			return fmt.Errorf("memory.quota: %w", err)
		}
		if n != p.Memory.QuotaBytes {
			return fieldError("memory.quota", fmt.Sprintf("%q does not match quotaBytes %d", p.Memory.Quota, p.Memory.QuotaBytes))
		}
	}
	if a := p.Memory.QuotaAction; a != "" && !slices.Contains(QuotaActions, a) {
		return fieldError("memory.quotaAction", fmt.Sprintf("%q: want %q or %q (empty: the node's memoryGuard.action)", a, QuotaActions[0], QuotaActions[1]))
	}
	if p.Memory.Eviction.Name == "tenant-quota" && p.Memory.QuotaBytes == 0 && !slices.Contains(p.Requires, KeyQuota) {
		return fieldError("memory.eviction.name", `"tenant-quota" needs a quota: set memory.quota or require `+KeyQuota)
	}
	if !p.Priority.Class.Valid() {
		return fieldError("priority.class", fmt.Sprintf("unknown priority class %q (want one of: %s)", p.Priority.Class, classList()))
	}
	if us := p.Priority.TimesliceUS; time.Duration(us)*time.Microsecond > MaxTimeslice {
		return fieldError("priority.timesliceUs", fmt.Sprintf("%d is above %d (10s); 0 = driver default", us, MaxTimeslice.Microseconds()))
	}
	if w := p.Priority.ActiveWindowUS; time.Duration(w)*time.Microsecond > MaxTimeslice {
		return fieldError("priority.activeWindowUs", fmt.Sprintf("%d is above %s", w, MaxTimeslice))
	}
	if sm := p.Priority.SMPercent; sm > 100 {
		return fieldError("priority.smPercent", fmt.Sprintf("%d is above 100; 0 = not confined", sm))
	}
	if mp := p.Priority.MPSClientPriority; mp > MaxMPSClientPriority {
		return fieldError("priority.mpsClientPriority", fmt.Sprintf("%d is out of range 0..%d (0 normal, 1 below normal)", mp, MaxMPSClientPriority))
	}
	if lt := p.Priority.LatencyTarget; lt != "" {
		if p.Priority.Class != LatencyCritical {
			return fieldError("priority.latencyTarget", fmt.Sprintf("%q: only a %s policy has a latency target (class is %q)", lt, LatencyCritical, p.Priority.Class))
		}
		if _, _, err := ParseLatencyTarget(lt); err != nil {
			return fieldError("priority.latencyTarget", err.Error())
		}
	}
	if il := p.Priority.Interleave; il != 0 && (il < MinInterleave || il > MaxInterleave) {
		return fieldError("priority.interleave", fmt.Sprintf("%d is out of range %d..%d; 0 = driver default", il, MinInterleave, MaxInterleave))
	}
	if err := validateProbes(p.Probes, "probes", algs.Probes); err != nil {
		return err
	}
	for i, k := range p.Requires {
		if !slices.Contains(overrideKeys, k) {
			return fieldError(fmt.Sprintf("requires[%d]", i), fmt.Sprintf("%q is not an override key (want one of: %s)", k, strings.Join(overrideKeys, ", ")))
		}
	}
	return nil
}

func validateProbes(list []string, path string, known ProbeSet) error {
	if len(list) > MaxProbes {
		return fieldError(path, fmt.Sprintf("%d probes, at most %d", len(list), MaxProbes))
	}
	for i, name := range list {
		if !probeNameRE.MatchString(name) {
			return fieldError(fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("probe name %s must match %s", quote(name), probeNameRE))
		}
		if slices.Contains(list[:i], name) {
			return fieldError(fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("probe %q listed twice", name))
		}
	}
	// Names are well-formed; now each must be a probe of the program
	// catalog (gpubpf/programs, with the host's probe directory), so a typo
	// fails at admission, not on the device.
	if known == nil {
		known = BuiltinProbes
	}
	for i, name := range list {
		if err := known.Check([]string{name}); err != nil {
			return fieldError(fmt.Sprintf("%s[%d]", path, i), err.Error())
		}
	}
	return nil
}

func classList() string {
	s := make([]string, len(Classes))
	for i, c := range Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// normalize parses the quota and fills in default algorithm parameters.
func (p Policy) normalize(algs Algorithms) (Policy, error) {
	algs = algs.orBuiltin()
	p = p.Clone()
	if p.Memory.Quota != "" {
		n, err := ParseSize(p.Memory.Quota)
		if err != nil {
			return p, fmt.Errorf("memory.quota: %w", err)
		}
		p.Memory.QuotaBytes = n
	}
	p.Memory.Eviction = p.Memory.Eviction.withDefaults(algs.Eviction)
	p.Memory.Prefetch = p.Memory.Prefetch.withDefaults(algs.Prefetch)
	return p, nil
}

// Clone returns a deep copy of p.
func (p Policy) Clone() Policy {
	p.Memory.Eviction.Params = cloneParams(p.Memory.Eviction.Params)
	p.Memory.Prefetch.Params = cloneParams(p.Memory.Prefetch.Params)
	p.Probes = slices.Clone(p.Probes)
	p.Requires = slices.Clone(p.Requires)
	return p
}

func cloneParams(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Summary is a one-line description for the CLI and logs, e.g.
// "class=latency-critical quota=8GiB evict=lru prefetch=tree-threshold(threshold=51) timeslice=1ms".
func (p Policy) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "class=%s", p.Priority.Class)
	switch {
	case p.Memory.QuotaBytes > 0:
		fmt.Fprintf(&b, " quota=%s", FormatSize(p.Memory.QuotaBytes))
	case slices.Contains(p.Requires, KeyQuota):
		fmt.Fprintf(&b, " quota=<%s>", KeyQuota)
	default:
		b.WriteString(" quota=unlimited")
	}
	fmt.Fprintf(&b, " evict=%s prefetch=%s", algoSummary(p.Memory.Eviction), algoSummary(p.Memory.Prefetch))
	if us := p.Priority.TimesliceUS; us > 0 {
		fmt.Fprintf(&b, " timeslice=%s", formatMicros(us))
	}
	if p.Priority.Interleave > 0 {
		fmt.Fprintf(&b, " interleave=%d", p.Priority.Interleave)
	}
	if w := p.Priority.ActiveWindowUS; w > 0 {
		fmt.Fprintf(&b, " active-window=%s", time.Duration(w)*time.Microsecond)
	}
	if sm := p.Priority.EffectiveSMPercent(); sm > 0 {
		fmt.Fprintf(&b, " sm=%d%%", sm)
	}
	if mp := p.Priority.EffectiveMPSClientPriority(); mp > 0 {
		fmt.Fprintf(&b, " mps-priority=%d", mp)
	}
	if p.Priority.EffectiveLaunchGate() {
		b.WriteString(" launch-gate")
	}
	if lt := p.Priority.LatencyTarget; lt != "" && p.Priority.Class == LatencyCritical {
		if strings.HasSuffix(lt, "x") { // relative: every percentile within lt of alone
			fmt.Fprintf(&b, " latency-target=%s-of-alone", lt)
		} else {
			fmt.Fprintf(&b, " latency-target=p99<=%s", lt)
		}
	}
	if len(p.Probes) > 0 {
		fmt.Fprintf(&b, " probes=%s", strings.Join(p.Probes, ","))
	}
	return b.String()
}

func algoSummary(a Algorithm) string {
	s := a.String()
	if name, params, ok := strings.Cut(s, ":"); ok {
		return name + "(" + params + ")"
	}
	return s
}

func formatMicros(us uint32) string {
	switch {
	case us%1_000_000 == 0:
		return strconv.FormatUint(uint64(us/1_000_000), 10) + "s"
	case us%1000 == 0:
		return strconv.FormatUint(uint64(us/1000), 10) + "ms"
	}
	return strconv.FormatUint(uint64(us), 10) + "us"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
