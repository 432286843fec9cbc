package metrics

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probe"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/devrt/probe/helpers"
	"github.com/gpuext/gpuext/devrt/probe/maps"
	"github.com/gpuext/gpuext/devrt/probe/ptx"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/probetest"
	"github.com/gpuext/gpuext/policies/probes"
)

// A per-thread map (a bpftime-style threadhist from a probe directory)
// shows as the rows used and the entry's sum over its rows, labelled by
// probe, map and field.
func TestProbePerThreadSeries(t *testing.T) {
	d, err := probes.LoadDir(probetest.BpftimeDir(t, "", "thread-hist"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := probes.Builtin().With(d)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile([]string{"thread-hist"})
	if err != nil {
		t.Fatal(err)
	}
	state, id := t.TempDir(), bpf.TenantID(6)
	dir := filepath.Join(admission.TenantDir(state, uint64(id)), admission.TenantProbesDir)
	acct := filepath.Join(admission.AcctDir(state, uint64(id)), admission.AcctProbesDir)
	for _, d := range []string{dir, acct} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, probe.ManifestFile), b.ManifestJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &maps.File{PID: 78, Seq: 1, Tenant: uint32(id), Final: true}
	for _, m := range b.Manifest.Maps {
		im := ptx.NewImage(m.Layout)
		for g := 0; g < 300; g++ { // 300 threads, 5 exits each
			binary.LittleEndian.PutUint64(im.Bytes[probe.MapHdrSize+8*g:], 5)
		}
		f.Maps = append(f.Maps, maps.Map{Name: m.Name, Present: true, Layout: m.Layout, Bytes: im.Bytes})
	}
	for name, data := range map[string][]byte{"78-0.maps": maps.Encode(f), "78.status": []byte("image=0 state=patched reason=ok\n")} {
		if err := os.WriteFile(filepath.Join(acct, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(id, "ns", "pod", "default", 0, "app")}}
	r := prometheus.NewRegistry()
	tc := NewTenantCollector(reg, state, nil)
	tc.SetProbeCatalog(func() *probes.Catalog { return cat })
	r.MustRegister(tc)
	got, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	lbl := []string{"probe=thread-hist", "map=th_count", "field=exits"}
	for name, want := range map[string]float64{"gpuext_tenant_probe_thread_rows": 300, "gpuext_tenant_probe_thread_value_total": 1500} {
		if v, ok := value(fams, name, id, lbl...); !ok || v != want {
			t.Errorf("%s%v: %v %v, want %v\n%v", name, lbl, v, ok, want, series(fams, name))
		}
	}
}
