package bpf

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/lib/testutil"
)

// TestOpenRegistryMountsBPFFS is the fresh host: in a mount namespace of its
// own where /sys/fs/bpf is a plain directory (as on a host whose PID 1 is not
// systemd), eight processes' worth of concurrent OpenRegistry calls mount
// one bpf filesystem there, pin the registry, and all see the same maps.
// It fails if opening the registry needs bpffs premounted.
func TestOpenRegistryMountsBPFFS(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := helperCmd(t, "fresh-bpffs")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes / private first
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	if got["before"] != "not-bpffs" {
		t.Fatalf("the helper's /sys/fs/bpf was not made a plain directory first: %q", out)
	}
	if got["mounted"] != BPFFSRoot {
		t.Errorf("mounted %q, want %s (exactly one opener reports the mount)", got["mounted"], BPFFSRoot)
	}
	if got["bpffsMounts"] != "1" {
		t.Errorf("%s bpf mounts at %s after concurrent opens, want 1 (a second mount would hide the first one's pins)",
			got["bpffsMounts"], BPFFSRoot)
	}
	if got["sameTenant"] != "true" {
		t.Errorf("openers do not share one registry: %q", out)
	}
}

// freshBPFFSHelper runs in its own mount namespace: it unmounts every bpffs
// at BPFFSRoot, then opens the registry from 8 goroutines at once.
func freshBPFFSHelper() int {
	for OnBPFFS(BPFFSRoot) {
		if err := unix.Unmount(BPFFSRoot, unix.MNT_DETACH); err != nil {
			fmt.Fprintln(os.Stderr, "umount:", err)
			return 1
		}
	}
	fmt.Println("before=not-bpffs")
	pinDir := BPFFSRoot + "/gpuext-fresh-test"
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		mounted []string
		regs    []*Registry
		errs    []error
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := OpenRegistry(pinDir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			regs = append(regs, r)
			if m := r.MountedBPFFS(); m != "" {
				mounted = append(mounted, m)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		fmt.Fprintln(os.Stderr, "open:", errs)
		return 1
	}
	fmt.Printf("mounted=%s\n", strings.Join(mounted, ","))
	data, _ := os.ReadFile("/proc/self/mounts")
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == BPFFSRoot && f[2] == "bpf" {
			n++
		}
	}
	fmt.Printf("bpffsMounts=%d\n", n)
	id, err := regs[0].Reserve("fresh/ctr/a", "helper", GpuextTenantConfig{PriorityClass: uint32(PriorityStandard)})
	same := err == nil
	for _, r := range regs[1:] {
		got, ok, err := r.LookupKey("fresh/ctr/a")
		same = same && err == nil && ok && got == id
	}
	fmt.Printf("sameTenant=%v\n", same)
	return 0
}

// TestEnsureBPFFSError: a directory where nothing can be created gives an
// error that names it.
func TestEnsureBPFFSError(t *testing.T) {
	testutil.RequireRoot(t)
	f, err := os.CreateTemp("", "gpuext-notadir")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	dir := f.Name() + "/pins"
	_, err = EnsureBPFFS(dir)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("EnsureBPFFS(%s) = %v, want an error naming it", dir, err)
	}
}
