package admission

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// settingsFrom says, for every TenantFile field, which tenantcfg.Settings
// fields (settings.bin, what the device runtime reads) it feeds, or why the
// device runtime has no use for it. A field added to TenantFile fails
// TestTenantFileFieldsReachSettings until it is listed here: either it gets
// a counterpart in devrt/include/gpuext_devrt_tenant.h and TenantFile.Settings,
// or a reason it stays on the host.
var settingsFrom = map[string]struct {
	fields   []string
	hostOnly string
}{
	"ABIVersion":        {hostOnly: "the kernel ABI's version, for readers of config.json; settings.bin carries its own"},
	"TenantID":          {fields: []string{"TenantID"}},
	"TenantKey":         {hostOnly: "a name: the device runtime sees ids"},
	"Policy":            {hostOnly: "a name: GPUEXT_POLICY carries it into the container"},
	"QuotaAction":       {hostOnly: "read by the agent's memory guard on the host, which acts on processes the device runtime may not be in"},
	"Class":             {fields: []string{"Class"}},
	"QuotaBytes":        {fields: []string{"QuotaBytes"}},
	"TimesliceUS":       {hostOnly: "the kernel's TSG timeslice; never the latency-critical window (issue 14)"},
	"Interleave":        {hostOnly: "the kernel's runlist interleave (gpuext_tenant_config)"},
	"ActiveWindowUS":    {fields: []string{"ActiveWindow"}},
	"SMPercent":         {fields: []string{"SMPercent"}},
	"MPSClientPriority": {fields: []string{"MPSClientPriority"}},
	"LaunchGate":        {fields: []string{"LaunchGate"}},
	"Eviction":          {hostOnly: "a kernel policy (gpuext_tenant_config)"},
	"Prefetch":          {hostOnly: "a kernel policy (gpuext_tenant_config)"},
	"Probes":            {hostOnly: "the interposer finds the compiled probes in probes/"},
	"ProbeKernels":      {hostOnly: "the interposer reads the kernel list from probes/module.conf"},
	"GPUs":              {hostOnly: "host GPU indices: the interposer sees device ordinals, in this order"},
	"GPUQuotaBytes":     {fields: []string{"DeviceQuotas"}},
	"GPUMemoryBytes":    {hostOnly: "the scheduler's grant, the quotas' ceiling: a policy change keeps it; the interposer enforces GPUQuotaBytes"},
}

// TestTenantFileFieldsReachSettings changes one TenantFile field at a time
// and checks which settings the device runtime would see change: exactly
// the ones settingsFrom lists. Every settings field is fed by some field.
func TestTenantFileFieldsReachSettings(t *testing.T) {
	base := TenantFile{Class: string(policies.Standard)}
	typ := reflect.TypeOf(base)
	fed := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		want, ok := settingsFrom[f.Name]
		if !ok {
			t.Errorf("TenantFile.%s has no settings counterpart: give it one in gpuext_devrt_tenant.h and TenantFile.Settings, or list it in settingsFrom as host-only with the reason", f.Name)
			continue
		}
		if (len(want.fields) == 0) == (want.hostOnly == "") {
			t.Errorf("settingsFrom[%q]: give settings fields or a host-only reason, not both or neither", f.Name)
		}
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch {
		case f.Name == "Class":
			v.SetString(string(policies.LatencyCritical))
		case v.Kind() == reflect.String:
			v.SetString("x")
		case v.Kind() == reflect.Uint32, v.Kind() == reflect.Uint64:
			v.SetUint(37)
		case v.Kind() == reflect.Bool:
			v.SetBool(true)
		case v.Type() == reflect.TypeOf([]uint64(nil)):
			v.Set(reflect.ValueOf([]uint64{37}))
		case v.Type() == reflect.TypeOf([]int(nil)):
			v.Set(reflect.ValueOf([]int{1}))
		case v.Kind() == reflect.Slice:
			v.Set(reflect.ValueOf([]string{"x"}))
		default:
			t.Fatalf("TenantFile.%s: kind %s: teach this test to change it", f.Name, v.Kind())
		}
		got := changedFields(base.Settings(), changed.Settings())
		if !reflect.DeepEqual(got, want.fields) {
			t.Errorf("changing TenantFile.%s changes settings %v, settingsFrom says %v", f.Name, got, want.fields)
		}
		for _, s := range got {
			fed[s] = true
		}
	}
	for name := range settingsFrom {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("settingsFrom lists %q, which TenantFile no longer has", name)
		}
	}
	st := reflect.TypeOf(tenantcfg.Settings{})
	for i := 0; i < st.NumField(); i++ {
		if !fed[st.Field(i).Name] {
			t.Errorf("settings field %s is fed by no TenantFile field", st.Field(i).Name)
		}
	}
}

func changedFields(a, b tenantcfg.Settings) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

