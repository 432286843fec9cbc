package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/bpf/bpftest"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
)

func TestPoliciesJSONListsCatalog(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"policies", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name string }
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("policies --json is not JSON: %v\n%s", err, out.String())
	}
	names := map[string]bool{}
	for _, p := range list {
		names[p.Name] = true
	}
	for _, want := range []string{"default", "latency-critical", "batch", "vector-search", "quota"} {
		if !names[want] {
			t.Errorf("policies --json lacks %q: %s", want, out.String())
		}
	}
}

func TestErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"policies", "show", "nope"}, `unknown policy "nope"`},
		{[]string{"tenants", "--pin-dir", "/nonexistent/gpuext"}, "no tenant registry at /nonexistent/gpuext"},
	} {
		err := run(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpuextctl %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// TestTenantsTable reads a real pinned registry: the table and --json show
// the tenant, container, cgroup, policy, quota and priority registered.
func TestTenantsTable(t *testing.T) {
	reg, pin := bpftest.Registry(t)
	cfg := bpf.GpuextTenantConfig{QuotaBytes: 8 << 30, PriorityClass: uint32(bpf.PriorityLatencyCritical)}
	id, err := reg.Upsert("nri/ctr/abc", "quota", cfg, bpf.CgroupEntry{CgroupID: cgroup.ID(4242),
		CgroupPath: "/kubepods/pod1/abc", ContainerID: "abc", ContainerName: "web", PodName: "p", PodNamespace: "ns",
		Runtime: bpf.RuntimeNRI})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"tenants", "--json", "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []TenantRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("tenants --json: %v\n%s", err, out.String())
	}
	want := TenantRow{Tenant: uint32(id), Key: "nri/ctr/abc", Container: "abc", ContainerName: "web", Pod: "ns/p",
		Runtime: "containerd", Cgroup: "/kubepods/pod1/abc", CgroupID: 4242, Policy: "quota", QuotaBytes: 8 << 30,
		Layer: "devrt", Priority: "latency-critical"}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("tenants --json = %+v, want [%+v]", rows, want)
	}
	out.Reset()
	if err := run([]string{"tenants", "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"TENANT", "web", "ns/p", "quota", "8GiB", "LAYER", "devrt", "latency-critical", "MEM-NOW", "MEM-PEAK"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("tenant table lacks %q:\n%s", s, out.String())
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if len(l) > 100 {
			t.Errorf("tenant table: a %d-column line (want at most 100; -o wide for more):\n%s", len(l), out.String())
		}
	}
	out.Reset()
	if err := run([]string{"tenants", "-o", "wide", "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"TENANT", "abc", "web", "ns/p", "containerd", "/kubepods/pod1/abc", "4242", "quota", "8GiB",
		"latency-critical", "REFUSED", "DELAYED"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("tenant table -o wide lacks %q:\n%s", s, out.String())
		}
	}
}

// TestTenantsLayerDmem: a tenant whose cgroup's dmem.max limits a region is
// held by the kernel (LAYER dmem); one whose dmem.max is "max" is not; on a
// host root given by the config (a fixture tree shaped like cgroupfs).
func TestTenantsLayerDmem(t *testing.T) {
	reg, pin := bpftest.Registry(t)
	host := t.TempDir()
	v2 := filepath.Join(host, "sys/fs/cgroup")
	for p, data := range map[string]string{
		"cgroup.controllers":      "memory dmem\n",
		"dmem.capacity":           "nvidia/0000:17:00.0/vidmem 85899345920\n",
		"pods/held/dmem.max":      "nvidia/0000:17:00.0/vidmem 4294967296\n",
		"pods/unlimited/dmem.max": "nvidia/0000:17:00.0/vidmem max\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(v2, p)), 0o755)
		if err := os.WriteFile(filepath.Join(v2, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"held", "unlimited"} {
		st, err := os.Stat(filepath.Join(v2, "pods", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Upsert("nri/ctr/"+name, "quota", bpf.GpuextTenantConfig{QuotaBytes: 4 << 30},
			bpf.CgroupEntry{CgroupID: cgroup.ID(st.Sys().(*syscall.Stat_t).Ino), CgroupPath: "/pods/" + name,
				ContainerID: name, Runtime: bpf.RuntimeNRI}); err != nil {
			t.Fatal(err)
		}
	}
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgFile, []byte(`{"hostRoot": "`+host+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"--config", cfgFile, "tenants", "--json", "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []TenantRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Container] = r.Layer
	}
	if len(got) != 2 || got["held"] != "dmem" || got["unlimited"] != "devrt" {
		t.Fatalf("layers = %v, want held: dmem, unlimited: devrt", got)
	}
}

// policies attached/attach/detach without a core say how to load it.
func TestKernelPoliciesWithoutCore(t *testing.T) {
	nocore := filepath.Join(t.TempDir(), "gpuext")
	for _, args := range [][]string{
		{"policies", "attached", "--debugfs", nocore, "--pin-dir", t.TempDir()},
		{"policies", "attach", "--debugfs", nocore, "--pin-dir", t.TempDir(), "fifo"},
	} {
		err := run(args, &bytes.Buffer{})
		if !errors.Is(err, kernelpolicy.ErrNoCore) || !strings.Contains(err.Error(), "modprobe gpuext") {
			t.Errorf("gpuextctl %v: %v, want ErrNoCore saying modprobe gpuext", args, err)
		}
	}
	if err := run([]string{"policies", "detach", "--pin-dir", t.TempDir(), "fifo"}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "not attached") {
		t.Errorf("detach of a policy never attached: %v", err)
	}
}

// policies attached --json reads pins and a (fake) core's counters.
func TestKernelPoliciesAttachedJSON(t *testing.T) {
	dbg := t.TempDir()
	for name, data := range map[string]string{
		"abi_version": strconv.FormatUint(uint64(bpf.ABIVersion), 10) + "\n",
		"ops":         "fifo calls 7 handled 5 errors 1 refused 2\n",
		"sched_ops":   "sched_priority classes 0x5 calls 3 handled 3 errors 0 refused 0 denied 0\n",
	} {
		if err := os.WriteFile(filepath.Join(dbg, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pin := t.TempDir()
	os.MkdirAll(filepath.Join(pin, "links"), 0o755)
	for _, n := range []string{"fifo", "sched_priority"} {
		os.WriteFile(filepath.Join(pin, "links", n), nil, 0o644)
	}
	var out bytes.Buffer
	if err := run([]string{"policies", "attached", "--json", "--debugfs", dbg, "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []AttachedRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("policies attached --json: %v\n%s", err, out.String())
	}
	want := []AttachedRow{
		{Name: "fifo", Ops: "fifo", Kind: "memory", Pinned: true, Listed: true, Calls: 7, Handled: 5, Refused: 2, Errors: 1},
		{Name: "sched_priority", Ops: "sched_priority", Kind: "sched", Classes: []string{"latency-critical", "best-effort"},
			Pinned: true, Listed: true, Calls: 3, Handled: 3},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("policies attached --json = %+v, want %+v", rows, want)
	}
	out.Reset()
	if err := run([]string{"policies", "attached", "--debugfs", dbg, "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"NAME", "fifo", "memory", "sched_priority", "latency-critical,best-effort"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("attached table lacks %q:\n%s", s, out.String())
		}
	}
}
