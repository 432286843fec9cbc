package metrics

import (
	"encoding/binary"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/testutil"
)

// A per-thread map (a bpftime-style threadhist from a probe directory)
// shows as the rows used and the entry's sum over its rows, labelled by
// probe, map and field.
func TestProbePerThreadSeries(t *testing.T) {
	cat, err := programs.BuiltinWithDir(testutil.BpftimeDir(t, "", "thread-hist"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile([]string{"thread-hist"})
	if err != nil {
		t.Fatal(err)
	}
	state, id := t.TempDir(), bpf.TenantID(6)
	writeProbeFiles(t, state, id, b, 78, func(_ string, im *devmap.Image) {
		for g := 0; g < 300; g++ { // 300 threads, 5 exits each
			binary.LittleEndian.PutUint64(im.Bytes[abi.MapHdrSize+8*g:], 5)
		}
	})
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(id, "ns", "pod", "default", 0, "app")}}
	fams := gatherWithCatalog(t, reg, state, cat)
	lbl := []string{"probe=thread-hist", "map=th_count", "field=exits"}
	for name, want := range map[string]float64{"gpuext_tenant_probe_thread_rows": 300, "gpuext_tenant_probe_thread_value_total": 1500} {
		if v, ok := value(fams, name, id, lbl...); !ok || v != want {
			t.Errorf("%s%v: %v %v, want %v\n%v", name, lbl, v, ok, want, series(fams, name))
		}
	}
}
