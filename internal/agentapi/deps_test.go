package agentapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The hook binaries are thin clients of the agent: what they may link.
// Anything else (the admission core, the catalog, cilium/ebpf, net/http)
// fails TestHookImports, which `make lint` runs.
var (
	hookBinaries = []string{
		"github.com/gpuext/gpuext/oci-hook/cmd/gpuext-oci-hook",
		"github.com/gpuext/gpuext/oci-hook/cmd/gpuext-runc",
	}
	// hookPackages are the module's packages a hook may import: the
	// agent's API and the small pure packages under it.
	hookPackages = []string{
		"github.com/gpuext/gpuext/oci-hook/hook",
		"github.com/gpuext/gpuext/internal/agentapi",           // the API client and its types
		"github.com/gpuext/gpuext/internal/failmode",           // the one fail-mode rule
		"github.com/gpuext/gpuext/internal/config",             // the config file (format, validation)
		"github.com/gpuext/gpuext/internal/deviceplugin/pools", // its devicePlugin section, validated
		"github.com/gpuext/gpuext/internal/logging",
		"github.com/gpuext/gpuext/lib/strictjson",
		"github.com/gpuext/gpuext/lib/atomicfile",
		"github.com/gpuext/gpuext/policies/grammar", // gpuext.io keys, as selection reads them
		"github.com/gpuext/gpuext/bpf/ids",          // TenantID, Runtime: no BPF
		"github.com/gpuext/gpuext/cgroup/pcibus",    // PCI bus ids in devicePlugin.gpus
	}
	// hookModules are the other modules a hook may import from.
	hookModules = []string{
		"github.com/opencontainers/runtime-spec/",
		"github.com/sirupsen/logrus",
		"golang.org/x/sys/",
		"tags.cncf.io/container-device-interface/pkg/parser",
	}
	// hookStdDenied are standard packages a hook does without: net/http
	// links TLS and HTTP/2 (the client speaks HTTP/1.0 on the socket).
	hookStdDenied = []string{"net/http", "crypto/tls", "crypto/x509"}
)

// listedPackage is what `go list -json` says of one package.
type listedPackage struct {
	ImportPath   string
	Standard     bool
	EmbedFiles   []string
	Imports      []string
	TestImports  []string // of the package's own tests (go list without -deps)
	XTestImports []string
}

// thinViolations lists what in deps a hook binary may not link, each with
// a package of deps that imports it (the way it came in).
func thinViolations(deps []listedPackage) []string {
	importer := map[string]string{}
	for _, p := range deps {
		for _, imp := range p.Imports {
			if _, ok := importer[imp]; !ok {
				importer[imp] = p.ImportPath
			}
		}
	}
	var bad []string
	add := func(p listedPackage, why string) {
		bad = append(bad, p.ImportPath+" ("+why+", imported by "+importer[p.ImportPath]+")")
	}
	for _, p := range deps {
		path := p.ImportPath
		switch {
		case len(p.EmbedFiles) > 0:
			add(p, "embeds "+strings.Join(p.EmbedFiles, ", "))
		case p.Standard || strings.HasPrefix(path, "vendor/"):
			if slices.Contains(hookStdDenied, path) {
				add(p, "a standard package the hooks do without")
			}
		case slices.Contains(hookBinaries, path), slices.Contains(hookPackages, path):
		case strings.HasPrefix(path, "github.com/gpuext/gpuext/"):
			add(p, "a package of gpuext that is not the agent's API or a small pure one")
		case !slices.ContainsFunc(hookModules, func(m string) bool { return strings.HasPrefix(path, m) }):
			add(p, "a module the hooks do not use")
		}
	}
	return bad
}

func goListDeps(t *testing.T, pkg string, flags ...string) []listedPackage {
	t.Helper()
	// the hooks are static binaries (and the policy model is checked the same way)
	return goList(t, []string{"CGO_ENABLED=0"}, slices.Concat([]string{"-deps"}, flags, []string{"-json=ImportPath,Standard,EmbedFiles,Imports", pkg})...)
}

