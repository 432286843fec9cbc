package memguard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/bpftest"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
)

// BenchmarkGuardCPU is the guard's cost the issue bounds (at most 0.5% of
// one core with 100 tenants on 8 GPUs): 100 tenants in a real registry,
// each a real cgroup with two real processes, with tenant files written as
// admission writes them; gpuext-gpuview --watch over the fake NVML lists
// the 200 processes spread over 8 GPUs, every 500 ms, and the runner maps
// and checks each sample for 10 s. It reports the agent side's CPU
// (getrusage of this process: decoding, pid to cgroup, limits, checks) and
// gpuext-gpuview's (its rusage when it exits), each as a percentage of one
// core. The fake NVML's own cost stands in for the driver's: the real
// driver's is measured by make gpu-test's memguard section (memguard-cpu).
func BenchmarkGuardCPU(b *testing.B) {
	const tenants, perTenant, gpus = 100, 2, 8
	reg, _ := bpftest.Registry(b)
	state := b.TempDir()
	var pids []string
	for i := range tenants {
		dir, id := cgrouptest.New(b)
		tid, err := reg.Upsert(fmt.Sprintf("bench/t%d", i), "quota", bpf.GpuextTenantConfig{QuotaBytes: 4 << 30},
			bpf.CgroupEntry{CgroupID: id, CgroupPath: strings.TrimPrefix(dir, cgrouptest.V2Root(b)), ContainerID: fmt.Sprintf("c%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		tdir := admission.TenantDir(state, uint64(tid))
		if err := os.MkdirAll(tdir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := tenantcfg.WriteFiles(tdir, tenantcfg.File{TenantID: uint32(tid), Policy: "quota", QuotaBytes: 4 << 30}); err != nil {
			b.Fatal(err)
		}
		for j := range perTenant {
			cmd := cgrouptest.RunIn(b, dir, "sleep", "600")
			pids = append(pids, fmt.Sprintf("%d:%d:%d", (i*perTenant+j)%gpus, cmd.Process.Pid, 1<<30))
		}
	}
	bin, fake := testutil.BuildGpuviewOverFake(b)
	wrapper := filepath.Join(b.TempDir(), "gpuview.sh")
	script := fmt.Sprintf("#!/bin/sh\nexport LD_LIBRARY_PATH=%s FAKECUDA_DEVICES=%d FAKENVML_PROCESSES=%s\nexec %s \"$@\"\n",
		fake, gpus, strings.Join(pids, ","), bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	res, err := cgroup.NewResolver("/")
	if err != nil {
		b.Fatal(err)
	}
	cgOf := ResolverCgroup(res)
	log := logrus.New()
	log.SetOutput(os.Stderr)
	r := NewRunner(Config{
		Gpuview:  func() (string, error) { return wrapper, nil },
		Interval: 500 * time.Millisecond,
		Limits:   RegistryLimits(reg, state, ActionKill),
		CgroupOf: cgOf,
		Killer:   PidfdKiller{CgroupOf: cgOf},
		Log:      logrus.NewEntry(log),
	})
	const run = 10 * time.Second
	var before, after, kids0, kids unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &kids0) // the builds above
	ctx, cancel := context.WithTimeout(context.Background(), run)
	b.ResetTimer()
	r.Run(ctx)
	b.StopTimer()
	cancel()
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &kids) // gpuext-gpuview, reaped when Run ended (and the sleeps: still running)
	st := r.Status()
	if st.Samples < 15 || st.Kills != 0 {
		b.Fatalf("samples %d (want ~20), kills %d (want 0: every tenant is within): %+v", st.Samples, st.Kills, st)
	}
	cpu := func(ru unix.Rusage) time.Duration {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	agent := cpu(after) - cpu(before)
	b.ReportMetric(100*agent.Seconds()/run.Seconds(), "agent-cpu-%")
	b.ReportMetric(100*(cpu(kids)-cpu(kids0)).Seconds()/run.Seconds(), "gpuview-cpu-%")
	b.ReportMetric(float64(st.Samples), "samples")
}
