package policies

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
)

// DefaultPolicy is the name of the policy a container without gpuext keys gets.
const DefaultPolicy = "default"

//go:embed catalog/*.json
var builtinFS embed.FS

// Catalog is a set of named, validated policies. It is immutable: Merge
// returns a new catalog, Get and List return copies.
type Catalog struct {
	policies map[string]Policy
	// algs: the algorithms its policies and a request's overrides may name
	// (zero: the built-in ones).
	algs Algorithms
}

// BuiltinFiles returns the embedded catalog files (default.json, ...) so a
// CLI can show or copy them.
func BuiltinFiles() fs.FS {
	sub, err := fs.Sub(builtinFS, "catalog")
	if err != nil {
		panic(err)
	}
	return sub
}

var builtin = sync.OnceValue(func() *Catalog {
	c, err := LoadCatalog(builtinFS, "catalog")
	if err != nil {
		panic("policies: embedded catalog is broken: " + err.Error())
	}
	if _, ok := c.policies[DefaultPolicy]; !ok {
		panic("policies: embedded catalog has no " + DefaultPolicy + " policy")
	}
	for _, p := range c.policies {
		c.policies[p.Name] = withSource(p, "builtin:"+p.Source)
	}
	return c
})

func withSource(p Policy, src string) Policy { p.Source = src; return p }

// BuiltinCatalog returns the embedded catalog. It panics only if the embedded
// files are broken, which TestBuiltinCatalog rules out.
func BuiltinCatalog() *Catalog { return builtin() }

// LoadCatalog reads every *.json file of dir in fsys; each holds one policy
// whose name is the file name without .json. Decoding is strict (see
// README.md) and every policy is validated; errors name the file.
func LoadCatalog(fsys fs.FS, dir string) (*Catalog, error) {
	return LoadCatalogWith(fsys, dir, Algorithms{})
}

// LoadCatalogWith is LoadCatalog where policies may name any algorithm of
// algs (the built-in ones and a kernel policy directory's).
func LoadCatalogWith(fsys fs.FS, dir string, algs Algorithms) (*Catalog, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	c := &Catalog{policies: map[string]Policy{}, algs: algs}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		file := path.Join(dir, e.Name())
		p, err := loadPolicyFile(fsys, file, algs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		c.policies[p.Name] = p
	}
	return c, nil
}

// LoadCatalogDir loads a user's catalog directory (see LoadCatalog); merge it
// over the built-in one with BuiltinCatalog().Merge.
func LoadCatalogDir(dir string) (*Catalog, error) {
	return LoadCatalogDirWith(dir, Algorithms{})
}

// LoadCatalogDirWith is LoadCatalogDir where policies may name any algorithm of algs.
func LoadCatalogDirWith(dir string, algs Algorithms) (*Catalog, error) {
	c, err := LoadCatalogWith(os.DirFS(dir), ".", algs)
	if err != nil {
		return nil, fmt.Errorf("catalog dir %s: %w", dir, err)
	}
	for name, p := range c.policies {
		c.policies[name] = withSource(p, path.Join(dir, p.Source))
	}
	return c, nil
}

func loadPolicyFile(fsys fs.FS, file string, algs Algorithms) (Policy, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return Policy{}, err
	}
	var p Policy
	if err := decodeStrict(data, &p); err != nil {
		return Policy{}, err
	}
	if want := strings.TrimSuffix(path.Base(file), ".json"); p.Name != want {
		return Policy{}, fieldError("name", fmt.Sprintf("%q must match the file name %q", p.Name, want))
	}
	p, err = p.normalize(algs)
	if err != nil {
		return Policy{}, err
	}
	if err := p.ValidateWith(algs); err != nil {
		return Policy{}, err
	}
	p.Source = file
	return p, nil
}

// Merge returns a new catalog holding c's policies with over's added, a
// policy of over replacing c's policy of the same name. over may be nil.
// The merged catalog takes over's algorithms when it has any (a catalog
// directory loaded with a kernel policy directory's), else c's.
func (c *Catalog) Merge(over *Catalog) (*Catalog, error) {
	m := &Catalog{policies: map[string]Policy{}, algs: c.algs}
	for _, src := range []*Catalog{c, over} {
		if src == nil {
			continue
		}
		if src.algs.Eviction != nil || src.algs.Prefetch != nil || src.algs.Probes != nil {
			m.algs = src.algs
		}
		for name, p := range src.policies {
			m.policies[name] = p.Clone()
		}
	}
	if _, ok := m.policies[DefaultPolicy]; !ok {
		return nil, fmt.Errorf("merge catalog: %w: no %q policy", ErrUnknownPolicy, DefaultPolicy)
	}
	return m, nil
}

// WithAlgorithms returns a copy of c whose requests may name any algorithm
// of algs in their eviction and prefetch overrides (c's policies are
// already valid: algs must hold the built-in algorithms).
func (c *Catalog) WithAlgorithms(algs Algorithms) *Catalog {
	m := &Catalog{policies: map[string]Policy{}, algs: algs}
	for name, p := range c.policies {
		m.policies[name] = p.Clone()
	}
	return m
}

// Algorithms returns the algorithms c's requests may name.
func (c *Catalog) Algorithms() Algorithms { return c.algs.orBuiltin() }

// Get returns a copy of the named policy.
func (c *Catalog) Get(name string) (Policy, bool) {
	p, ok := c.policies[name]
	return p.Clone(), ok
}

// Names returns the policy names, sorted.
func (c *Catalog) Names() []string { return sortedKeys(c.policies) }

// List returns copies of the policies, sorted by name.
func (c *Catalog) List() []Policy {
	list := make([]Policy, 0, len(c.policies))
	for _, name := range c.Names() {
		list = append(list, c.policies[name].Clone())
	}
	return list
}

// Default returns the catalog's "default" policy, or the built-in one when
// the catalog has none (a user catalog loaded on its own).
func (c *Catalog) Default() Policy {
	if p, ok := c.Get(DefaultPolicy); ok {
		return p
	}
	p, _ := BuiltinCatalog().Get(DefaultPolicy)
	return p
}

func (c *Catalog) namesList() string { return strings.Join(slices.Clone(c.Names()), ", ") }
