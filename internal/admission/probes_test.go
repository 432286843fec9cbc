package admission

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/policies"
)

// probeCore is a Core with only what the tenant-directory path needs: a
// state dir, a logger, and a compiler that declares the helper library
// (the embedded one may not be built here).
func probeCore(t *testing.T, mode FailMode, compileProbes func(probes, kernels []string) (*compile.Bundle, error)) (*Core, *test.Hook) {
	logger, hook := test.NewNullLogger()
	if compileProbes == nil {
		compileProbes = compile.NewCompiler(programs.Builtin(), func() (helpers.Library, error) { return helpers.Library{}, nil }).CompileKernels
	}
	log := logrus.NewEntry(logger)
	pl := &Planner{failMode: mode, catalog: policies.BuiltinCatalog(), log: log, compileProbes: compileProbes}
	return &Core{Planner: pl, cfg: Config{FailMode: mode, StateDir: t.TempDir(), DevrtDir: "/unused"}, log: log}, hook
}

func selectFor(t *testing.T, labels map[string]string) policies.Selection {
	t.Helper()
	sel, err := policies.BuiltinCatalog().Select(policies.Request{ContainerName: "web", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// admitProbes runs the probe part of Admit and writes the tenant dir.
func admitProbes(t *testing.T, c *Core, sel policies.Selection) (string, error, error) {
	t.Helper()
	b, dropped, err := c.probeBundle(ContainerInfo{ID: "c1", Name: "web"}, &sel, c.log)
	if err != nil {
		return "", nil, err
	}
	dir, err := c.writeTenantDir(7, tenantFile("nri/ctr/c1", sel.Policy, b, TenantGPUs{}), b)
	if err != nil {
		t.Fatal(err)
	}
	return dir, dropped, nil
}

// readTenantFile is the tenant dir's config.json, decoded: a missing or
// malformed file fails the test (an empty tenantcfg.File would pass every
// check of what it does not list).
func readTenantFile(t *testing.T, dir string) (tenantcfg.File, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, TenantConfigFile))
	if err != nil {
		t.Fatalf("tenant config.json: %v", err)
	}
	var tf tenantcfg.File
	if err := json.Unmarshal(b, &tf); err != nil {
		t.Fatalf("tenant config.json: %v\n%s", err, b)
	}
	return tf, b
}

// What the device runtime finds in the tenant dir of a container that
// selects probes: module.conf, module.ptx and manifest.json under probes/,
// and config.json naming the probes.
func TestAdmitWritesProbeModule(t *testing.T) {
	c, _ := probeCore(t, FailClosed, nil)
	dir, dropped, err := admitProbes(t, c, selectFor(t, map[string]string{"probes.gpuext.io": "sm-histogram, launch-latency"}))
	if err != nil || dropped != nil {
		t.Fatal(err, dropped)
	}
	conf, err := os.ReadFile(filepath.Join(dir, TenantProbesDir, compile.ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"version 1\n", "launch_time 1\n", "map smh_counts __gpuext_map_smh_counts ", "map lat_hist __gpuext_map_lat_hist "} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("module.conf lacks %q:\n%s", want, conf)
		}
	}
	ptxText, err := os.ReadFile(filepath.Join(dir, TenantProbesDir, abi.ModuleFile))
	if err != nil || !strings.Contains(string(ptxText), abi.FuncEntry) {
		t.Errorf("module.ptx: %v", err)
	}
	var m abi.Manifest
	b, err := os.ReadFile(filepath.Join(dir, TenantProbesDir, abi.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil || strings.Join(m.Probes, ",") != "launch-latency,sm-histogram" {
		t.Errorf("manifest.json: %v %v", err, m.Probes)
	}
	tf, _ := readTenantFile(t, dir)
	if strings.Join(tf.Probes, ",") != "sm-histogram,launch-latency" {
		t.Errorf("config.json probes: %v", tf.Probes)
	}
	if tf.ProbeKernels == nil || len(tf.ProbeKernels) != 0 || strings.Contains(string(conf), "kernel ") {
		t.Errorf("no kernel list: config.json probeKernels %#v, module.conf\n%s", tf.ProbeKernels, conf)
	}

	// Re-admitted without probes: the module goes, so the interposer stays off.
	if _, _, err := admitProbes(t, c, selectFor(t, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, TenantProbesDir, compile.ConfFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("probes/module.conf after deselecting: %v", err)
	}
}

func TestProbeCompileFailure(t *testing.T) {
	broken := func(_, _ []string) (*compile.Bundle, error) { return nil, helpers.ErrNotBuilt }
	sel := selectFor(t, map[string]string{"probes.gpuext.io/container.web": "launch-stats"})

	// strict: refused, the error names the probes, the key and the cause.
	c, hook := probeCore(t, FailClosed, broken)
	_, _, err := admitProbes(t, c, sel)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, helpers.ErrNotBuilt) {
		t.Fatalf("strict: err = %v", err)
	}
	for _, want := range []string{"launch-stats", "probes.gpuext.io/container.web"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("strict: err %q does not name %q", err, want)
		}
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.ErrorLevel || e.Data["probes"] != "launch-stats" {
		t.Errorf("strict: log %+v", e)
	}

	// fail-open: the container starts without probes; config.json says
	// none. The tenant had a module from an admission that compiled: it goes.
	c, hook = probeCore(t, FailOpen, nil)
	dir, dropped, err := admitProbes(t, c, sel)
	if err != nil || dropped != nil {
		t.Fatal(err, dropped)
	}
	if _, err := os.Stat(filepath.Join(dir, TenantProbesDir, compile.ConfFile)); err != nil {
		t.Fatalf("the first admission wrote no module: %v", err)
	}
	c.compileProbes = broken
	dir, dropped, err = admitProbes(t, c, sel)
	if err != nil || !errors.Is(dropped, helpers.ErrNotBuilt) {
		t.Fatalf("fail-open: err %v dropped %v", err, dropped)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || e.Data["probesFrom"] != "probes.gpuext.io/container.web" {
		t.Errorf("fail-open: log %+v", e)
	}
	tf, b := readTenantFile(t, dir)
	if tf.Policy != sel.Policy.Name || tf.Probes == nil || len(tf.Probes) != 0 {
		t.Errorf("fail-open: config.json has policy %q and probes %#v, want %q and an empty list:\n%s", tf.Policy, tf.Probes,
			sel.Policy.Name, b)
	}
	if _, err := os.Stat(filepath.Join(dir, TenantProbesDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fail-open: probes dir exists: %v", err)
	}
}

// probe-kernels.gpuext.io: the tenant's module.conf probes only the listed
// kernels, and config.json says which.
func TestAdmitProbeKernels(t *testing.T) {
	c, hook := probeCore(t, FailClosed, nil)
	sel := selectFor(t, map[string]string{"probes.gpuext.io": "launch-stats",
		"probe-kernels.gpuext.io/container.web": "_Z4vaddPKfS0_Pfi, _Z3sumPf"})
	dir, dropped, err := admitProbes(t, c, sel)
	if err != nil || dropped != nil {
		t.Fatal(err, dropped)
	}
	conf, err := os.ReadFile(filepath.Join(dir, TenantProbesDir, compile.ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "kernel _Z3sumPf\nkernel _Z4vaddPKfS0_Pfi\n") || strings.Count(string(conf), "kernel ") != 2 {
		t.Errorf("module.conf lacks the kernel lines:\n%s", conf)
	}
	tf, b := readTenantFile(t, dir)
	if strings.Join(tf.ProbeKernels, ",") != "_Z3sumPf,_Z4vaddPKfS0_Pfi" {
		t.Errorf("config.json probeKernels: %v", tf.ProbeKernels)
	}
	if !strings.Contains(string(b), `"probeKernels": [`) {
		t.Errorf("config.json:\n%s", b)
	}

	// Another list for the same tenant: the module is swapped to the new one.
	sel = selectFor(t, map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "_Z3sumPf"})
	if _, _, err := admitProbes(t, c, sel); err != nil {
		t.Fatal(err)
	}
	conf, _ = os.ReadFile(filepath.Join(dir, TenantProbesDir, compile.ConfFile))
	if strings.Count(string(conf), "kernel ") != 1 || !strings.Contains(string(conf), "kernel _Z3sumPf\n") {
		t.Errorf("module.conf after the new list:\n%s", conf)
	}

	// A compile failure names the kernels and where they came from, and
	// fail-open drops them with the probes.
	// The tenant had a module with a kernel list: it goes with them.
	broken := func(_, _ []string) (*compile.Bundle, error) { return nil, compile.ErrNoKernelLeft }
	c, hook = probeCore(t, FailOpen, nil)
	sel = selectFor(t, map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io/pod": "_Z3sumPf"})
	if dir, dropped, err = admitProbes(t, c, sel); err != nil || dropped != nil {
		t.Fatal(err, dropped)
	}
	c.compileProbes = broken
	dir, dropped, err = admitProbes(t, c, sel)
	if err != nil || !errors.Is(dropped, compile.ErrNoKernelLeft) || !strings.Contains(dropped.Error(), "kernels _Z3sumPf from probe-kernels.gpuext.io/pod") {
		t.Fatalf("fail-open: err %v dropped %v", err, dropped)
	}
	if e := hook.LastEntry(); e == nil || e.Data["probeKernels"] != "_Z3sumPf" || e.Data["probeKernelsFrom"] != "probe-kernels.gpuext.io/pod" {
		t.Errorf("fail-open: log %+v", e)
	}
	tf, b = readTenantFile(t, dir)
	if tf.Policy != sel.Policy.Name || tf.Probes == nil || len(tf.Probes) != 0 || tf.ProbeKernels == nil || len(tf.ProbeKernels) != 0 {
		t.Errorf("fail-open: config.json, want policy %q with empty probes and probeKernels:\n%s", sel.Policy.Name, b)
	}
	if _, err := os.Stat(filepath.Join(dir, TenantProbesDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fail-open: the earlier module is still there: %v", err)
	}
}