// goList runs go list with args (one of them -json=...) and env added to
// the environment, and decodes what it prints.
func goList(t *testing.T, env []string, args ...string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestHookImports: gpuext-oci-hook and gpuext-runc link the agent's API
// client, the OCI types and small pure packages, nothing of the core
// (`go list -deps`, the honest measure of a thin binary).
func TestHookImports(t *testing.T) {
	for _, bin := range hookBinaries {
		deps := goListDeps(t, bin)
		if !slices.ContainsFunc(deps, func(p listedPackage) bool { return p.ImportPath == "github.com/gpuext/gpuext/internal/agentapi" }) {
			t.Errorf("%s does not import the agent's API (%d packages listed): the check would pass on anything", bin, len(deps))
		}
		for _, v := range thinViolations(deps) {
			t.Errorf("%s links %s", bin, v)
		}
	}
}

// The check fails on what it is there to catch: a package of the core, a
// cilium/ebpf package, an embedded object, net/http.
func TestThinViolations(t *testing.T) {
	ok := []listedPackage{
		{ImportPath: "github.com/gpuext/gpuext/oci-hook/cmd/gpuext-oci-hook", Imports: []string{"github.com/gpuext/gpuext/oci-hook/hook"}},
		{ImportPath: "github.com/gpuext/gpuext/oci-hook/hook", Imports: []string{"github.com/gpuext/gpuext/internal/agentapi", "fmt"}},
		{ImportPath: "github.com/gpuext/gpuext/internal/agentapi"},
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "github.com/sirupsen/logrus"},
	}
	if v := thinViolations(ok); len(v) != 0 {
		t.Fatalf("a thin hook: %q", v)
	}
	for _, tc := range []struct {
		extra listedPackage
		want  string
	}{
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/internal/admission"}, "internal/admission (a package of gpuext"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/policies"}, "gpuext/policies (a package of gpuext"},
		{listedPackage{ImportPath: "github.com/cilium/ebpf"}, "cilium/ebpf (a module the hooks do not use"},
		{listedPackage{ImportPath: "net/http", Standard: true}, "net/http (a standard package"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/internal/config", EmbedFiles: []string{"catalog/batch.json"}}, "embeds catalog/batch.json"},
	} {
		deps := append(slices.Clone(ok), tc.extra)
		deps[1].Imports = append(slices.Clone(deps[1].Imports), tc.extra.ImportPath)
		v := thinViolations(deps)
		if len(v) != 1 || !strings.Contains(v[0], tc.want) || !strings.Contains(v[0], "imported by github.com/gpuext/gpuext/oci-hook/hook") {
			t.Errorf("with %s: %q, want one violation saying %q and who imports it", tc.extra.ImportPath, v, tc.want)
		}
	}
}

// The policy model is pure (the design's "Go, pure"), and the device-eBPF
// toolchain (gpubpf) and the policy model do not import each other: of
// gpubpf, policies links only the leaf that names the built-in device
// probes, which itself imports only the standard library; gpubpf links
// nothing of policies or of the device runtime (devrt imports gpubpf, never
// the other way). Tests count: a directory's tests may not close a loop.
// TestPolicyImports, which `make lint` runs, checks both.
const (
	policyTree    = "github.com/gpuext/gpuext/policies/..."
	toolchainTree = "github.com/gpuext/gpuext/gpubpf/..."
	// toolchainLeaf: the built-in probe names (gpubpf/programs/catalog)
	toolchainLeaf = "github.com/gpuext/gpuext/gpubpf/programs/catalog"
)

var (
	// policyDenied: what the policy model may not link (a path or a path
	// prefix ending in /), toolchainLeaf excepted.
	policyDenied = []string{"github.com/cilium/", "github.com/gpuext/gpuext/gpubpf/",
		"github.com/gpuext/gpuext/devrt", "github.com/gpuext/gpuext/devrt/",
		"github.com/gpuext/gpuext/bpf", "github.com/gpuext/gpuext/bpf/"}
	// toolchainDenied: what the device-eBPF toolchain may not link.
	toolchainDenied = []string{"github.com/gpuext/gpuext/policies", "github.com/gpuext/gpuext/policies/",
		"github.com/gpuext/gpuext/devrt", "github.com/gpuext/gpuext/devrt/"}
)

