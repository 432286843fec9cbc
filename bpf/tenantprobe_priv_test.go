package bpf

import (
	"strconv"
	"strings"
	"testing"
)

// TestTenantProbeSeesRegistry is the end-to-end kernel read: a process in
// a registered cgroup creates a socket, and a BPF program looking up
// bpf_get_current_cgroup_id() in the pinned gpuext_cgroups finds exactly
// the tenant the registry assigned; a process elsewhere does not.
func TestTenantProbeSeesRegistry(t *testing.T) {
	requireRoot(t)
	r := openTestRegistry(t, newPinDir(t))
	cgDir, cgID := newTestCgroup(t)

	// Another tenant first, so the id under test is not trivially the only one.
	if _, err := r.Upsert("pod/other", "standard", testConfig(PriorityStandard, 0), entry(cgID+1000000, "other")); err != nil {
		t.Fatal(err)
	}
	id, err := r.Upsert("ctr/probe", "latency-critical", testConfig(PriorityLatencyCritical, 1<<30),
		CgroupEntry{CgroupID: cgID, CgroupPath: cgDir, ContainerID: "probe", Runtime: RuntimeOCIHook})
	if err != nil {
		t.Fatal(err)
	}

	probe, err := LoadTenantProbe(r)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	l, err := probe.Attach(cgroup2Root(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	run := func(cgroupDir string) int {
		t.Helper()
		cmd := helperCmd(t, "socket")
		if cgroupDir != "" {
			inCgroup(t, cmd, cgroupDir)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("socket helper: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("socket helper printed %q", out)
		}
		return pid
	}

	inside := run(cgDir)
	rep, ok, err := probe.Report(inside)
	if err != nil || !ok {
		t.Fatalf("probe saw nothing from pid %d in the tenant's cgroup (%v)", inside, err)
	}
	if rep.CgroupId != uint64(cgID) || rep.TenantId != uint32(id) {
		t.Fatalf("probe saw cgroup %d tenant %d for pid %d, want cgroup %d tenant %d",
			rep.CgroupId, rep.TenantId, inside, cgID, id)
	}
	st, err := r.Stats(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Launches != uint64(rep.Hits) || st.Launches == 0 {
		t.Fatalf("tenant %d launches = %d, want the %d sockets the probe saw", id, st.Launches, rep.Hits)
	}

	outside := run("")
	rep, ok, err = probe.Report(outside)
	if err != nil || !ok {
		t.Fatalf("probe saw nothing from pid %d outside the cgroup (%v)", outside, err)
	}
	if rep.CgroupId == uint64(cgID) || rep.TenantId == uint32(id) {
		t.Fatalf("process outside the cgroup reported as cgroup %d tenant %d", rep.CgroupId, rep.TenantId)
	}

	// After Detach the kernel no longer finds the tenant for that cgroup.
	if _, err := r.Detach(cgID); err != nil {
		t.Fatal(err)
	}
	again := run(cgDir)
	rep, ok, err = probe.Report(again)
	if err != nil || !ok || rep.CgroupId != uint64(cgID) || rep.TenantId != 0 {
		t.Fatalf("after Detach: report %+v (seen %v, %v), want cgroup %d tenant 0", rep, ok, err, cgID)
	}
}
