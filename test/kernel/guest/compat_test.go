//go:build kernellab

package guest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// newTSGAs creates TSG name in gpusim context ctx from a thread named comm
// (what bpf_get_current_comm returns in tsg_init); the error is the bind result.
func newTSGAs(t *testing.T, name, ctx, comm string) error {
	t.Helper()
	t.Cleanup(func() { os.WriteFile(gpusimDir+"/runlist", []byte("destroy "+name), 0) })
	done := make(chan error, 1)
	go func() {
		// The thread exits with the goroutine while locked: its name goes with it.
		runtime.LockOSThread()
		cname, err := unix.BytePtrFromString(comm)
		if err == nil {
			err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(cname)), 0, 0, 0)
		}
		if err != nil {
			done <- err
			return
		}
		done <- os.WriteFile(gpusimDir+"/runlist", []byte("create "+name+" "+filepath.Base(ctx)), 0)
	}()
	return <-done
}

// comm-timeslice (examples/comm-timeslice) is written in gpu_ext's
// scheduling API (nv_gpu_sched_ops, on_task_init, bpf_nv_gpu_set_timeslice,
// bpf_nv_gpu_set_interleave, SEC(".struct_ops")) and built by lab.sh with
// only the SDK, through its compatibility header.  Attached from the policy
// directory as gpuext sched ops for the standard class, it gives a TSG the
// values its creating process's name has in the maps: "gx-infer" 300 us at
// RM level HIGH (gpuext level 3), "gx-batch" 8 ms at LOW (1); an unnamed
// process keeps stock; "gx-huge" asks for 20 s, which the core refuses, so
// that TSG keeps stock too and the refusal is counted.
func TestCompatGpuExtTimesliceByComm(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	dir, l := dirLoader(t)
	p, ok := dir.Get("comm-timeslice")
	if !ok {
		t.Fatalf("comm-timeslice not in %s (has %v)", labPolicyDir, dir.Names())
	}
	a, err := l.AttachPolicy(p, kernelpolicy.AttachOptions{})
	if err != nil {
		t.Fatalf("attach comm-timeslice: %v", err)
	}
	defer a.Close()
	ts, ok1 := a.Map("comm_timeslice_us")
	il, ok2 := a.Map("comm_interleave")
	counts, ok3 := a.Map("counts")
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("comm-timeslice lacks its maps")
	}
	key := func(comm string) [16]byte {
		var k [16]byte
		copy(k[:], comm)
		return k
	}
	for comm, us := range map[string]uint64{"gx-infer": 300, "gx-batch": 8000, "gx-huge": 20_000_000} {
		if err := ts.Put(key(comm), us); err != nil {
			t.Fatal(err)
		}
	}
	for comm, level := range map[string]uint32{"gx-infer": 2, "gx-batch": 0} {
		if err := il.Put(key(comm), level); err != nil {
			t.Fatal(err)
		}
	}
	cg, _ := schedTenant(t, reg, "compat-std", bpf.PriorityStandard, 0, 0)
	ctx := gpuCtx(t, "ctx-compat-std", cg)
	for _, c := range []struct{ tsg, comm string }{{"inf0", "gx-infer"}, {"bat0", "gx-batch"}, {"oth0", "gx-other"}, {"huge0", "gx-huge"}} {
		if err := newTSGAs(t, c.tsg, ctx, c.comm); err != nil {
			t.Fatalf("create tsg %s as %s: %v", c.tsg, c.comm, err)
		}
	}
	tsgs, order := runlist(t)
	expectTSG(t, tsgs, "inf0", 300, 3, "comm_timeslice", "admitted")
	expectTSG(t, tsgs, "bat0", 8000, 1, "comm_timeslice", "admitted")
	expectTSG(t, tsgs, "oth0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	expectTSG(t, tsgs, "huge0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	if n, m := count(order, "inf0"), count(order, "bat0"); n != 3 || m != 1 {
		t.Errorf("runlist pass gives inf0 %d slots and bat0 %d, want 3 and 1: %v", n, m, order)
	}
	ops := schedOps(t)
	t.Logf("sched_ops: %s", ops)
	if !strings.Contains(ops, "comm_timeslice classes 0x2 calls 4 handled 2 errors 0 refused 1 denied 0") {
		t.Errorf("sched_ops %q, want comm_timeslice with 4 calls, 2 handled, 1 refused", ops)
	}
	var got [4]uint64
	for i := range got {
		if err := counts.Lookup(uint32(i), &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	// init, named, refused, bind
	if got != [4]uint64{4, 3, 1, 4} {
		t.Errorf("policy counts init/named/refused/bind %v, want [4 3 1 4]", got)
	}
}