// deniedViolations lists the packages of deps that denied names (a path,
// or a prefix ending in /), except those in allowed, each with a package
// that imports it; and any import of the packages in stdOnly that is not
// a standard package. A test variant ("p [q.test]") counts as p.
func deniedViolations(deps []listedPackage, denied, allowed, stdOnly []string) []string {
	plain := func(p string) string { p, _, _ = strings.Cut(p, " "); return p }
	importer := map[string]string{}
	standard := map[string]bool{}
	for _, p := range deps {
		standard[plain(p.ImportPath)] = p.Standard
		for _, imp := range p.Imports {
			if _, ok := importer[plain(imp)]; !ok {
				importer[plain(imp)] = plain(p.ImportPath)
			}
		}
	}
	var bad []string
	seen := map[string]bool{}
	for _, p := range deps {
		path := plain(p.ImportPath)
		if seen[path] {
			continue
		}
		seen[path] = true
		if slices.Contains(stdOnly, path) {
			for _, imp := range p.Imports {
				if !standard[plain(imp)] {
					bad = append(bad, path+" imports "+plain(imp)+", not a standard package")
				}
			}
		}
		if slices.Contains(allowed, path) {
			continue
		}
		if slices.ContainsFunc(denied, func(d string) bool {
			return path == d || strings.HasSuffix(d, "/") && strings.HasPrefix(path, d)
		}) {
			bad = append(bad, path+" (imported by "+importer[path]+")")
		}
	}
	return bad
}

// TestPolicyImports: `go list -deps -test` of policies/... has no
// cilium/ebpf and nothing of the device toolchain but the names leaf;
// that of gpubpf/... nothing of policies or the device runtime.
func TestPolicyImports(t *testing.T) {
	deps := goListDeps(t, policyTree, "-test")
	if !slices.ContainsFunc(deps, func(p listedPackage) bool { return p.ImportPath == toolchainLeaf }) {
		t.Errorf("%s does not import %s (%d packages listed): the check would pass on anything", policyTree, toolchainLeaf, len(deps))
	}
	for _, v := range deniedViolations(deps, policyDenied, []string{toolchainLeaf}, []string{toolchainLeaf}) {
		t.Errorf("the policy model links %s: it checks probe names through policies.ProbeSet and %s only", v, toolchainLeaf)
	}
	deps = goListDeps(t, toolchainTree, "-test")
	if !slices.ContainsFunc(deps, func(p listedPackage) bool { return p.ImportPath == "github.com/cilium/ebpf" }) {
		t.Errorf("%s does not import cilium/ebpf (%d packages listed): the check would pass on anything", toolchainTree, len(deps))
	}
	for _, v := range deniedViolations(deps, toolchainDenied, nil, nil) {
		t.Errorf("the device-eBPF toolchain links %s: policies and devrt import gpubpf, never the other way", v)
	}
}

// The check fails on what it is there to catch: cilium/ebpf, a toolchain
// package that is not the leaf, the device runtime, a leaf that imports
// more than the standard library, and (for the toolchain) the policy model.
func TestPolicyViolations(t *testing.T) {
	ok := []listedPackage{
		{ImportPath: "github.com/gpuext/gpuext/policies", Imports: []string{toolchainLeaf, "fmt"}},
		{ImportPath: "github.com/gpuext/gpuext/policies [github.com/gpuext/gpuext/policies.test]", Imports: []string{toolchainLeaf}},
		{ImportPath: toolchainLeaf, Imports: []string{"regexp"}},
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "regexp", Standard: true},
		{ImportPath: "github.com/gpuext/gpuext/bpfview"}, // a prefix of a denied path, not under it
	}
	if v := deniedViolations(ok, policyDenied, []string{toolchainLeaf}, []string{toolchainLeaf}); len(v) != 0 {
		t.Fatalf("a pure policy model: %q", v)
	}
	for _, tc := range []struct {
		extra    listedPackage
		leafDeps bool // the leaf imports it, not policies
		want     string
	}{
		{listedPackage{ImportPath: "github.com/cilium/ebpf"}, false, "github.com/cilium/ebpf (imported by github.com/gpuext/gpuext/policies)"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/gpubpf/verifier"}, false, "gpubpf/verifier (imported by"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/gpubpf/programs"}, false, "gpubpf/programs (imported by"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/devrt/tenantcfg"}, false, "devrt/tenantcfg (imported by"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/bpf"}, false, "gpuext/bpf (imported by"},
		{listedPackage{ImportPath: "github.com/gpuext/gpuext/lib/strictjson"}, true, toolchainLeaf + " imports github.com/gpuext/gpuext/lib/strictjson, not a standard package"},
	} {
		deps := append(slices.Clone(ok), tc.extra)
		at := 0
		if tc.leafDeps {
			at = 2
		}
		deps[at].Imports = append(slices.Clone(deps[at].Imports), tc.extra.ImportPath)
		v := deniedViolations(deps, policyDenied, []string{toolchainLeaf}, []string{toolchainLeaf})
		if len(v) != 1 || !strings.Contains(v[0], tc.want) {
			t.Errorf("with %s: %q, want one violation saying %q", tc.extra.ImportPath, v, tc.want)
		}
	}
	tool := []listedPackage{
		{ImportPath: "github.com/gpuext/gpuext/gpubpf/maps [github.com/gpuext/gpuext/gpubpf/maps.test]", Imports: []string{"github.com/gpuext/gpuext/policies"}},
		{ImportPath: "github.com/gpuext/gpuext/policies"},
		{ImportPath: "github.com/gpuext/gpuext/policies/grammar"},
		{ImportPath: "github.com/gpuext/gpuext/devrt/probefiles/launches"},
	}
	v := deniedViolations(tool, toolchainDenied, nil, nil)
	if len(v) != 3 || !strings.Contains(v[0], "policies (imported by github.com/gpuext/gpuext/gpubpf/maps)") {
		t.Errorf("a toolchain test that imports the policy model and the runtime: %q, want three violations", v)
	}
}

