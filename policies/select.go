package policies

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Domain is the key domain of gpuext labels and annotations.
const Domain = "gpuext.io"

// The keys of the selection grammar (README.md). Each may also be written
// KEY/pod and KEY/container.NAME.
const (
	KeyPolicy     = "policy." + Domain
	KeyQuota      = "quota." + Domain
	KeyPriority   = "priority." + Domain
	KeyEviction   = "eviction." + Domain
	KeyPrefetch   = "prefetch." + Domain
	KeyTimeslice  = "timeslice." + Domain
	KeyInterleave = "interleave." + Domain
	KeyProbes     = "probes." + Domain
	// KeyProbeKernels limits the container's probes to some kernels
	// (.entry names, mangled); see Selection.ProbeKernels.
	KeyProbeKernels = "probe-kernels." + Domain
	KeyTenant       = "tenant." + Domain
)

// overrideKeys are the keys that change one setting of the selected policy.
var overrideKeys = []string{KeyQuota, KeyPriority, KeyEviction, KeyPrefetch, KeyTimeslice, KeyInterleave, KeyProbes, KeyProbeKernels, KeyTenant}

// Keys lists every key of the grammar.
var Keys = append([]string{KeyPolicy}, overrideKeys...)

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
	// MaxHintKey is the longest unknown key that gets a "did you mean"
	// hint (the edit distance takes time by the square of the length).
	MaxHintKey = 128
)

// parseKey splits a key of the gpuext.io domain into its base key and scope.
// ours is false for keys of other domains. scope is "", "pod" or
// "container.NAME". A key that only looks like one of the domain (foldKey:
// Cyrillic or fullwidth letters, invisible or control characters, a
// trailing dot, upper case) is ours and an error naming the key it looks like: ignoring it would
// silently drop the user's request.
func parseKey(key string) (base, scope string, ours bool, err error) {
	prefix, scope, slash := strings.Cut(key, "/")
	folded, fscope, _ := strings.Cut(foldKey(key), "/")
	folded = strings.TrimRight(folded, ".")
	if folded != Domain && !strings.HasSuffix(folded, "."+Domain) {
		return "", "", false, nil
	}
	unknown := func(why string) error { return &kindError{msg: why, kind: ErrUnknownKey} }
	if !slices.Contains(Keys, prefix) {
		if slices.Contains(Keys, folded) {
			return "", "", true, unknown(fmt.Sprintf("unknown key %s: it looks like %s but is not (%s); write %s",
				quote(prefix), folded, lookalikeWhy(prefix), folded))
		}
		return "", "", true, unknown(fmt.Sprintf("unknown key %s%s (known: %s)", keyText(prefix), keyHint(folded), strings.Join(Keys, ", ")))
	}
	name, isContainer := strings.CutPrefix(scope, "container.")
	switch {
	case !slash:
	case scope == "pod":
	case isContainer && name != "" && !strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '/' }):
	case isContainer && name != "" && !strings.Contains(name, "/"):
		return "", "", true, unknown(fmt.Sprintf("container name %s in %s has characters no container name has (%s)",
			quote(name), keyText(key), lookalikeWhy(name)))
	default:
		hint := ""
		if fscope == "pod" || strings.HasPrefix(fscope, "container.") {
			hint = fmt.Sprintf(": it looks like /%s but is not (%s)", keyText(fscope), lookalikeWhy(scope))
		}
		return "", "", true, unknown(fmt.Sprintf("unknown key suffix %s%s (want %s, %s/pod or %s/container.NAME)", quote("/"+scope), hint, prefix, prefix, prefix))
	}
	return prefix, scope, true, nil
}

func keyHint(k string) string {
	if len(k) > MaxHintKey {
		return ""
	}
	for _, known := range Keys {
		if editDistance(k, known) <= 2 {
			return fmt.Sprintf(", did you mean %q?", known)
		}
	}
	return ""
}

// foldKey maps what looks like an ASCII key to that key, by hand (the
// NFKC-and-confusables idea, for the letters a key can have): fullwidth
// forms to ASCII, Cyrillic, Greek and other letters that look Latin to
// their Latin twins, other dots and slashes to '.' and '/'; it drops
// invisible characters (zero-width, bidi marks, soft hyphen, byte order
// mark: Unicode's format class), ASCII control characters (a NUL, where a
// C reader would end the key) and white space, and lower-cases.
func foldKey(k string) string {
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		switch {
		case r < ' ' || r == 0x7f: // NUL and the other ASCII controls: invisible too
			continue
		case r < utf8.RuneSelf:
		case r >= 0xFF01 && r <= 0xFF5E: // fullwidth ASCII
			r -= 0xFF01 - '!'
		case unicode.Is(unicode.Cf, r) || unicode.IsSpace(r):
			continue
		default:
			if l, ok := lookalikes[r]; ok {
				r = l
			}
		}
		if unicode.IsSpace(r) {
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// lookalikes are letters and marks that look like the ASCII ones of a key.
var lookalikes = map[rune]rune{
	// Cyrillic
	'а': 'a', 'в': 'b', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k',
	'ӏ': 'l', 'м': 'm', 'н': 'h', 'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'ц': 'u', 'ѵ': 'v',
	'ԝ': 'w', 'х': 'x', 'у': 'y', 'ү': 'y',
	'А': 'A', 'В': 'B', 'С': 'C', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ј': 'J', 'К': 'K', 'М': 'M', 'О': 'O', 'Р': 'P',
	'Ѕ': 'S', 'Т': 'T', 'Х': 'X', 'У': 'Y', 'Ԛ': 'Q', 'Ԝ': 'W',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u',
	'χ': 'x', 'γ': 'y', 'ϲ': 'c', 'ϳ': 'j',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O', 'Ρ': 'P',
	'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
	// Latin variants
	'ı': 'i', 'ȷ': 'j', 'ſ': 's', 'ɑ': 'a', 'ɡ': 'g', 'ℓ': 'l', 'ⅰ': 'i', 'ⅼ': 'l', 'ⅽ': 'c', 'ⅾ': 'd', 'ⅿ': 'm',
	// dots, hyphens and slashes
	'。': '.', '｡': '.', '․': '.', '﹒': '.', '·': '.', '‐': '-', '‑': '-', '‒': '-', '–': '-', '−': '-', '﹣': '-',
	'∕': '/', '⁄': '/', '／': '/', '⧸': '/',
}

// lookalikeWhy says how a key differs from the ASCII one it looks like.
func lookalikeWhy(k string) string {
	var why []string
	if strings.ContainsFunc(k, func(r rune) bool { return unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) }) {
		why = append(why, "invisible characters or spaces")
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		why = append(why, "control characters")
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r >= utf8.RuneSelf && !unicode.Is(unicode.Cf, r) && !unicode.IsSpace(r) }) {
		why = append(why, "non-ASCII letters")
	}
	if strings.HasSuffix(strings.TrimRightFunc(k, func(r rune) bool { return unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) }), ".") {
		why = append(why, "a trailing dot")
	}
	if strings.ContainsFunc(k, unicode.IsUpper) {
		why = append(why, "upper case")
	}
	if len(why) == 0 {
		return "other characters"
	}
	return strings.Join(why, ", ")
}

// settings resolves, for every base key, the key that applies to the
// request's container: KEY/container.NAME > KEY/pod > KEY, and for one form
// container annotations > container labels > pod annotations > pod labels.
// A malformed gpuext.io key anywhere is an error.
func (r Request) settings() (map[string]setting, error) {
	out := map[string]setting{}
	for si, src := range r.sources() {
		for _, key := range sortedKeys(src.kv) {
			base, scope, ours, err := parseKey(key)
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
