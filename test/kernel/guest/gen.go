// Package guest holds the tests that run inside the kernel lab's qemu guest
// (test/kernel/lab.sh builds them with `go test -c` and boots them).  They
// need gpuext.ko and gpusim.ko loaded, debugfs, bpffs and cgroup2 mounted.
package guest

//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types rogue rogue.bpf.c -- -I../../../kmod/include -I../../../bpf/kernelpolicy -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types blockcount blockcount.bpf.c -- -I../../../kmod/include -I../../../bpf/kernelpolicy -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types roguePrefetch rogue_prefetch.bpf.c -- -I../../../kmod/include -I../../../bpf/kernelpolicy -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types rogueSched rogue_sched.bpf.c -- -I../../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types xblock xblock.bpf.c -- -I../../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types nodecap nodecap.bpf.c -- -I../../../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types preempt preempt.bpf.c -- -I../../../kmod/include -I/usr/include/x86_64-linux-gnu