// loopTrees are the trees whose packages may not import each other in a
// loop, tests included: the policy model, the device-eBPF toolchain and
// the device runtime.
var loopTrees = []string{"github.com/gpuext/gpuext/policies/...", "github.com/gpuext/gpuext/gpubpf/...", "github.com/gpuext/gpuext/devrt/..."}

// importLoop returns one loop of the graph (package -> the packages it or
// its tests import) as the packages along it, the first repeated at the
// end; nil when there is none.
func importLoop(graph map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path, loop []string
	var visit func(p string) bool
	visit = func(p string) bool {
		state[p] = open
		path = append(path, p)
		for _, q := range graph[p] {
			switch state[q] {
			case open:
				loop = append(slices.Clone(path[slices.Index(path, q):]), q)
				return true
			case unseen:
				if _, ok := graph[q]; ok && visit(q) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[p] = done
		return false
	}
	for _, p := range slices.Sorted(maps.Keys(graph)) {
		if state[p] == unseen && visit(p) {
			return loop
		}
	}
	return nil
}

// TestNoImportLoops: no loop among the packages of loopTrees, counting
// test imports (go would refuse a loop of plain imports; one closed by an
// external test is a loop a reader meets all the same).
func TestNoImportLoops(t *testing.T) {
	listed := goList(t, nil, append([]string{"-json=ImportPath,Imports,TestImports,XTestImports"}, loopTrees...)...)
	graph := map[string][]string{}
	for _, p := range listed {
		// an external test (package p_test) imports p itself: no loop
		graph[p.ImportPath] = slices.DeleteFunc(slices.Concat(p.Imports, p.TestImports, p.XTestImports),
			func(q string) bool { return q == p.ImportPath })
	}
	if len(graph) < 20 {
		t.Fatalf("go list %s: %d packages: the check would pass on anything", strings.Join(loopTrees, " "), len(graph))
	}
	if loop := importLoop(graph); loop != nil {
		t.Errorf("an import loop (tests included): %s", strings.Join(loop, " -> "))
	}
}

// importLoop finds a loop that only a test import closes, and none where
// the imports only go one way.
func TestImportLoop(t *testing.T) {
	const ptx, interp, abi = "gpubpf/ptx", "gpubpf/ptxinterp", "gpubpf/abi"
	if loop := importLoop(map[string][]string{ptx: {abi}, interp: {ptx, abi}, abi: {"fmt"}}); loop != nil {
		t.Errorf("one-way imports: loop %q", loop)
	}
	loop := importLoop(map[string][]string{ptx: {abi, interp}, interp: {ptx}, abi: nil})
	if want := []string{ptx, interp, ptx}; !slices.Equal(loop, want) {
		t.Errorf("ptx's test imports the interpreter, which imports ptx: loop %q, want %q", loop, want)
	}
}
