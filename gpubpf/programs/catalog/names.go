package catalog

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The entries themselves; gpubpf/programs embeds them again with the
// objects they name and checks that each entry's name is its file's.
//
//go:embed *.json
var entries embed.FS

// ErrUnknownProbe: a device probe name the catalog does not hold.
var ErrUnknownProbe = errors.New("unknown probe")

// NameRE is what a device probe's name looks like: in a catalog entry, in a
// probe directory, in a policy and in probes.gpuext.io.
var NameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

var names = sync.OnceValue(func() []string {
	list, err := fs.ReadDir(entries, ".")
	if err != nil {
		panic("catalog: embedded entries: " + err.Error())
	}
	var out []string
	for _, e := range list {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
})

// Names returns the names of the device probes gpuext ships, sorted: the
// file names of their entries.
func Names() []string { return slices.Clone(names()) }

// Check returns an error wrapping ErrUnknownProbe, naming the probe and
// the known ones, for the first of names that known (sorted) does not hold.
func Check(known, names []string) error {
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("%w %q (known: %s)", ErrUnknownProbe, n, strings.Join(known, ", "))
		}
	}
	return nil
}
