package agentapi

import (
	"slices"
	"strings"
	"testing"
)

// The layers of the tree. The lower packages (the policy model, cgroup,
// BPF, the kernel module's Go, the device runtime, the device-eBPF
// toolchain and lib/) import nothing of internal/, where the agent's
// services live: a lower package that needs something of internal/ needs
// it moved down. lib/ is the bottom: it imports nothing of the module
// outside lib/. Tests' imports count too. TestLayers checks the whole
// module; `make lint` runs it.
const modulePath = "github.com/gpuext/gpuext"

// lowerLayers are the top-level folders below internal/. A folder whose
// name starts with one of them counts (the device-eBPF toolchain's gpubpf/
// and any sibling of that name).
var lowerLayers = []string{"policies", "devrt", "bpf", "cgroup", "kmod", "lib", "gpubpf"}

// topFolder is the module-relative top-level folder of a package of the
// module, and false for a package of another module.
func topFolder(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, modulePath+"/")
	if !ok {
		return "", false
	}
	top, _, _ := strings.Cut(rel, "/")
	return top, true
}

func isLower(top string) bool {
	return slices.ContainsFunc(lowerLayers, func(l string) bool { return strings.HasPrefix(top, l) })
}

// layerViolations lists every import against the layers, as
// "IMPORTER imports IMPORTED (why)".
func layerViolations(pkgs []listedPackage) []string {
	var bad []string
	for _, p := range pkgs {
		top, ok := topFolder(p.ImportPath)
		if !ok || !isLower(top) {
			continue
		}
		seen := map[string]bool{}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			itop, ok := topFolder(imp)
			if !ok || seen[imp] || imp == p.ImportPath {
				continue
			}
			seen[imp] = true
			switch {
			case top == "lib" && itop != "lib":
				bad = append(bad, p.ImportPath+" imports "+imp+" (lib/ imports nothing of the module outside lib/)")
			case itop == "internal":
				bad = append(bad, p.ImportPath+" imports "+imp+" (a lower package imports nothing of internal/: move what it needs down, to lib/ or its own layer)")
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestLayers: no lower package imports internal/, and lib/ imports nothing
// of the module outside lib/ (go list of every package, tests included).
func TestLayers(t *testing.T) {
	pkgs := goList(t, nil, "-json=ImportPath,Imports,TestImports,XTestImports", modulePath+"/...")
	lower := map[string]int{}
	for _, p := range pkgs {
		if top, _ := topFolder(p.ImportPath); isLower(top) {
			lower[top]++
		}
	}
	// the check passes on nothing only when it saw nothing: it must see
	// the layers it is about
	for _, top := range []string{"policies", "devrt", "gpubpf", "bpf", "cgroup", "lib"} {
		if lower[top] == 0 {
			t.Errorf("go list named no package under %s/ (%d packages listed): the check would pass on anything", top, len(pkgs))
		}
	}
	for _, v := range layerViolations(pkgs) {
		t.Error(v)
	}
}

// The check fails on what it is there to catch, tests' imports included,
// and lets the arrows the layers allow pass.
func TestLayerViolations(t *testing.T) {
	m := func(rel string) string { return modulePath + "/" + rel }
	ok := []listedPackage{
		{ImportPath: m("policies"), Imports: []string{m("lib/strictjson"), m("policies/grammar"), "fmt"}},
		{ImportPath: m("devrt/board"), Imports: []string{m("bpf"), m("lib/tenantfs")}, TestImports: []string{m("lib/testutil")}},
		{ImportPath: m("lib/tenantfs"), Imports: []string{"golang.org/x/sys/unix"}, XTestImports: []string{m("lib/testutil")}},
		{ImportPath: m("internal/admission"), Imports: []string{m("policies"), m("internal/agentapi")}},
		{ImportPath: m("oci-hook/hook"), Imports: []string{m("internal/agentapi")}},
	}
	if v := layerViolations(ok); len(v) != 0 {
		t.Fatalf("allowed arrows reported: %q", v)
	}
	for _, tc := range []struct {
		pkg  listedPackage
		want string
	}{
		{listedPackage{ImportPath: m("policies"), Imports: []string{m("internal/strictjson")}}, "policies imports " + m("internal/strictjson")},
		{listedPackage{ImportPath: m("devrt"), TestImports: []string{m("internal/admission")}}, "devrt imports " + m("internal/admission")},
		{listedPackage{ImportPath: m("cgroup/cgrouptest"), XTestImports: []string{m("internal/privtest")}}, "cgrouptest imports"},
		{listedPackage{ImportPath: m("gpubpf/verifier"), Imports: []string{m("internal/config")}}, "gpubpf/verifier imports"},
		{listedPackage{ImportPath: m("lib/testutil"), Imports: []string{m("bpf")}}, "(lib/ imports nothing of the module outside lib/)"},
		{listedPackage{ImportPath: m("kmod/sdkcheck"), Imports: []string{m("internal/logging")}}, "a lower package imports nothing of internal/"},
	} {
		v := layerViolations(append(slices.Clone(ok), tc.pkg))
		if len(v) != 1 || !strings.Contains(v[0], tc.want) {
			t.Errorf("with %s importing %v: %q, want one violation saying %q", tc.pkg.ImportPath,
				slices.Concat(tc.pkg.Imports, tc.pkg.TestImports, tc.pkg.XTestImports), v, tc.want)
		}
	}
}
