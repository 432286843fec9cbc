package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf/bpftest"

	"github.com/gpuext/gpuext/bpf"
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
		Priority: "latency-critical"}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("tenants --json = %+v, want [%+v]", rows, want)
	}
	out.Reset()
	if err := run([]string{"tenants", "--pin-dir", pin}, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"TENANT", "web", "ns/p", "containerd", "/kubepods/pod1/abc", "4242", "quota", "8GiB", "latency-critical"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("tenant table lacks %q:\n%s", s, out.String())
		}
	}
}
