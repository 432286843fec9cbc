package policies

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuext/gpuext/policies/grammar"
)

// The key domain and the keys of the selection grammar are package
// grammar's (README.md); each may also be written KEY/pod and
// KEY/container.NAME.
const (
	Domain        = grammar.Domain
	KeyPolicy     = grammar.KeyPolicy
	KeyQuota      = grammar.KeyQuota
	KeyPriority   = grammar.KeyPriority
	KeyEviction   = grammar.KeyEviction
	KeyPrefetch   = grammar.KeyPrefetch
	KeyTimeslice  = grammar.KeyTimeslice
	KeyInterleave = grammar.KeyInterleave
	KeyProbes     = grammar.KeyProbes
	// KeyProbeKernels limits the container's probes to some kernels
	// (.entry names, mangled); see Selection.ProbeKernels.
	KeyProbeKernels = grammar.KeyProbeKernels
	KeyTenant       = grammar.KeyTenant
)

// overrideKeys are the keys that change one setting of the selected policy.
var overrideKeys = grammar.OverrideKeys

// Keys lists every key of the grammar.
var Keys = grammar.Keys

// Tenant groupings (tenant.gpuext.io).
const (
	TenantContainer = "container" // the container's cgroup is its own tenant
	TenantPod       = "pod"       // all containers of the pod share one tenant
)

// Selection is the outcome of Catalog.Select.
type Selection struct {
	// Policy is the effective policy: the catalog policy with the request's
	// overrides applied and validated. Its Name is the catalog name.
	Policy Policy
	// Tenant is TenantContainer or TenantPod.
	Tenant string
	// ProbeKernels (probe-kernels.gpuext.io) are the kernels (.entry names,
	// mangled) that the container's probes are limited to; nil = no limit
	// of the container's own. Set only when Policy.Probes is not empty.
	// Compiling narrows the probes' catalog kernels with it (admission).
	ProbeKernels []string
	// Sources maps each base key that the request set (e.g. "quota.gpuext.io")
	// to the key as written that won (e.g. "quota.gpuext.io/container.web").
	Sources map[string]string
}

// source is one of the maps of a Request, in lookup order.
type source struct {
	name string
	kv   map[string]string
}

func (r Request) sources() []source {
	return []source{
		{"container annotation", r.Annotations},
		{"container label", r.Labels},
		{"pod annotation", r.PodAnnotations},
		{"pod label", r.PodLabels},
	}
}

// setting is the winning key of one base key.
type setting struct {
	key, value string
	rank       int // scope*4 + source index; lower wins
}

// Limits of keys and values.
const (
	// MaxValueLength is the longest value of a gpuext key (64 probe-kernels
	// names of 512 bytes fit, with room for spaces).
	MaxValueLength = 64 << 10
)

// settings resolves, for every base key, the key that applies to the
// request's container: KEY/container.NAME > KEY/pod > KEY, and for one form
// container annotations > container labels > pod annotations > pod labels.
// A malformed gpuext.io key anywhere is an error.
func (r Request) settings() (map[string]setting, error) {
	out := map[string]setting{}
	for si, src := range r.sources() {
		for _, key := range sortedKeys(src.kv) {
			base, scope, ours, err := grammar.ParseKey(key)
			if !ours {
				continue
			}
			if err != nil {
				return nil, &KeyError{Key: key, Value: src.kv[key], Err: err}
			}
			var rank int
			switch scope {
			case "container." + r.ContainerName:
				rank = 0
			case "pod":
				rank = 1
			case "":
				rank = 2
			default: // another container's key
				continue
			}
			if v := src.kv[key]; len(v) > MaxValueLength {
				return nil, &KeyError{Key: key, Value: v, Err: badValue(fmt.Sprintf("the value is %d bytes, at most %d", len(v), MaxValueLength))}
			}
			rank = rank*4 + si
			if cur, ok := out[base]; !ok || rank < cur.rank {
				out[base] = setting{key: key, value: src.kv[key], rank: rank}
			}
		}
	}
	return out, nil
}

// Select returns the effective policy for the request (README.md). Errors are
// *KeyError naming the key as written.
func (c *Catalog) Select(req Request) (Selection, error) {
	set, err := req.settings()
	if err != nil {
		return Selection{}, err
	}
	sel := Selection{Tenant: TenantContainer, Sources: map[string]string{}}
	name := DefaultPolicy
	if s, ok := set[KeyPolicy]; ok {
		name = s.value
		sel.Sources[KeyPolicy] = s.key
	}
	p, ok := c.Get(name)
	if !ok {
		if name == DefaultPolicy {
			p = c.Default()
		} else {
			return Selection{}, &KeyError{Key: set[KeyPolicy].key, Value: name,
				Err: &kindError{msg: fmt.Sprintf("unknown policy %s (known: %s)", quote(name), c.namesList()), kind: ErrUnknownPolicy}}
		}
	}
	policyKey := set[KeyPolicy].key
	if policyKey == "" {
		policyKey = KeyPolicy
	}
	for _, k := range p.Requires {
		if _, ok := set[k]; !ok {
			return Selection{}, &KeyError{Key: k, Err: &kindError{kind: ErrMissingParam,
				msg: fmt.Sprintf("missing parameter: policy %q (selected by %s) needs %s", name, policyKey, k)}}
		}
	}
	for _, k := range overrideKeys {
		s, ok := set[k]
		if !ok {
			continue
		}
		if err := applyOverride(&p, &sel, c.Algorithms(), k, s.value); err != nil {
			return Selection{}, &KeyError{Key: s.key, Value: s.value, Err: err}
		}
		sel.Sources[k] = s.key
	}
	if len(sel.ProbeKernels) > 0 && len(p.Probes) == 0 {
		k := sel.Sources[KeyProbeKernels]
		why := fmt.Sprintf("policy %q selects no device probes", name)
		if pk := sel.Sources[KeyProbes]; pk != "" {
			why = fmt.Sprintf("%s selects none", pk)
		}
		return Selection{}, &KeyError{Key: k, Value: rawValue(set, k),
			Err: badValue(fmt.Sprintf("kernels to probe need device probes (%s): %s", KeyProbes, why))}
	}
	if p.Memory.Eviction.Name == "tenant-quota" && p.Memory.QuotaBytes == 0 {
		k := firstOf(sel.Sources, KeyQuota, KeyEviction)
		if k == "" {
			k = policyKey
		}
		return Selection{}, &KeyError{Key: k, Value: rawValue(set, k),
			Err: badValue(`"tenant-quota" eviction needs a non-zero quota (` + KeyQuota + `)`)}
	}
	if err := p.ValidateWith(c.Algorithms()); err != nil { // overrides are checked above; this is a backstop
		return Selection{}, &KeyError{Key: policyKey, Value: name, Err: err}
	}
	sel.Policy = p
	return sel, nil
}

