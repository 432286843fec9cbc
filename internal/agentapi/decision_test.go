package agentapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// One record: the annotation and the API's answer spell a decision's
// fields the same way, and each reads back what the other wrote.
func TestDecisionOneRecord(t *testing.T) {
	d := Decision{Tenant: 3, TenantKey: "oci/ctr/c1", Policy: "batch", ConfigDigest: "ab12", FailedOpen: true, MAC: "mac"}
	ann := d.Encode()
	if ann != `{"tenant":3,"tenantKey":"oci/ctr/c1","policy":"batch","configDigest":"ab12","failedOpen":true,"mac":"mac"}` {
		t.Fatalf("annotation %s", ann)
	}
	wire, err := json.Marshal(Answer{Decision: d, Injection: Injection{Env: []EnvVar{{"A", "1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(wire), strings.TrimSuffix(ann, "}")+",") {
		t.Fatalf("the answer %s does not start with the annotation's record %s", wire, ann)
	}
	var back Answer
	if err := json.Unmarshal(wire, &back); err != nil || back.Decision != d {
		t.Fatalf("answer read back: %+v, %v", back.Decision, err)
	}
	got, ok, err := DecodeAnnotation(map[string]string{AnnotationDecision: ann})
	if err != nil || !ok || got != d {
		t.Fatalf("annotation read back: %+v %v %v", got, ok, err)
	}
	if _, ok, err := DecodeAnnotation(map[string]string{"other": ann}); ok || err != nil {
		t.Fatalf("no annotation: %v %v", ok, err)
	}
}

// The annotation is written by whoever creates the container: bounded,
// strict, and never more than one record.
func TestDecodeAnnotationHostile(t *testing.T) {
	for _, tc := range []struct{ name, v, want string }{
		{"too long", `{"tenant":3,"tenantKey":"` + strings.Repeat("k", MaxDecisionSize) + `","configDigest":"d"}`, "bytes, at most 1024"},
		{"unknown field", `{"tenant":3,"tenantKey":"k","configDigest":"d","injection":{}}`, `unknown field "injection"`},
		{"two records", `{"tenant":3,"tenantKey":"k","configDigest":"d"}{"skipped":true}`, "data after the record"},
		{"not JSON", `skipped`, "annotation gpuext.io/decision"},
		{"missing fields", `{"tenant":3}`, "tenant, tenantKey and configDigest are required"},
		{"wrong type", `{"tenant":"3","tenantKey":"k","configDigest":"d"}`, "cannot unmarshal"},
	} {
		_, ok, err := DecodeAnnotation(map[string]string{AnnotationDecision: tc.v})
		if !ok || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ok %v err %v, want an error saying %q", tc.name, ok, err, tc.want)
		}
	}
	if d, ok, err := DecodeAnnotation(map[string]string{AnnotationDecision: `{"skipped":true,"failedOpen":true}`}); err != nil || !ok || !d.Skipped {
		t.Errorf("a skipped record: %+v %v %v", d, ok, err)
	}
}
