package bpf

import (
	"hash/fnv"
	"testing"
)

// The id is FNV-1a 32 of the ops name with the top bit set: the core (C)
// computes it from the header's constants, so check them against Go's fnv.
func TestNamedPolicyID(t *testing.T) {
	for _, ops := range []string{"two_queue", "seq_adapt", "a", "lru"} {
		h := fnv.New32a()
		h.Write([]byte(ops))
		want := h.Sum32() | 1<<31
		if got := NamedPolicyID(ops); got != want {
			t.Errorf("NamedPolicyID(%q) = %#x, want %#x", ops, got, want)
		}
	}
	if NamedPolicyID("two_queue") == NamedPolicyID("two_queuf") {
		t.Errorf("neighbouring names share an id")
	}
	if OpsName("two-queue") != "two_queue" {
		t.Errorf("OpsName(two-queue) = %q", OpsName("two-queue"))
	}
}
