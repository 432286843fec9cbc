package agentapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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

func goListDeps(t *testing.T, pkg string) []listedPackage {
	t.Helper()
	// the hooks are static binaries
	return goList(t, []string{"CGO_ENABLED=0"}, "-deps", "-json=ImportPath,Standard,EmbedFiles,Imports", pkg)
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
