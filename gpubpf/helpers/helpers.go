package helpers

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// The pattern matches helpers.cu (always there) and helpers.ptx (once built),
// so the package builds before the first nvcc run.
//
//go:embed helpers.*
var files embed.FS

// PTXFile is the embedded build output of build.sh.
const PTXFile = "helpers.ptx"

// ErrNotBuilt is returned while helpers.ptx has not been built and committed.
var ErrNotBuilt = errors.New("helper library not built: run gpubpf/helpers/build.sh (nvcc) and commit helpers.ptx")

// Functions are the helper functions the library must define, each as a
// .visible .func with 64-bit parameters and a 64-bit return.
var Functions = []string{
	abi.FuncMapLookup,
	abi.FuncMapUpdate,
	abi.FuncMapDelete,
	abi.FuncRingbufOut,
}

// Library is the helper library as a module fragment.
type Library struct {
	// PTX is helpers.ptx without its .version, .target and .address_size
	// lines: what goes into a probe module after the module's own header.
	PTX string
	// Version is the PTX ISA version helpers.ptx declares, e.g. "7.8".
	Version string
	// Target is the sm_NN of helpers.ptx's .target, e.g. 70.
	Target int
}

// PTX returns the embedded helper library, or ErrNotBuilt.
func PTX() (Library, error) {
	b, err := files.ReadFile(PTXFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Library{}, ErrNotBuilt
	}
	if err != nil {
		return Library{}, fmt.Errorf("read %s: %w", PTXFile, err)
	}
	return Parse(string(b))
}

// Parse splits a PTX text of the helper library into its header (.version,
// .target) and the fragment, and checks that every helper function is
// defined as a .visible .func.
func Parse(text string) (Library, error) {
	var lib Library
	var body strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			body.WriteString(line)
			continue
		}
		switch f[0] {
		case ".version":
			if len(f) < 2 {
				return Library{}, fmt.Errorf("helper library: .version without a number")
			}
			lib.Version = f[1]
			continue
		case ".target":
			if len(f) < 2 {
				return Library{}, fmt.Errorf("helper library: .target without a target")
			}
			t, err := parseTarget(strings.TrimSuffix(f[1], ","))
			if err != nil {
				return Library{}, fmt.Errorf("helper library: .target %q: %w", f[1], err)
			}
			lib.Target = t
			continue
		case ".address_size":
			if len(f) < 2 || f[1] != "64" {
				return Library{}, fmt.Errorf("helper library: %q, want .address_size 64", strings.TrimSpace(line))
			}
			continue
		}
		body.WriteString(line)
	}
	if lib.Version == "" {
		return Library{}, errors.New("helper library: no .version line")
	}
	if lib.Target == 0 {
		return Library{}, errors.New("helper library: no .target line")
	}
	lib.PTX = body.String()
	for _, fn := range Functions {
		if !definesVisibleFunc(lib.PTX, fn) {
			return Library{}, fmt.Errorf("helper library: no .visible .func %s", fn)
		}
	}
	return lib, nil
}

func parseTarget(s string) (int, error) {
	d, ok := strings.CutPrefix(s, "sm_")
	if !ok {
		return 0, fmt.Errorf("not an sm_NN target")
	}
	d = strings.TrimRight(d, "abcdefghijklmnopqrstuvwxyz")
	n, err := strconv.Atoi(d)
	if err != nil {
		return 0, fmt.Errorf("not an sm_NN target: %w", err)
	}
	return n, nil
}

// definesVisibleFunc reports whether text has a line
// ".visible .func [(ret)] NAME(" that starts a definition of name.
func definesVisibleFunc(text, name string) bool {
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, ".visible") || !strings.Contains(l, ".func") {
			continue
		}
		if strings.Contains(l, " "+name+"(") || strings.HasSuffix(l, " "+name) {
			return true
		}
	}
	return false
}
