package compile

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/devrt/probe/verifier"
)

// verify checks one probe's collection before it is translated. A
// rejection keeps the verifier's *verifier.Error (program, instruction,
// file:line) in the chain.
func verify(probeName string, spec *ebpf.CollectionSpec) error {
	if _, err := verifier.VerifyCollection(spec); err != nil {
		return fmt.Errorf("probe %q rejected by the verifier: %w", probeName, err)
	}
	return nil
}