func firstOf(m map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := m[k]; v != "" {
			return v
		}
	}
	return ""
}

func rawValue(set map[string]setting, key string) string {
	for _, s := range set {
		if s.key == key {
			return s.value
		}
	}
	return ""
}

// applyOverride applies one override key to p (or sel). Errors wrap a sentinel.
func applyOverride(p *Policy, sel *Selection, algs Algorithms, key, value string) error {
	switch key {
	case KeyQuota:
		n, err := ParseSize(value)
		if err != nil {
			return err
		}
		p.Memory.Quota, p.Memory.QuotaBytes = value, n
	case KeyPriority:
		if !PriorityClass(value).Valid() {
			return badValue(fmt.Sprintf("unknown priority class %s (want one of: %s)", quote(value), classList()))
		}
		p.Priority.Class = PriorityClass(value)
	case KeyEviction, KeyPrefetch:
		a, err := ParseAlgorithm(value)
		if err != nil {
			return err
		}
		specs, kind, field := algs.Eviction, "eviction", &p.Memory.Eviction
		if key == KeyPrefetch {
			specs, kind, field = algs.Prefetch, "prefetch", &p.Memory.Prefetch
		}
		if err := validateAlgorithm(a, specs, kind, kind); err != nil {
			return err
		}
		*field = a.withDefaults(specs)
	case KeyTimeslice:
		d, err := time.ParseDuration(value)
		if err != nil {
			why := ""
			if len(value) <= MaxQuoted { // time's error quotes the whole value
				why = ": " + err.Error()
			}
			return badValue("want a duration such as 2ms or 500us" + why)
		}
		if d <= 0 || d > MaxTimeslice || d%time.Microsecond != 0 {
			return badValue(fmt.Sprintf("timeslice %s must be whole microseconds, above 0 and at most %s", d, MaxTimeslice))
		}
		p.Priority.TimesliceUS = uint32(d.Microseconds())
	case KeyInterleave:
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil || n < MinInterleave || n > MaxInterleave {
			return badValue(fmt.Sprintf("want an integer %d..%d", MinInterleave, MaxInterleave))
		}
		p.Priority.Interleave = uint32(n)
	case KeyProbes:
		var probes []string
		if n := strings.Count(value, ",") + 1; n > MaxProbes {
			return badValue(fmt.Sprintf("%d probes, at most %d", n, MaxProbes))
		}
		if value != "" {
			probes = strings.Split(value, ",")
			for i := range probes {
				probes[i] = strings.TrimSpace(probes[i])
			}
		}
		if err := validateProbes(probes, "probes", algs.orBuiltin().Probes); err != nil {
			return err
		}
		p.Probes = probes
	case KeyProbeKernels:
		kernels, err := ParseProbeKernels(value)
		if err != nil {
			return err
		}
		sel.ProbeKernels = kernels
	case KeyTenant:
		if value != TenantContainer && value != TenantPod {
			return badValue(fmt.Sprintf("want %q or %q", TenantContainer, TenantPod))
		}
		sel.Tenant = value
	}
	return nil
}

// Limits of probe-kernels.gpuext.io.
const (
	MaxProbeKernels      = 64
	MaxProbeKernelLength = 512 // bytes
)

// ParseProbeKernels parses a probe-kernels.gpuext.io value: kernel (.entry)
// names, mangled, separated by commas (spaces around a name are dropped).
// Each must be a PTX identifier (letters, digits, _, $ and ., not starting
// with a digit); "" is no list (nil). Errors wrap ErrBadValue.
func ParseProbeKernels(value string) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	if n := strings.Count(value, ",") + 1; n > MaxProbeKernels { // counted before a split of a long value
		return nil, badValue(fmt.Sprintf("%d kernels, at most %d", n, MaxProbeKernels))
	}
	kernels := strings.Split(value, ",")
	for i := range kernels {
		k := strings.TrimSpace(kernels[i])
		kernels[i] = k
		switch {
		case k == "":
			return nil, badValue(fmt.Sprintf("kernel %d of %d is empty", i+1, len(kernels)))
		case len(k) > MaxProbeKernelLength:
			return nil, badValue(fmt.Sprintf("kernel %d is %d bytes long, at most %d", i+1, len(k), MaxProbeKernelLength))
		case !ptxIdentRE.MatchString(k):
			return nil, badValue(fmt.Sprintf("kernel name %s is not a PTX identifier (letters, digits, _, $ and ., not starting with a digit)", quote(k)))
		case slices.Contains(kernels[:i], k):
			return nil, badValue(fmt.Sprintf("kernel %s listed twice", quote(k)))
		}
	}
	return kernels, nil
}
