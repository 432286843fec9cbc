package policies

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
)

// Constraints say who may ask for what (README.md, "Admin constraints"). A
// nil *Constraints allows everything.
type Constraints struct {
	Rules []Rule `json:"rules,omitempty"`
	// DefaultMaxQuota is the largest quota a request may set without a rule;
	// "" or "0" = no limit.
	DefaultMaxQuota string `json:"defaultMaxQuota,omitempty"`
	// RestrictedClasses may be used only where a rule allows them.
	RestrictedClasses []PriorityClass `json:"restrictedClasses,omitempty"`
	// RestrictedProbes are device probes (built in or from the host's
	// probe directory) that may be selected only where a rule allows them.
	RestrictedProbes []string `json:"restrictedProbes,omitempty"`

	defaultMax uint64
}

// Rule grants the requests it matches restricted classes and larger quotas.
type Rule struct {
	// Namespaces are path.Match globs over the pod namespace ("" for Docker
	// and plain runc containers); empty = every namespace.
	Namespaces []string `json:"namespaces,omitempty"`
	// Labels must all equal a container label or a pod label of the request.
	Labels map[string]string `json:"labels,omitempty"`
	// AllowClasses are the restricted classes this rule grants.
	AllowClasses []PriorityClass `json:"allowClasses,omitempty"`
	// AllowProbes are the restricted probes this rule grants.
	AllowProbes []string `json:"allowProbes,omitempty"`
	// MaxQuota is the largest quota this rule grants; "" = none above the
	// default, "0" = any.
	MaxQuota string `json:"maxQuota,omitempty"`

	maxQuota    uint64
	hasMaxQuota bool
}

// ParseConstraints decodes a constraints document strictly (unknown fields
// are errors naming the field path) and validates it.
func ParseConstraints(data []byte) (*Constraints, error) {
	var c Constraints
	if err := decodeStrict(data, &c); err != nil {
		return nil, fmt.Errorf("constraints: %w", err)
	}
	if err := c.init(); err != nil {
		return nil, fmt.Errorf("constraints: %w", err)
	}
	return &c, nil
}

// LoadConstraints reads and parses a constraints file; errors name the file.
func LoadConstraints(file string) (*Constraints, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("constraints: %w", err)
	}
	c, err := ParseConstraints(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

func (c *Constraints) init() error {
	if c.DefaultMaxQuota != "" {
		n, err := ParseSize(c.DefaultMaxQuota)
		if err != nil {
			return fmt.Errorf("defaultMaxQuota: %w", err)
		}
		c.defaultMax = n
	}
	if err := validateClasses(c.RestrictedClasses, "restrictedClasses"); err != nil {
		return err
	}
	if err := validateProbeNames(c.RestrictedProbes, "restrictedProbes"); err != nil {
		return err
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		field := fmt.Sprintf("rules[%d]", i)
		for j, ns := range r.Namespaces {
			if _, err := path.Match(ns, ""); err != nil {
				return fieldError(fmt.Sprintf("%s.namespaces[%d]", field, j), fmt.Sprintf("bad glob %q: %v", ns, err))
			}
		}
		if err := validateClasses(r.AllowClasses, field+".allowClasses"); err != nil {
			return err
		}
		if err := validateProbeNames(r.AllowProbes, field+".allowProbes"); err != nil {
			return err
		}
		if r.MaxQuota != "" {
			n, err := ParseSize(r.MaxQuota)
			if err != nil {
				return fmt.Errorf("%s.maxQuota: %w", field, err)
			}
			r.maxQuota, r.hasMaxQuota = n, true
		}
	}
	return nil
}

func validateClasses(classes []PriorityClass, field string) error {
	for i, cl := range classes {
		if !cl.Valid() {
			return fieldError(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("unknown priority class %q (want one of: %s)", cl, classList()))
		}
	}
	return nil
}

// validateProbeNames checks the form of probe names only: a constraints
// file may name a probe-directory probe this host does not have (yet).
func validateProbeNames(names []string, field string) error {
	for i, n := range names {
		if !probeNameRE.MatchString(n) {
			return fieldError(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("probe name %q must match %s", n, probeNameRE))
		}
	}
	return nil
}

// matches reports whether the rule applies to req.
func (r *Rule) matches(req Request) bool {
	if len(r.Namespaces) > 0 && !slices.ContainsFunc(r.Namespaces, func(glob string) bool {
		ok, _ := path.Match(glob, req.PodNamespace)
		return ok
	}) {
		return false
	}
	for k, v := range r.Labels {
		if cv, ok := req.Labels[k]; !(ok && cv == v) {
			if pv, ok := req.PodLabels[k]; !(ok && pv == v) {
				return false
			}
		}
	}
	return true
}

func (r *Rule) grantsQuota(q uint64) bool {
	return r.hasMaxQuota && (r.maxQuota == 0 || q <= r.maxQuota)
}

// Check returns nil when the constraints allow the selection, or a *KeyError
// wrapping ErrForbidden that names the key that asked for the refused
// setting (the override key, else the policy key).
func (c *Constraints) Check(req Request, sel Selection) error {
	if c == nil {
		return nil
	}
	policyKey := sel.Sources[KeyPolicy]
	if policyKey == "" {
		policyKey = KeyPolicy
	}
	refuse := func(base, value, what string) error {
		key := sel.Sources[base]
		if key == "" {
			key, value = policyKey, sel.Policy.Name
		}
		return &KeyError{Key: key, Value: value, Err: &kindError{kind: ErrForbidden,
			msg: fmt.Sprintf("forbidden: %s, and no constraint rule grants it to namespace %q%s", what, req.PodNamespace, podName(req))}}
	}
	class := sel.Policy.Priority.Class
	if slices.Contains(c.RestrictedClasses, class) && !slices.ContainsFunc(c.Rules, func(r Rule) bool {
		return r.matches(req) && slices.Contains(r.AllowClasses, class)
	}) {
		return refuse(KeyPriority, string(class), fmt.Sprintf("priority class %q is restricted", class))
	}
	for _, p := range sel.Policy.Probes {
		if slices.Contains(c.RestrictedProbes, p) && !slices.ContainsFunc(c.Rules, func(r Rule) bool {
			return r.matches(req) && slices.Contains(r.AllowProbes, p)
		}) {
			return refuse(KeyProbes, strings.Join(sel.Policy.Probes, ","), fmt.Sprintf("device probe %q is restricted", p))
		}
	}
	if q := sel.Policy.Memory.QuotaBytes; c.defaultMax > 0 && q > c.defaultMax && !slices.ContainsFunc(c.Rules, func(r Rule) bool {
		return r.matches(req) && r.grantsQuota(q)
	}) {
		return refuse(KeyQuota, sel.Policy.Memory.Quota, fmt.Sprintf("quota %s is above the default maximum %s", FormatSize(q), FormatSize(c.defaultMax)))
	}
	return nil
}

func podName(req Request) string {
	if req.PodName == "" {
		return ""
	}
	return fmt.Sprintf(" (pod %q)", req.PodName)
}