// The settings file admission writes for every catalog policy is one the
// device runtime takes, with the policy's class (every catalog class has
// its own), quota, SM share and a window resolved on the host.
func TestTenantDirSettingsForCatalog(t *testing.T) {
	// what the interposer acts on (devrt/lib/priority.c): named, not derived from devrtClass
	classes := map[policies.PriorityClass]tenantcfg.Class{
		policies.LatencyCritical: tenantcfg.ClassLatencyCritical,
		policies.Standard:        tenantcfg.ClassStandard,
		policies.BestEffort:      tenantcfg.ClassBestEffort,
	}
	seen := map[tenantcfg.Class]policies.PriorityClass{}
	for _, name := range policies.Classes {
		id, ok := classes[name]
		if !ok {
			t.Errorf("class %q has no device runtime class", name)
		}
		if got := devrtClass(name); got != id {
			t.Errorf("class %q: settings.bin class %d, want %d", name, got, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("classes %q and %q are both device runtime class %d", name, other, id)
		}
		seen[id] = name
	}
	c, _ := probeCore(t, FailClosed, nil)
	cat := policies.BuiltinCatalog()
	for _, name := range cat.Names() {
		p, _ := cat.Get(name)
		if name == "quota" {
			p.Memory.QuotaBytes = 8 << 30
		}
		dir, s := writtenSettings(t, c, 9, "nri/ctr/"+name, p)
		window := tenantcfg.DefaultActiveWindow
		if us := p.Priority.ActiveWindowUS; us > 0 {
			window = time.Duration(us) * time.Microsecond
		}
		want := tenantcfg.Settings{TenantID: 9, QuotaBytes: p.Memory.QuotaBytes, ActiveWindow: window,
			Class: classes[p.Priority.Class], SMPercent: p.Priority.EffectiveSMPercent(),
			MPSClientPriority: p.Priority.EffectiveMPSClientPriority(), LaunchGate: p.Priority.EffectiveLaunchGate()}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("%s: settings.bin %+v, want %+v", name, s, want)
		}
		var tf TenantFile
		if b, err := os.ReadFile(filepath.Join(dir, TenantConfigFile)); err != nil || json.Unmarshal(b, &tf) != nil || !reflect.DeepEqual(tf.Settings(), s) {
			t.Errorf("%s: config.json does not describe settings.bin: %+v vs %+v (%v)", name, tf.Settings(), s, err)
		}
	}
}

// A tenant dir written again with the same settings keeps its files (a
// running process compares the inode and mtime to see new settings); new
// settings replace the file.
func TestWriteTenantFilesOnlyWhenChanged(t *testing.T) {
	dir := t.TempDir()
	tf := TenantFile{TenantID: 4, Class: string(policies.BestEffort), QuotaBytes: 1 << 30, SMPercent: 30}
	if err := WriteTenantFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, TenantSettingsFile)
	ino := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	first := ino()
	if err := WriteTenantFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	if ino() != first {
		t.Error("the same settings replaced settings.bin")
	}
	tf.QuotaBytes = 2 << 30
	if err := WriteTenantFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	if ino() == first {
		t.Error("new settings did not replace settings.bin")
	}
	b, _ := os.ReadFile(path)
	if s, err := tenantcfg.Decode(b); err != nil || s.QuotaBytes != 2<<30 || s.Class != tenantcfg.ClassBestEffort {
		t.Errorf("settings.bin after the change: %+v, %v", s, err)
	}
}

// The launch gate reaches settings.bin only for a best-effort policy that
// asks for it: the built-in batch policy does not (it starved framework
// trainers on the H200), and an override to another class drops it.
func TestTenantDirLaunchGate(t *testing.T) {
	c, _ := probeCore(t, FailClosed, nil)
	batch, ok := policies.BuiltinCatalog().Get("batch")
	if !ok {
		t.Fatal("no built-in batch policy")
	}
	gated := batch
	gated.Priority.LaunchGate = true
	standard := gated
	standard.Priority.Class = policies.Standard
	for _, tc := range []struct {
		name string
		p    policies.Policy
		want bool
	}{{"batch", batch, false}, {"batch with launchGate", gated, true}, {"launchGate, class standard", standard, false}} {
		if _, s := writtenSettings(t, c, 12, "nri/ctr/gate", tc.p); s.LaunchGate != tc.want {
			t.Errorf("%s: settings.bin launch gate %v, want %v", tc.name, s.LaunchGate, tc.want)
		}
	}
}

// writtenSettings writes policy p's tenant dir as admission does and
// returns it and the settings.bin there, decoded as the interposer would.
func writtenSettings(t *testing.T, c *Core, id bpf.TenantID, key string, p policies.Policy) (string, tenantcfg.Settings) {
	t.Helper()
	dir, err := c.writeTenantDir(id, key, p, nil, tenantGPUs{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, TenantSettingsFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tenantcfg.Decode(b)
	if err != nil {
		t.Fatalf("%s: settings.bin: %v", p.Name, err)
	}
	return dir, s
}

// One numbering of the priority classes: the kernel's tenant config and the
// device runtime's settings.bin carry the same number for each class, and an
// unknown name is standard in settings.bin (never 0, latency-critical).
func TestOneClassNumbering(t *testing.T) {
	for _, name := range policies.Classes {
		if k, d := uint32(priorityIDs[name]), uint32(devrtClass(name)); k != d {
			t.Errorf("class %q: kernel ABI %d, settings.bin %d", name, k, d)
		}
	}
	if got := devrtClass("no-such-class"); got != tenantcfg.ClassStandard {
		t.Errorf("unknown class: settings.bin class %d, want standard (%d)", got, tenantcfg.ClassStandard)
	}
	if len(policies.Classes) != 3 {
		t.Fatalf("%d catalog classes, the test knows 3", len(policies.Classes))
	}
}
