package compile

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// verify checks one probe's collection (from object, the ELF file's name)
// before it is translated. A rejection keeps the verifier's
// *verifier.Error (program, instruction, file:line) in the chain; an
// object with no program at a device attach point is
// verifier.ErrNoPrograms, naming the file.
func verify(probeName, object string, spec *ebpf.CollectionSpec) (*verifier.Report, error) {
	rep, err := verifier.VerifyCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("probe %q (%s) rejected by the verifier: %w", probeName, object, err)
	}
	return rep, nil
}
