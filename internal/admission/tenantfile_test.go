package admission

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

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
		if got := tenantcfg.ClassOf(name); got != id {
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
		// the built-in latency-critical policy asks for 1.5x of its p99 alone
		var target tenantcfg.LatencyTarget
		if p.Priority.Class == policies.LatencyCritical {
			target = tenantcfg.LatencyTarget{RatioMilli: 1500}
		}
		want := tenantcfg.Settings{TenantID: 9, QuotaBytes: p.Memory.QuotaBytes, ActiveWindow: window,
			Class: classes[p.Priority.Class], SMPercent: p.Priority.EffectiveSMPercent(),
			MPSClientPriority: p.Priority.EffectiveMPSClientPriority(), LaunchGate: p.Priority.EffectiveLaunchGate(),
			LatencyTarget: target}
		if !reflect.DeepEqual(s, want) {
			t.Errorf("%s: settings.bin %+v, want %+v", name, s, want)
		}
		var tf tenantcfg.File
		if b, err := os.ReadFile(filepath.Join(dir, TenantConfigFile)); err != nil || json.Unmarshal(b, &tf) != nil || !reflect.DeepEqual(tf.Settings(), s) {
			t.Errorf("%s: config.json does not describe settings.bin: %+v vs %+v (%v)", name, tf.Settings(), s, err)
		}
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

// A latency target reaches config.json and settings.bin only for a
// latency-critical policy: an override to another class drops it, and a
// policy without one has none.
func TestTenantDirLatencyTarget(t *testing.T) {
	c, _ := probeCore(t, FailClosed, nil)
	lc, ok := policies.BuiltinCatalog().Get("latency-critical")
	if !ok {
		t.Fatal("no built-in latency-critical policy")
	}
	absolute := lc
	absolute.Priority.LatencyTarget = "800us"
	none := lc
	none.Priority.LatencyTarget = ""
	standard := lc
	standard.Priority.Class = policies.Standard
	for _, tc := range []struct {
		name string
		p    policies.Policy
		json string
		want tenantcfg.LatencyTarget
	}{
		{"latency-critical", lc, "1.5x", tenantcfg.LatencyTarget{RatioMilli: 1500}},
		{"latencyTarget 800us", absolute, "800us", tenantcfg.LatencyTarget{P99: 800 * time.Microsecond}},
		{"no latencyTarget", none, "", tenantcfg.LatencyTarget{}},
		{"latencyTarget, class standard", standard, "", tenantcfg.LatencyTarget{}},
	} {
		_, s := writtenSettings(t, c, 13, "nri/ctr/lat", tc.p)
		if s.LatencyTarget != tc.want {
			t.Errorf("%s: settings.bin latency target %+v, want %+v", tc.name, s.LatencyTarget, tc.want)
		}
		tf, err := ReadTenantFile(c.cfg.StateDir, 13)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tf.LatencyTarget != tc.json {
			t.Errorf("%s: config.json latencyTarget %q, want %q", tc.name, tf.LatencyTarget, tc.json)
		}
	}
}

// writtenSettings writes policy p's tenant dir as admission does and
// returns it and the settings.bin there, decoded as the interposer would.
func writtenSettings(t *testing.T, c *Core, id bpf.TenantID, key string, p policies.Policy) (string, tenantcfg.Settings) {
	t.Helper()
	dir, err := c.writeTenantDir(id, tenantFile(key, p, nil, TenantGPUs{}), nil)
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
		if k, d := uint32(priorityIDs[name]), uint32(tenantcfg.ClassOf(name)); k != d {
			t.Errorf("class %q: kernel ABI %d, settings.bin %d", name, k, d)
		}
	}
	if got := tenantcfg.ClassOf("no-such-class"); got != tenantcfg.ClassStandard {
		t.Errorf("unknown class: settings.bin class %d, want standard (%d)", got, tenantcfg.ClassStandard)
	}
	if len(policies.Classes) != 3 {
		t.Fatalf("%d catalog classes, the test knows 3", len(policies.Classes))
	}
}
