package policies

import (
	"errors"
	"strings"
	"testing"
)

func TestExampleConstraintsParse(t *testing.T) {
	c, err := LoadConstraints("examples/constraints.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 2 || c.defaultMax != 16<<30 || c.Rules[0].maxQuota != 64<<30 {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseConstraintsErrors(t *testing.T) {
	for body, want := range map[string]string{
		`{"rules":[{"namespaces":["prod"],"alowClasses":["latency-critical"]}]}`: `rules[0]: unknown field "alowClasses" (did you mean "allowClasses"?)`,
		`{"defaultMaxQuota":"16XB"}`:          `defaultMaxQuota: bad size "16XB"`,
		`{"restrictedClasses":["gold"]}`:      `restrictedClasses[0]: unknown priority class "gold"`,
		`{"rules":[{},{"namespaces":["["]}]}`: `rules[1].namespaces[0]: bad glob "["`,
		`{"rules":[{"maxQuota":"-1GiB"}]}`:    `rules[0].maxQuota: bad size "-1GiB": negative`,
		`{"rules":[{"labels":{"a":1}}]}`:      `rules.labels`,
		`{} {}`:                               `trailing data`,
	} {
		_, err := ParseConstraints([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConstraints(%s) = %v, want error containing %q", body, err, want)
		}
	}
}

func TestConstraintsCheck(t *testing.T) {
	cons, err := LoadConstraints("examples/constraints.json")
	if err != nil {
		t.Fatal(err)
	}
	cat := BuiltinCatalog()
	search := map[string]string{"team": "search"}
	for _, tc := range []struct {
		name    string
		cons    *Constraints
		req     Request
		key     string // "" = allowed
		msgPart string
	}{
		{"nil constraints allow all", nil, Request{PodNamespace: "dev", Labels: map[string]string{"priority.gpuext.io": "latency-critical"}}, "", ""},
		{"default policy allowed", cons, Request{PodNamespace: "dev"}, "", ""},
		{"latency-critical policy from a namespace that may not", cons,
			Request{PodNamespace: "dev", PodName: "p", PodLabels: search, PodAnnotations: map[string]string{"policy.gpuext.io": "latency-critical"}},
			"policy.gpuext.io", `namespace "dev"`},
		{"latency-critical class override refused", cons,
			Request{PodNamespace: "dev", ContainerName: "web", PodAnnotations: map[string]string{"priority.gpuext.io/container.web": "latency-critical"}},
			"priority.gpuext.io/container.web", `priority class "latency-critical" is restricted`},
		{"latency-critical allowed by glob and pod label", cons,
			Request{PodNamespace: "ml-ranking", PodLabels: search, PodAnnotations: map[string]string{"policy.gpuext.io": "latency-critical"}}, "", ""},
		{"latency-critical allowed by container label", cons,
			Request{PodNamespace: "prod", Labels: map[string]string{"team": "search", "priority.gpuext.io": "latency-critical"}}, "", ""},
		{"right namespace, wrong label", cons,
			Request{PodNamespace: "prod", Labels: map[string]string{"team": "ads", "priority.gpuext.io": "latency-critical"}},
			"priority.gpuext.io", `namespace "prod"`},
		{"docker has no namespace", cons, Request{Labels: map[string]string{"team": "search", "policy.gpuext.io": "latency-critical"}},
			"policy.gpuext.io", `namespace ""`},
		{"quota at the default max", cons, Request{PodNamespace: "dev", Labels: map[string]string{"quota.gpuext.io": "16GiB"}}, "", ""},
		{"quota above the default max", cons, Request{PodNamespace: "dev", Labels: map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "17GiB"}},
			"quota.gpuext.io", "above the default maximum 16GiB"},
		{"quota within a rule's max", cons, Request{PodNamespace: "prod", PodLabels: search, Labels: map[string]string{"quota.gpuext.io": "64GiB"}}, "", ""},
		{"quota above a rule's max", cons, Request{PodNamespace: "prod", PodLabels: search, Labels: map[string]string{"quota.gpuext.io": "65GiB"}},
			"quota.gpuext.io", "quota 65GiB"},
		{"rule with maxQuota 0 grants any quota", cons, Request{PodNamespace: "training", Labels: map[string]string{"quota.gpuext.io": "1TiB"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := cat.Select(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.cons.Check(tc.req, sel)
			if tc.key == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key || !errors.Is(err, ErrForbidden) {
				t.Fatalf("error %v: want a *KeyError for %q wrapping ErrForbidden", err, tc.key)
			}
			if !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.msgPart) {
				t.Errorf("error %q does not name %q and say %q", err, tc.key, tc.msgPart)
			}
		})
	}
}
