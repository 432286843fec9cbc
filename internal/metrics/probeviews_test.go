package metrics

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
)

// exampleCatalog is the built-in probe catalog with the example probes of
// examples/probes (a hash view and a records view) from a probe directory.
func exampleCatalog(t *testing.T) *programs.Catalog {
	t.Helper()
	cat, err := programs.BuiltinWithDir(testutil.ExampleDir(t, "kernel-block-hist", "slow-blocks"))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// writeProbeFiles writes what admission and the device runtime write for
// tenant id with bundle b: its manifest in the tenant dir, and process
// pid's .maps (each map image set by fill) and .status in the acct dir.
func writeProbeFiles(t testing.TB, state string, id bpf.TenantID, b *compile.Bundle, pid uint32, fill func(name string, im *devmap.Image)) {
	t.Helper()
	dir := filepath.Join(admission.TenantDir(state, uint64(id)), admission.TenantProbesDir)
	acct := filepath.Join(admission.AcctDir(state, uint64(id)), admission.AcctProbesDir)
	for _, d := range []string{dir, acct} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, abi.ManifestFile), b.ManifestJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &maps.File{PID: pid, Seq: 1, Tenant: uint32(id), Final: true}
	for _, m := range b.Manifest.Maps {
		im := devmap.NewImage(m.Layout)
		fill(m.Name, im)
		f.Maps = append(f.Maps, maps.Map{Name: m.Name, Present: true, Layout: m.Layout, Bytes: im.Bytes})
	}
	for name, data := range map[string][]byte{
		fmt.Sprintf("%d-0.maps", pid): maps.Encode(f), fmt.Sprintf("%d.status", pid): []byte("image=0 state=patched reason=ok\n"),
	} {
		if err := os.WriteFile(filepath.Join(acct, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gatherWithCatalog scrapes a tenant collector over reg and state that
// renders probes through cat (nil: the built-in catalog).
func gatherWithCatalog(t testing.TB, reg Registry, state string, cat *programs.Catalog) map[string]*dto.MetricFamily {
	t.Helper()
	r := prometheus.NewRegistry()
	tc := NewTenantCollector(reg, state, nil)
	tc.SetProbeCatalog(func() *programs.Catalog { return cat })
	r.MustRegister(tc)
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// A tenant's hash and ring-buffer maps (real map images, as the device
// helpers lay them out) show as the key count and the value sums of the
// hash view and the records of the records view, labelled by probe and
// map, when the collector renders through the catalog that has the
// probes; through the built-in one they are not shown.
func TestProbeHashAndRecordsSeries(t *testing.T) {
	cat := exampleCatalog(t)
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).
		Compile([]string{"kernel-block-hist", "slow-blocks"})
	if err != nil {
		t.Fatal(err)
	}
	state, id := t.TempDir(), bpf.TenantID(5)
	le := binary.LittleEndian
	key := func(kernel uint64, bucket uint32) []byte {
		k := le.AppendUint64(nil, kernel)
		return append(le.AppendUint32(k, bucket), 0, 0, 0, 0)
	}
	writeProbeFiles(t, state, id, b, 77, func(name string, im *devmap.Image) {
		switch name {
		case "kbh_hist":
			for _, e := range []struct {
				k []byte
				n uint64
			}{{key(1, 10), 3}, {key(2, 14), 4}} {
				if im.Update(e.k, le.AppendUint64(nil, e.n), devmap.FlagAny, 0) != 0 {
					t.Fatal("hash update")
				}
			}
		case "sb_records":
			for i := range 3 {
				rec := le.AppendUint64(le.AppendUint32(le.AppendUint32(le.AppendUint64(nil, 2), uint32(i)), 1), 20000)
				if im.RingbufOutput(rec, 0) != 0 {
					t.Fatal("ringbuf output")
				}
			}
		}
	})
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(id, "ns", "pod", "default", 0, "app")}}
	gather := func(c *programs.Catalog) map[string]*dto.MetricFamily { return gatherWithCatalog(t, reg, state, c) }
	fams := gather(cat)
	for _, c := range []struct {
		name  string
		extra []string
		want  float64
	}{
		{"gpuext_tenant_probe_hash_keys", []string{"probe=kernel-block-hist", "map=kbh_hist"}, 2},
		{"gpuext_tenant_probe_hash_value_total", []string{"probe=kernel-block-hist", "map=kbh_hist", "field=blocks"}, 7},
		{"gpuext_tenant_probe_records_total", []string{"probe=slow-blocks", "map=sb_records"}, 3},
		{"gpuext_tenant_probe_records_dropped_total", []string{"probe=slow-blocks", "map=sb_records"}, 0},
	} {
		if v, ok := value(fams, c.name, id, c.extra...); !ok || v != c.want {
			t.Errorf("%s%v: %v %v, want %v\n%v", c.name, c.extra, v, ok, c.want, series(fams, c.name))
		}
	}
	fams = gather(nil) // the built-in catalog: these probes have no views there
	for _, name := range []string{"gpuext_tenant_probe_hash_keys", "gpuext_tenant_probe_records_total"} {
		if s := series(fams, name); len(s) != 0 {
			t.Errorf("%s without the probes' catalog: %v", name, s)
		}
	}
}
