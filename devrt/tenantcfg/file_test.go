package tenantcfg

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/policies"
)

// settingsFrom says, for every File field, which Settings
// fields (settings.bin, what the device runtime reads) it feeds, or why the
// device runtime has no use for it. A field added to File fails
// TestFileFieldsReachSettings until it is listed here: either it gets
// a counterpart in devrt/include/gpuext_devrt_tenant.h and File.Settings,
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
	"GPUs":              {fields: []string{"HostGPUs"}},
	"GPUQuotaBytes":     {fields: []string{"DeviceQuotas"}},
	"GPUMemoryBytes":    {hostOnly: "the scheduler's grant, the quotas' ceiling: a policy change keeps it; the interposer enforces GPUQuotaBytes"},
	"LatencyTarget":     {fields: []string{"LatencyTarget"}},
}

// TestFileFieldsReachSettings changes one File field at a time
// and checks which settings the device runtime would see change: exactly
// the ones settingsFrom lists. Every settings field is fed by some field.
func TestFileFieldsReachSettings(t *testing.T) {
	base := File{Class: string(policies.Standard)}
	typ := reflect.TypeOf(base)
	fed := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		want, ok := settingsFrom[f.Name]
		if !ok {
			t.Errorf("File.%s has no settings counterpart: give it one in gpuext_devrt_tenant.h and File.Settings, or list it in settingsFrom as host-only with the reason", f.Name)
			continue
		}
		if (len(want.fields) == 0) == (want.hostOnly == "") {
			t.Errorf("settingsFrom[%q]: give settings fields or a host-only reason, not both or neither", f.Name)
		}
		from := base
		if f.Name == "LatencyTarget" {
			// a target is a latency-critical tenant's only
			from.Class = string(policies.LatencyCritical)
		}
		changed := from
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch {
		case f.Name == "Class":
			v.SetString(string(policies.LatencyCritical))
		case f.Name == "LatencyTarget":
			v.SetString("1.5x")
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
			t.Fatalf("File.%s: kind %s: teach this test to change it", f.Name, v.Kind())
		}
		got := changedFields(from.Settings(), changed.Settings())
		if !reflect.DeepEqual(got, want.fields) {
			t.Errorf("changing File.%s changes settings %v, settingsFrom says %v", f.Name, got, want.fields)
		}
		for _, s := range got {
			fed[s] = true
		}
	}
	for name := range settingsFrom {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("settingsFrom lists %q, which File no longer has", name)
		}
	}
	st := reflect.TypeOf(Settings{})
	for i := 0; i < st.NumField(); i++ {
		if !fed[st.Field(i).Name] {
			t.Errorf("settings field %s is fed by no File field", st.Field(i).Name)
		}
	}
}

func changedFields(a, b Settings) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

// A tenant dir written again with the same settings keeps its files (a
// running process compares the inode and mtime to see new settings); new
// settings replace the file.
func TestWriteFilesOnlyWhenChanged(t *testing.T) {
	dir := t.TempDir()
	tf := File{TenantID: 4, Class: string(policies.BestEffort), QuotaBytes: 1 << 30, SMPercent: 30}
	if err := WriteFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	ino := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	first := ino()
	if err := WriteFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	if ino() != first {
		t.Error("the same settings replaced settings.bin")
	}
	tf.QuotaBytes = 2 << 30
	if err := WriteFiles(dir, tf); err != nil {
		t.Fatal(err)
	}
	if ino() == first {
		t.Error("new settings did not replace settings.bin")
	}
	b, _ := os.ReadFile(path)
	if s, err := Decode(b); err != nil || s.QuotaBytes != 2<<30 || s.Class != ClassBestEffort {
		t.Errorf("settings.bin after the change: %+v, %v", s, err)
	}
}

// A latency target reaches settings.bin for a latency-critical tenant
// only, in the policy's two forms, and a target that does not parse (a
// hand-written config.json) is none rather than a file the readers refuse.
func TestFileLatencyTarget(t *testing.T) {
	lc := string(policies.LatencyCritical)
	for _, tc := range []struct {
		class, target string
		want          LatencyTarget
	}{
		{lc, "1.5x", LatencyTarget{RatioMilli: 1500}},
		{lc, "800us", LatencyTarget{P99: 800 * time.Microsecond}},
		{lc, "", LatencyTarget{}},
		{lc, "fast", LatencyTarget{}},
		{lc, "0.5x", LatencyTarget{}}, // below the smallest ratio policies allow
		{string(policies.BestEffort), "1.5x", LatencyTarget{}},
		{string(policies.Standard), "800us", LatencyTarget{}},
	} {
		f := File{TenantID: 2, Class: tc.class, LatencyTarget: tc.target}
		if got := f.Settings().LatencyTarget; got != tc.want {
			t.Errorf("class %s, latencyTarget %q: settings target %+v, want %+v", tc.class, tc.target, got, tc.want)
		}
		b, err := Encode(f.Settings())
		if err != nil {
			t.Fatalf("class %s, latencyTarget %q: %v", tc.class, tc.target, err)
		}
		if s, err := Decode(b); err != nil || s.LatencyTarget != tc.want {
			t.Errorf("class %s, latencyTarget %q: settings.bin holds %+v (%v), want %+v", tc.class, tc.target, s.LatencyTarget, err, tc.want)
		}
	}
}

// Name is ClassOf's inverse for every catalog class.
func TestClassName(t *testing.T) {
	for _, name := range policies.Classes {
		if got := ClassOf(name).Name(); got != name {
			t.Errorf("ClassOf(%q).Name() = %q", name, got)
		}
	}
	if got := Class(7).Name(); got != "class-7" {
		t.Errorf("Class(7).Name() = %q", got)
	}
}
