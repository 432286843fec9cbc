package programs

import (
	"testing"

	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// Every built-in probe is accepted by the device verifier: its side effects
// are leader-guarded or warp-uniform, its loops bounded, its map accesses
// checked.
func TestBuiltinProbesPassTheVerifier(t *testing.T) {
	c := Builtin()
	for _, name := range c.Names() {
		spec, err := c.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := verifier.VerifyCollection(spec)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		p, _ := c.Get(name)
		if len(rep.Programs) != len(p.Programs) {
			t.Errorf("%s: verifier saw %d programs, the catalog lists %d", name, len(rep.Programs), len(p.Programs))
		}
	}
}
