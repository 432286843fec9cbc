package grammar

import (
	"errors"
	"testing"
)

// IsKey is ParseKey's "ours": a key that only looks like a gpuext.io key
// is one (and ParseKey's error names it), another domain's is not.
func TestIsKey(t *testing.T) {
	for key, want := range map[string]bool{
		"policy.gpuext.io":                 true,
		"quota.gpuext.io/container.web":    true,
		"p\u043elicy.gpuext.io":            true, // Cyrillic o
		"POLICY.GPUEXT.IO":                 true,
		"policy.gpuext.io\u200b":           true, // zero-width space
		"policy.gpuext.io.":                true,
		"\uff50olicy.gpuext.io":            true, // fullwidth p
		"gpuext.io":                        true,
		"io.gpuext.oci.container-name":     false,
		"example.com/policy.gpuext.io":     false,
		"policy.gpuext.io.example.com":     false,
		"io.kubernetes.cri.container-name": false,
	} {
		if got := IsKey(key); got != want {
			t.Errorf("IsKey(%q) = %v, want %v", key, got, want)
		}
		_, _, ours, err := ParseKey(key)
		if ours != want {
			t.Errorf("ParseKey(%q): ours %v, want %v", key, ours, want)
		}
		if exact := key == "policy.gpuext.io" || key == "quota.gpuext.io/container.web"; want && !exact && !errors.Is(err, ErrUnknownKey) {
			t.Errorf("ParseKey(%q): err %v, want an unknown-key error", key, err)
		}
	}
}
